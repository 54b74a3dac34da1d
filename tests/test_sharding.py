"""Shards (`appliance run --shard I/N`) joined by `appliance merge` store what the unsharded run stores.

Every family's scripted run is played as three shards into three stores and merged; the merged run
must equal the unsharded run of the same seed as recorded in tests/data/golden_runs.json (which
tests/test_same_runs.py holds the unsharded code to). The real-model round trip is in
tests/test_cli.py (two runs with the same seed).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.errors import ApplianceError
from appliance.scenarios import family_names
from appliance.sharding import Shard, ShardDeal
from appliance.store import Store
from appliance.store.merge import merge_shards
from tests.golden_runs import GOLDEN, canonical, scripted_run
from tests.test_cli import assert_clean_error, cli


def _as_rows(run: dict[str, list[list[object]]]) -> dict[str, list[str]]:
    """Each table as sorted rows: the dump's ORDER BY leaves ties (a pairwise verdict in both orders)
    in the order the rows were inserted, which a merge changes."""
    return {table: sorted(json.dumps(row, default=str) for row in rows) for table, rows in run.items()}


def _run_id(db: Path) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        (row,) = con.execute("SELECT run_id FROM runs").fetchall()
    return str(row[0])


@pytest.mark.parametrize("family", family_names())
def test_three_shards_merged_equal_the_unsharded_run(family: str, tmp_path: Path) -> None:
    shards = [tmp_path / f"shard{index}.duckdb" for index in (1, 2, 3)]
    played = [len(scripted_run(db, family, shard=f"{index}/3")["episodes"]) for index, db in enumerate(shards, 1)]
    assert sum(1 for count in played if count) >= 2, f"{family}: one shard played everything ({played})"
    merged = tmp_path / "merged.duckdb"
    summary = merge_shards(shards, merged)
    assert [facts["episodes"] for facts in summary.shards.values()] == played
    with Store.open(merged, read_only=True) as store:
        run = store.run(summary.run_id)
        assert (run.status, run.planned_episodes) == ("finished", sum(played))
        assert run.run_config().shard is None
        stored = _as_rows(canonical(store, summary.run_id))
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))[f"scripted:{family}"]
    assert stored == _as_rows(golden)


def test_merge_refuses_shards_that_do_not_make_one_plan(tmp_path: Path) -> None:
    def shard(name: str, which: str, family: str = "pingpong") -> Path:
        db = tmp_path / f"{name}.duckdb"
        scripted_run(db, family, shard=which)
        return db

    one, two = shard("one", "1/2"), shard("two", "2/2")
    other_plan = shard("other", "2/2", family="clembench")
    three = shard("three", "1/3")
    into = tmp_path / "into.duckdb"
    refusals = {
        "lacks shard 2/2": [one],
        "is also in": [one, shard("again", "1/2")],
        "of another plan than": [one, other_plan],
        "config field '[a-z_]+' differs": [one, other_plan],
        "the number of shards differs": [one, three],
    }
    for message, sources in refusals.items():
        with pytest.raises(ApplianceError, match=message):
            merge_shards(sources, into)
    assert not into.exists()  # nothing was written by a refused merge
    with duckdb.connect(str(two)) as con:
        con.execute("UPDATE runs SET status = 'interrupted'")
    assert_clean_error(cli("merge", str(one), str(two), "--into", str(into)), "two.duckdb", "interrupted", "--resume")
    with duckdb.connect(str(two)) as con:
        con.execute("UPDATE runs SET status = 'finished'")
    merged = cli("merge", str(one), str(two), "--into", str(into), "--json")
    assert merged.returncode == 0, merged.stderr
    summary = json.loads(merged.stdout)
    assert summary["run_id"] == _run_id(one) == _run_id(two)
    # merging the same run again is refused, and what the target holds stays
    assert_clean_error(cli("merge", str(one), str(two), "--into", str(into)), "already holds run")
    with Store.open(into, read_only=True) as store:
        assert store.episode_count(summary["run_id"]) == summary["episodes"] > 0


def test_a_shard_is_named_as_i_of_n_and_bad_options_are_one_line(tmp_path: Path) -> None:
    assert str(Shard.parse(" 2/5 ")) == "2/5"
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(ApplianceError, match=f"--shard {bad}"):
            Shard.parse(bad)
    db = str(tmp_path / "none.duckdb")
    assert_clean_error(cli("run", "--shard", "3/2", "--db", db), "--shard 3/2", "between 1 and N")
    assert_clean_error(cli("run", "--ray", "http://head", "--db", db), "--ray http://head", "HOST:PORT")
    assert_clean_error(cli("run", "--run-id", "a b", "--db", db), "--run-id 'a b'")
    assert_clean_error(cli("run", "--ray", "local", "--worker-group", "judges", "--db", db), "--worker-group judges")


@given(st.sets(st.text(min_size=1, max_size=8), max_size=40), st.integers(min_value=1, max_value=7))
def test_every_lineage_goes_to_exactly_one_shard_and_shards_get_near_equal_shares(
    lineages: set[str], count: int
) -> None:
    deals = [ShardDeal(Shard(index, count), lineages) for index in range(1, count + 1)]
    shares = [{key for key in lineages if deal.keeps(key)} for deal in deals]
    assert sorted(key for share in shares for key in share) == sorted(lineages)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    late = "a lineage no first phase planned"
    assert sum(deal.keeps(late) for deal in deals) == 1
