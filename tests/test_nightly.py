"""docs/nightly.sh as a scheduler runs it: two nights on the committed taboo sweep with the real SmolLM2.

The first night plays the base, then the newest checkpoint, gates one against the other and accepts the
checkpoint's run; the second night gates the same checkpoint against that accepted run, and only the
last night's store and page are kept (KEEP=1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import REPO, cli

SCRIPT = REPO / "docs" / "nightly.sh"


def night(work: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    settings = {
        "APPLIANCE": str(Path(sys.executable).parent / "appliance"),
        "WORK": str(work),
        "KEEP": "1",
    } | environment
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, cwd=REPO, timeout=600, env=os.environ | settings
    )


def test_an_unknown_sweep_is_exit_2_before_anything_is_played(tmp_path: Path) -> None:
    refused = night(tmp_path / "nightly", SWEEP="nope")
    assert refused.returncode == 2 and refused.stderr.strip() == "nightly: no checkpoint of sweep 'nope' in models.toml"
    assert not list((tmp_path / "nightly" / "stores").iterdir())


@pytest.mark.real_model
def test_two_nights_accept_the_newest_checkpoint_and_keep_the_last_store(tmp_path: Path) -> None:
    instances, work = tmp_path / "taboo.json", tmp_path / "nightly"
    assert cli("scenarios", "generate", "clembench", "--games", "taboo", "--out", str(instances)).returncode == 0
    suite = f"--scenario clembench:{instances} --limit 2 --seed 1"
    first = night(work, SUITE=suite)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "smollm2-taboo-sweep@checkpoint-20 (run " in first.stdout
    base_run, accepted = (
        first.stdout.split("against run ")[1].split(":")[0],
        (work / "accepted-run").read_text().strip(),
    )
    assert accepted != base_run and f"(run {accepted})" in first.stdout
    gate = next((work / "pages").glob("*-gate.md")).read_text()
    assert "smollm2-135m → smollm2-taboo-sweep@checkpoint-20" in gate and "No regression." in gate

    second = night(work, SUITE=suite)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"against run {accepted}:" in second.stdout
    assert (work / "accepted-run").read_text().strip() not in (accepted, base_run)
    stores = sorted(path.name for path in (work / "stores").glob("*.duckdb"))
    pages = sorted(path.name for path in (work / "pages").glob("*.html"))
    assert len(stores) == 1 and len(pages) == 1 and stores[0][:-7] == pages[0][:-5]
