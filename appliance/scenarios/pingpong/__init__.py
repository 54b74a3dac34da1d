"""PingPong: role-play judged per turn; its loader, report, renderer and importer, registered in one place."""

from __future__ import annotations

from pathlib import Path

from appliance.scenarios.pingpong.family import DESCRIPTION, PingPongFamily
from appliance.scenarios.pingpong.headline import pingpong_headline
from appliance.scenarios.pingpong.importer import import_settings
from appliance.scenarios.pingpong.render import print_leaderboard
from appliance.scenarios.pingpong.report import PingPongLeaderboard, build_leaderboard
from appliance.scenarios.registry import FamilyEntry, Importer, ImportRequest, LoadRequest, register_family


def load(request: LoadRequest) -> PingPongFamily:
    """`pingpong` plays our cards; `pingpong:FOLDER` an imported folder, with our prompts unless it has its own."""
    data = request.folder()
    return PingPongFamily.load(data, request.judges_folder, prompts_folder=request.data_folder, spec=request.spec)


def import_pingpong_settings(request: ImportRequest) -> list[str]:
    out = request.out or Path("imported/pingpong")
    cards, situations = import_settings(request.path, out)
    return [
        f"imported {cards} characters and {situations} situations into {out}",
        f"run them with: appliance run --scenario pingpong:{out}",
    ]


ENTRY = register_family(
    FamilyEntry[PingPongLeaderboard](
        name="pingpong",
        description=DESCRIPTION,
        load=load,
        report=build_leaderboard,
        render=print_leaderboard,
        quick_limit=1,
        quick_turns=2,
        importers=(
            Importer(
                kind="pingpong-settings",
                help="Convert PingPong's characters and situations; run them with --scenario pingpong:OUT.",
                path_help="PingPong's settings_v2.json",
                run=import_pingpong_settings,
                options=frozenset({"out"}),
            ),
        ),
        order=0,
        headline=pingpong_headline,
    )
)
