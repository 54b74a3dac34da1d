"""The bundle's manifest: each file's name, version, group, size and sha256, checked before installing.

Standard library only: the target machine's system Python runs it before any venv exists
(`python3 -m appliance.bundle.manifest verify DIR`). A missing, damaged or unlisted file is one
line naming it and exit 2; nothing is installed from a bundle that does not check out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

MANIFEST = "manifest.json"
FORMAT = 1
#: the folders pip or apt read from; a file in them that the manifest does not list is refused
CHECKED_FOLDERS = ("wheels", "build", "sources", "project", "debs")
#: the group every install needs; the others are extras installed when asked for
CORE = "core"


class BundleError(Exception):
    """A bundle that cannot be installed from: the message is one line naming the file."""


@dataclass(frozen=True)
class BundleFile:
    """One file of the bundle. `group` is the extra that needs it (core, build, an extra, debs-*)."""

    path: str
    name: str
    version: str
    group: str
    kind: str
    sha256: str
    size: int
    built_for: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.name} {self.version}, group {self.group}"


@dataclass(frozen=True)
class Manifest:
    """What `make bundle` wrote and for which Python and machine."""

    python: str
    machine: str
    appliance: str
    commit: str
    created: str
    files: list[BundleFile]
    debian: str = ""
    #: Debian package -> the .deb files it needs on a bare Debian (shared files are listed once in `files`)
    debs: dict[str, list[str]] = field(default_factory=dict)
    format: int = FORMAT

    def groups(self) -> list[str]:
        return sorted({entry.group for entry in self.files})

    def group_bytes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for entry in self.files:
            sizes[entry.group] = sizes.get(entry.group, 0) + entry.size
        return sizes

    def write(self, folder: Path) -> None:
        record = asdict(self)
        record["files"] = sorted(record["files"], key=lambda entry: (entry["group"], entry["path"]))
        (folder / MANIFEST).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def this_machine() -> str:
    return f"{platform.system().lower()}-{platform.machine()}"


def stream_sha256(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return stream_sha256(handle)


def entry_for(
    folder: Path, path: Path, *, name: str, version: str, group: str, kind: str, built_for: dict[str, Any] | None = None
) -> BundleFile:
    return BundleFile(
        path=path.relative_to(folder).as_posix(),
        name=name,
        version=version,
        group=group,
        kind=kind,
        sha256=file_sha256(path),
        size=path.stat().st_size,
        built_for=built_for or {},
    )


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(f"{path}: missing; a bundle is a folder written by `make bundle BUNDLE={folder}`")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        files = [BundleFile(**entry) for entry in record.pop("files")]
        manifest = Manifest(files=files, **record)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise BundleError(f"{path}: not a bundle manifest ({type(error).__name__}: {error})") from None
    if manifest.format != FORMAT:
        raise BundleError(f"{path}: format {manifest.format}; this checkout reads format {FORMAT}")
    return manifest


def problems(folder: Path, manifest: Manifest) -> list[str]:
    """Every file that is missing, damaged or unlisted, one line each, and a Python or machine mismatch."""
    found: list[str] = []
    if (manifest.python, manifest.machine) != (this_python(), this_machine()):
        found.append(
            f"{folder / MANIFEST}: built for Python {manifest.python} on {manifest.machine}; "
            f"this is Python {this_python()} on {this_machine()}"
        )
    listed = set()
    for entry in manifest.files:
        listed.add(entry.path)
        path = folder / entry.path
        if entry.path.startswith("/") or ".." in entry.path.split("/"):
            found.append(f"{folder / MANIFEST}: the entry {entry.path!r} points outside the bundle")
        elif path.is_symlink() or not path.is_file():
            found.append(f"{path}: missing from the bundle, or not a plain file ({entry.describe()})")
        elif path.stat().st_size != entry.size or file_sha256(path) != entry.sha256:
            found.append(f"{path}: damaged, its sha256 differs from the manifest's ({entry.describe()})")
    for name in CHECKED_FOLDERS:
        for path in sorted((folder / name).rglob("*")) if (folder / name).is_dir() else []:
            if path.is_file() and path.relative_to(folder).as_posix() not in listed:
                found.append(f"{path}: not in the manifest; pip or apt would read it, so it is refused")
    return found


def verify(folder: Path) -> Manifest:
    manifest = read_manifest(folder)
    found = problems(folder, manifest)
    if found:
        raise BundleError("\n".join(found))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m appliance.bundle.manifest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("verify", help="check every file's size and sha256; exit 2 on any problem")
    check.add_argument("bundle", type=Path)
    has = commands.add_parser("has", help="exit 0 when the bundle holds this group, 1 otherwise")
    has.add_argument("bundle", type=Path)
    has.add_argument("group")
    args = parser.parse_args(argv)
    try:
        if args.command == "has":
            return 0 if args.group in read_manifest(args.bundle).groups() else 1
        manifest = verify(args.bundle)
    except BundleError as error:
        for line in str(error).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    total = sum(entry.size for entry in manifest.files)
    print(
        f"bundle {args.bundle}: {len(manifest.files)} files, {total / 1e6:.0f} MB, sha256s match "
        f"(appliance {manifest.appliance} at {manifest.commit[:12]}; groups {', '.join(manifest.groups())})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
