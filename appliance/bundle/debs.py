"""Debian packages from a bundle: a flat apt repository in DIR/debs, read by apt-get alone.

`make bundle` writes DIR/debs/Packages beside the .deb files (`write_index`). On the target,
`python3 -m appliance.bundle.debs DIR bubblewrap` points apt-get at that folder and nothing else (no
sources.list, no package lists of the system), so apt resolves the packages against what is
installed plus the bundle, installs only what is missing, and has nowhere to download from. Handing
apt the .deb files by name instead made it fetch some from the network (those also in its lists)
and install ones nothing needed. Standard library only: the target's system Python runs it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from appliance.bundle.manifest import BundleError, read_manifest

INDEX = "Packages"


def deb_name_and_version(deb: str | Path) -> tuple[str, str]:
    """apt's file names are NAME_VERSION_ARCH.deb, an epoch's ':' written %3a."""
    name, version, _ = Path(deb).name.removesuffix(".deb").split("_")
    return name, version.replace("%3a", ":")


def write_index(folder: Path) -> Path:
    """A Packages file for the folder's .debs: each control stanza with its file name, size and sha256."""
    stanzas = []
    for deb in sorted(folder.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True)
        data = deb.read_bytes()
        stanzas.append(
            control.stdout.rstrip("\n")
            + f"\nFilename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    index = folder / INDEX
    index.write_text("\n".join(stanzas), encoding="utf-8")
    return index


def apt_options(bundle: Path, scratch: Path) -> list[str]:
    """apt-get reading the bundle's repository alone, its lists and caches kept in `scratch`."""
    for name in ("lists/partial", "cache/archives/partial", "parts"):
        (scratch / name).mkdir(parents=True, exist_ok=True)
    sources = scratch / "sources.list"
    sources.write_text(f"deb [trusted=yes] file:{bundle.resolve() / 'debs'} ./\n", encoding="utf-8")
    settings = {
        "Dir::Etc::SourceList": sources,
        "Dir::Etc::SourceParts": scratch / "parts",
        "Dir::State::Lists": scratch / "lists",
        "Dir::Cache": scratch / "cache",
        "Acquire::AllowInsecureRepositories": "true",
        "APT::Sandbox::User": "root",
    }
    return [option for key, value in settings.items() for option in ("-o", f"{key}={value}")]


def installed(package: str) -> bool:
    shown = subprocess.run(
        ["dpkg-query", "--show", "--showformat=${db:Status-Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout.strip() == "installed"


def install(bundle: Path, packages: list[str], *, simulate: bool = False) -> str:
    """Install the packages from the bundle; returns apt-get's output. A failure is one line.

    apt plans first (`-s`): a plan that would upgrade an installed package (the bundle was built on a
    newer point release, say) is refused, and the install itself runs with `--no-remove`, so the
    host's own packages are never replaced or removed.
    """
    manifest = read_manifest(bundle)
    absent = [package for package in packages if package not in manifest.debs]
    if absent:
        raise BundleError(f"{bundle}: the bundle holds no Debian package {absent[0]!r} (built without apt-get?)")
    install_options = ("-y", "-qq", "--no-install-recommends", "--no-remove")
    with tempfile.TemporaryDirectory(prefix="appliance-apt-") as scratch:
        options = apt_options(bundle, Path(scratch))
        apt_step(options, bundle, packages, "update", "-qq")
        plan = apt_step(options, bundle, packages, "install", *install_options, "-s", *packages)
        # "Inst NAME [INSTALLED] (NEW ...)": the bracket right after the name holds an installed version
        upgrades = [found.group(1) for line in plan.splitlines() if (found := re.match(r"Inst (\S+) \[", line))]
        if upgrades:
            raise BundleError(
                f"installing {' '.join(packages)} from {bundle}/debs would upgrade installed packages "
                f"({', '.join(upgrades)}): build the bundle on this machine's Debian point release"
            )
        return plan if simulate else apt_step(options, bundle, packages, "install", *install_options, *packages)


def apt_step(options: list[str], bundle: Path, packages: list[str], *args: str) -> str:
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", *options, *args], env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BundleError(f"apt-get {args[0]} from {bundle}/debs failed for {' '.join(packages)}: {reason}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python3 -m appliance.bundle.debs BUNDLE PACKAGE...", file=sys.stderr)
        return 2
    bundle, packages = Path(args[0]), args[1:]
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        print(f"no apt here: install {' '.join(packages)} by this system's own means")
        return 1
    missing = [package for package in packages if not installed(package)]
    if not missing:
        return 0
    if os.geteuid() != 0:
        print(f"{' '.join(missing)} not installed, and only root can install the bundle's .deb files")
        return 1
    print(f"installing {' '.join(missing)} from {bundle}/debs", flush=True)
    try:
        install(bundle, missing)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
