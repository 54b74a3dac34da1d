"""Install Debian packages from a checked bundle: `python3 -m appliance.bundle.debs DIR bubblewrap`.

Standard library only (the target's system Python runs it). Only the bundle's .debs whose package is
not installed here, or installed at an older version, are handed to apt-get, so nothing is
downgraded; apt-get resolves their dependencies against what is installed plus those files, and
never downloads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from appliance.bundle.manifest import BundleError, read_manifest


def deb_name_and_version(deb: str | Path) -> tuple[str, str]:
    """apt's file names are NAME_VERSION_ARCH.deb, an epoch's ':' written %3a."""
    name, version, _ = Path(deb).name.removesuffix(".deb").split("_")
    return name, version.replace("%3a", ":")


def installed_version(package: str) -> str | None:
    shown = subprocess.run(
        ["dpkg-query", "--show", "--showformat=${db:Status-Status} ${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    status, _, version = shown.stdout.strip().partition(" ")
    return version if status == "installed" else None


def older(installed: str, bundled: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", installed, "lt", bundled], check=False).returncode == 0


def missing_debs(bundle: Path, packages: list[str]) -> list[Path]:
    """The closure's .debs whose package is absent here or older than the bundle's (never a downgrade)."""
    manifest = read_manifest(bundle)
    absent = [package for package in packages if package not in manifest.debs]
    if absent:
        raise BundleError(f"{bundle}: the bundle holds no Debian package {absent[0]!r} (built with apt-get absent?)")
    needed = []
    for deb in sorted({deb for package in packages for deb in manifest.debs[package]}):
        name, version = deb_name_and_version(deb)
        have = installed_version(name)
        if have is None or older(have, version):
            needed.append(bundle / deb)
    return needed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python3 -m appliance.bundle.debs BUNDLE PACKAGE...", file=sys.stderr)
        return 2
    bundle, packages = Path(args[0]).resolve(), args[1:]
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        print(f"no dpkg here: install {' '.join(packages)} by this system's own means")
        return 1
    try:
        debs = missing_debs(bundle, packages)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not debs:
        return 0
    if os.geteuid() != 0:
        print(f"{' '.join(packages)} not installed and only root can install the bundle's .debs ({len(debs)} files)")
        return 1
    print(f"installing {' '.join(packages)} from the bundle ({len(debs)} .deb files not installed here)", flush=True)
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "--no-download", *map(str, debs)]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["apt-get failed"])[-1]
        print(f"error: apt-get could not install {' '.join(packages)} from {bundle}/debs: {reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
