"""Install Debian packages from a checked bundle: `python3 -m appliance.bundle.debs DIR bubblewrap`.

Standard library only (the target's system Python runs it). Only the bundle's .debs whose package is
not installed here are handed to apt-get, so nothing installed is replaced; apt-get resolves their
dependencies against what is installed plus those files, and never downloads.
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


def installed(package: str) -> bool:
    shown = subprocess.run(
        ["dpkg-query", "--show", "--showformat=${db:Status-Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout.strip() == "installed"


def missing_debs(bundle: Path, packages: list[str]) -> list[Path]:
    """The closure's .debs whose package is not installed here.

    An installed package is left as it is, even where the bundle's is newer: upgrading one (libcap2,
    say) makes apt upgrade its siblings (libcap2-bin), which the closure does not hold.
    """
    manifest = read_manifest(bundle)
    absent = [package for package in packages if package not in manifest.debs]
    if absent:
        raise BundleError(f"{bundle}: the bundle holds no Debian package {absent[0]!r} (built with apt-get absent?)")
    needed = sorted({deb for package in packages for deb in manifest.debs[package]})
    return [bundle / deb for deb in needed if not installed(deb_name_and_version(deb)[0])]


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
