"""`make bundle BUNDLE=DIR`: write everything an air-gapped install needs into DIR.

Run in the project's venv on a machine that reaches the registries. Each group's distributions are
downloaded at the venv's versions (plan.py); a source-only distribution is built into a wheel here,
so the target compiles nothing but llama.cpp, and that only when the wheel built here does not run on
its CPU (its sdist and build requirements come along). The Debian packages for bubblewrap and
chromium come with every dependency a bare Debian of this release lacks. manifest.json lists each
file's sha256 and size; the target checks them before installing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from appliance import __version__
from appliance.bundle.debs import deb_name_and_version, write_index
from appliance.bundle.manifest import (
    BundleError,
    BundleFile,
    Manifest,
    entry_for,
    file_sha256,
    stream_sha256,
    this_machine,
    this_python,
    verify,
)
from appliance.bundle.plan import GROUP_EXTRAS, NOT_BUNDLED, PROJECT, Plan, plan_bundle, unbundled

REPO = Path(__file__).resolve().parents[2]
LLAMA = "llama-cpp-python"
#: the runtime versions, for the target's pip (`--constraint`): the Makefile names this file
CONSTRAINTS = "constraints.txt"
LLAMA_LIBRARY = "llama_cpp/lib/libllama.so"
#: build requirements scikit-build-core adds when the target has no (recent enough) cmake or ninja
BUILD_TOOLS = ("cmake>=3.21", "ninja")
#: bundle group -> the Debian packages it carries, with what a bare Debian lacks of their dependencies
DEB_GROUPS = {"debs-bubblewrap": ("bubblewrap",), "debs-chromium": ("chromium", "chromium-driver")}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def files_in(folder: Path) -> set[Path]:
    return {path for path in folder.iterdir() if path.is_file()} if folder.is_dir() else set()


def name_and_version(path: Path) -> tuple[str, str]:
    try:
        if path.name.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
        else:
            name, version = parse_sdist_filename(path.name)
    except (InvalidWheelFilename, InvalidSdistFilename) as error:
        raise BundleError(f"{path}: pip downloaded a file whose name is not a distribution's ({error})") from None
    return str(name), str(version)


class BundleBuilder:
    """Fills one folder group by group, then writes its manifest (and a tar of it when asked)."""

    def __init__(self, out: Path, groups: Sequence[str]) -> None:
        self.out = out
        self.groups = list(groups)
        self.entries: list[BundleFile] = []
        self.deb_closures: dict[str, list[str]] = {}

    def add(self, path: Path, group: str, kind: str, built_for: dict[str, object] | None = None) -> None:
        name, version = name_and_version(path) if kind != "deb" else deb_name_and_version(path)
        self.entries.append(
            entry_for(self.out, path, name=name, version=version, group=group, kind=kind, built_for=built_for)
        )

    def distributions(self, plan: Plan, pins: Path) -> None:
        wheels = self.out / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        for group in self.groups:
            requirements = [pin.requirement() for pin in plan.group(group)] + plan.unmet.get(group, [])
            listing = self.out / f".{group}-requirements.txt"
            listing.write_text("\n".join(requirements) + "\n", encoding="utf-8")
            before = files_in(wheels)
            print(f"bundle: downloading {group} ({len(requirements)} requirements)", flush=True)
            pip("download", "--quiet", "--dest", str(wheels), "--constraint", str(pins), "--requirement", str(listing))
            listing.unlink()
            for path in sorted(files_in(wheels) - before):
                name, version = name_and_version(path)
                if self.holds(name, version):  # an sdist bundled already, as a wheel built from it
                    path.unlink()
                elif path.name.endswith(".whl"):
                    self.add(path, group, "wheel")
                elif canonicalize_name(name) == LLAMA:
                    self.llama_cpp(path, group)
                else:
                    self.wheel_from_sdist(path, wheels, group)

    def holds(self, name: str, version: str) -> bool:
        return any(
            canonicalize_name(entry.name) == canonicalize_name(name) and entry.version == version
            for entry in self.entries
        )

    def wheel_from_sdist(self, sdist: Path, wheels: Path, group: str) -> None:
        before = files_in(wheels)
        pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(sdist))
        sdist.unlink()
        for path in sorted(files_in(wheels) - before):
            self.add(path, group, "wheel built here from its sdist")

    def llama_cpp(self, sdist: Path, group: str) -> None:
        """The sdist goes to sources/ (the target builds it if need be); the wheel the venv runs goes to wheels/."""
        sources = self.out / "sources"
        sources.mkdir(exist_ok=True)
        kept = sources / sdist.name
        shutil.move(sdist, kept)
        self.add(kept, group, "sdist")
        version = name_and_version(kept)[1]
        wheel, matches = self.llama_wheel(version, kept)
        built_for = {**this_cpu(), "cflags": os.environ.get("CFLAGS", ""), "same_library_as_the_venv": matches}
        self.add(wheel, group, "wheel built here for this CPU", built_for)
        self.build_requirements(kept)

    def llama_wheel(self, version: str, sdist: Path) -> tuple[Path, bool]:
        """pip's cached wheel when its library is the venv's own; otherwise built again here (5 to 10 minutes)."""
        import llama_cpp  # the venv's own build

        installed = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
        venv_library = file_sha256(installed) if installed.is_file() else ""
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "cache", "list", "--format", "abspath", f"llama_cpp_python-{version}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        for cached in map(Path, listed):
            if library_sha256(cached) == venv_library:
                target = self.out / "wheels" / cached.name
                shutil.copyfile(cached, target)
                return target, True
        print(f"bundle: no cached wheel holds the venv's llama.cpp; building {sdist.name} for this CPU", flush=True)
        before = files_in(self.out / "wheels")
        pip("wheel", "--quiet", "--no-deps", "--no-binary", LLAMA, "--wheel-dir", str(self.out / "wheels"), str(sdist))
        (built,) = files_in(self.out / "wheels") - before
        return built, library_sha256(built) == venv_library

    def build_requirements(self, llama_sdist: Path) -> None:
        """The project's and llama.cpp's build backends, for an install that builds either from source."""
        project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
        with tarfile.open(llama_sdist) as archive:
            top = next(name for name in archive.getnames() if name.count("/") == 1 and name.endswith("/pyproject.toml"))
            handle = archive.extractfile(top)
            assert handle is not None
            llama = tomllib.load(io.BytesIO(handle.read()))["build-system"]["requires"]
        folder = self.out / "build"
        folder.mkdir(exist_ok=True)
        before = files_in(folder)
        print("bundle: downloading the build requirements", flush=True)
        pip("download", "--quiet", "--dest", str(folder), *project, *llama, *BUILD_TOOLS)
        for path in sorted(files_in(folder) - before):
            if path.name.endswith(".whl"):
                self.add(path, "build", "wheel")
            else:
                self.wheel_from_sdist(path, folder, "build")

    def project(self) -> str:
        """The committed tree as a source archive, and the project's wheel built from that archive
        (not from the working folder, whose build/ may hold modules deleted since)."""
        folder = self.out / "project"
        folder.mkdir(exist_ok=True)
        commit = git("rev-parse", "HEAD")
        source = folder / f"{PROJECT}-{__version__}-{commit[:12]}-src.tar.gz"
        archive = ["git", "-C", str(REPO), "archive", "--format=tar.gz", f"--prefix={PROJECT}-src/", "-o", str(source)]
        subprocess.run([*archive, commit], check=True)
        with tempfile.TemporaryDirectory() as scratch, tarfile.open(source) as tree:
            tree.extractall(scratch, filter="data")
            pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), str(Path(scratch) / f"{PROJECT}-src"))
        self.add(next(folder.glob(f"{PROJECT}-*.whl")), "project", "wheel")
        entry = entry_for(self.out, source, name=PROJECT, version=__version__, group="project", kind="source")
        self.entries.append(entry)
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")

    def constraints(self) -> None:
        """Each runtime distribution's version, so that pip takes no other copy from build/ (a newer
        setuptools or packaging a build backend asked for) than the venv ran."""
        runtime = sorted({(entry.name, entry.version) for entry in self.entries if entry.path.startswith("wheels/")})
        path = self.out / CONSTRAINTS
        path.write_text("".join(f"{name}=={version}\n" for name, version in runtime), encoding="utf-8")
        self.entries.append(entry_for(self.out, path, name="constraints", version="", group="core", kind="constraints"))

    def debs(self) -> None:
        folder = self.out / "debs"
        folder.mkdir(exist_ok=True)
        claimed: set[str] = set()
        for group, packages in DEB_GROUPS.items():
            filenames = deb_closure(packages)
            wanted = [deb_name_and_version(Path(name)) for name in filenames if not (folder / name).exists()]
            print(f"bundle: downloading {' and '.join(packages)} with {len(filenames) - 1} dependencies", flush=True)
            if wanted:
                download = ["apt-get", "download", "-qq", "-o", "APT::Sandbox::User=root"]
                subprocess.run([*download, *(f"{n}={v}" for n, v in wanted)], cwd=folder, check=True)
            for filename in filenames:
                if filename not in claimed:
                    self.add(folder / filename, group, "deb")
                    claimed.add(filename)
            for package in packages:
                self.deb_closures[package] = [f"debs/{filename}" for filename in filenames]
        index = write_index(folder)
        self.entries.append(entry_for(self.out, index, name="apt index", version="", group="debs-index", kind="index"))


def deb_closure(packages: Sequence[str]) -> list[str]:
    """The .deb file names of the packages and every dependency they need on a Debian with nothing installed."""
    # an empty dpkg status (nothing installed) and an empty archive cache (apt leaves out what it holds)
    with tempfile.NamedTemporaryFile() as empty_status, tempfile.TemporaryDirectory() as empty_cache:
        (Path(empty_cache) / "partial").mkdir()
        options = ["-o", f"Dir::State::status={empty_status.name}", "-o", f"Dir::Cache::archives={empty_cache}"]
        command = ["apt-get", *options, "install", "--no-install-recommends"]
        printed = subprocess.run(
            [*command, "--print-uris", "-qq", "-y", *packages], capture_output=True, text=True, check=False
        )
    if printed.returncode != 0:
        raise BundleError(f"apt-get cannot list {' '.join(packages)}: {printed.stderr.strip().splitlines()[-1:]}")
    return [line.split()[1] for line in printed.stdout.splitlines() if line.startswith("'")]


def library_sha256(wheel: Path) -> str:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(LLAMA_LIBRARY) as library:
            return stream_sha256(library)
    except (KeyError, zipfile.BadZipFile, OSError):
        return ""


def this_cpu() -> dict[str, object]:
    """The CPU the llama.cpp wheel was compiled for (-march=native): its model name and flags."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text(encoding="utf-8") if cpuinfo.is_file() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE)
    return {
        "cpu": model.group(1).strip() if model else platform.processor(),
        "cpu_flags": sorted(flags.group(1).split()) if flags else [],
    }


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def debian_release() -> str:
    path = Path("/etc/debian_version")
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def build(out: Path, extras: Sequence[str], *, with_debs: bool, tar: bool) -> Manifest:
    unknown = [name for name in extras if name not in GROUP_EXTRAS or name == "core"]
    if unknown:
        reason = NOT_BUNDLED.get(unknown[0], f"bundle extras: {', '.join(list(GROUP_EXTRAS)[1:])}")
        raise BundleError(f"EXTRAS: {unknown[0]!r} cannot be bundled ({reason})")
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"{out}: not empty; a bundle is written into a new folder")
    everything = plan_bundle(list(GROUP_EXTRAS))
    missed = unbundled(everything)
    if missed:
        raise BundleError(f"installed in the venv but reached by no extra of {PROJECT}: {', '.join(missed)}")
    out.mkdir(parents=True, exist_ok=True)
    groups = ["core", *extras]
    plan = plan_bundle(groups)
    builder = BundleBuilder(out, groups)
    pins = out / ".venv-pins.txt"
    pins.write_text("\n".join(pin.requirement() for pin in everything.pins) + "\n")
    builder.distributions(plan, pins)
    pins.unlink()
    builder.constraints()
    commit = builder.project()
    if with_debs:
        if shutil.which("apt-get") is None:
            print("bundle: no apt-get here, so no Debian packages: the target installs bubblewrap and chromium itself")
        else:
            builder.debs()
    manifest = Manifest(
        python=this_python(),
        machine=this_machine(),
        appliance=__version__,
        commit=commit,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        debian=debian_release(),
        files=builder.entries,
        debs=builder.deb_closures,
    )
    check_pins(plan, manifest)
    manifest.write(out)
    write_readme(out, manifest)
    verify(out)
    if tar:
        subprocess.run(["tar", "-cf", f"{out}.tar", "-C", str(out.parent), out.name], check=True)
    return manifest


def check_pins(plan: Plan, manifest: Manifest) -> None:
    """Every pinned distribution has its file, at the venv's version, and every requirement the venv lacks a file."""
    held = {(canonicalize_name(entry.name), entry.version) for entry in manifest.files}
    lacking = [pin.requirement() for pin in plan.pins if (canonicalize_name(pin.name), pin.version) not in held]
    names = {name for name, _ in held}
    requirements = (Requirement(line) for lines in plan.unmet.values() for line in lines)
    lacking += [str(requirement) for requirement in requirements if canonicalize_name(requirement.name) not in names]
    if lacking:
        raise BundleError(f"the bundle lacks files for: {', '.join(lacking)}")


def write_readme(out: Path, manifest: Manifest) -> None:
    sizes = manifest.group_bytes()
    rows = "\n".join(f"| {group} | {sizes[group] / 1e6:,.0f} MB |" for group in sorted(sizes))
    text = f"""# appliance {manifest.appliance}: air-gap bundle

Built {manifest.created} from commit {manifest.commit} for Python {manifest.python} on {manifest.machine}
(Debian {manifest.debian or "-"}). `manifest.json` lists every file with its sha256 and size.

On the target machine: Python {manifest.python}; a C/C++ compiler and CMake only where llama.cpp must be
rebuilt (the bundle also carries cmake's and ninja's wheels, for a machine without them: not tried);
root to install the .debs.

```sh
tar -xzf project/{PROJECT}-*-src.tar.gz       # or a clone of the same commit (`make test` reads git)
cd {PROJECT}-src && make install-offline BUNDLE=/path/to/this/folder
make run BUNDLE=/path/to/this/folder          # or: make test BUNDLE=...
```

`make install-offline` checks every sha256 first (a missing or damaged file is one line naming it),
installs with `pip --no-index --find-links`, and builds llama.cpp from `sources/` when the wheel built
for the CPU named in the manifest does not run on this one.

| group | size |
|---|---|
{rows}
"""
    (out / "README.md").write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.bundle.build", description=__doc__)
    parser.add_argument("out", type=Path, help="a new folder")
    parser.add_argument("--extras", default="", help=f"comma-separated, of: {', '.join(list(GROUP_EXTRAS)[1:])}")
    parser.add_argument("--no-debs", action="store_true", help="leave out the Debian packages")
    parser.add_argument("--tar", action="store_true", help="also write OUT.tar")
    args = parser.parse_args(argv)
    extras = [name.strip() for name in args.extras.split(",") if name.strip()]
    try:
        manifest = build(args.out.resolve(), extras, with_debs=not args.no_debs, tar=args.tar)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    sizes = manifest.group_bytes()
    print(f"bundle {args.out}: {len(manifest.files)} files, {sum(sizes.values()) / 1e6:,.0f} MB")
    for group in sorted(sizes):
        print(f"  {group:<16} {sizes[group] / 1e6:>8,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
