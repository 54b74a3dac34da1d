"""A sixth family in one folder, as docs/adding-a-family.md writes it: `recall`.

The player reads a short note and answers a question about it; a rule checks
whether the reply contains the expected answer. Nothing outside this folder
names it: it is registered when this package is imported, which the tests do
through $APPLIANCE_FAMILIES.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.table import Table

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.context import EpisodeContext
from appliance.headline import Headline, HeadlineMetric, Unit, mean_of
from appliance.scenarios import FamilyEntry, Instance, LoadRequest, ScenarioFamily, register_family
from appliance.scenarios.base import RULE_SCORER
from appliance.store.records import ScoreRecord
from appliance.store.run_view import RunView
from appliance.util.stats import bootstrap_interval
from appliance.util.tomlfile import read_toml

DATA = Path(__file__).parent / "data"


class Fact(Instance):
    note: str
    question: str
    answer: str


class RecallOptions(BaseModel):
    """The family's own options: `appliance run --set recall.answer_tokens=4`. A new option is one field here."""

    model_config = ConfigDict(extra="forbid")

    #: the longest answer the player may write, in its own tokens
    answer_tokens: int = Field(default=12, ge=1, le=64)


class RecallFamily(ScenarioFamily):
    name = "recall"
    description = "answer a question about a short note (example family)"

    def __init__(self, folder: Path, spec: str = "recall", options: RecallOptions | None = None) -> None:
        self.name = spec
        self.options = options or RecallOptions()
        self.folder = folder
        self.facts = [Fact(**entry) for entry in read_toml(folder / "facts.toml")["fact"]]

    def instances(self) -> list[Instance]:
        return list(self.facts)

    def data_files(self) -> list[Path]:
        return [self.folder / "facts.toml"]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, Fact)
        reply = await ctx.generate(
            "player",
            [Message(role="user", content=f"{instance.note}\n\nQuestion: {instance.question}\nAnswer briefly.")],
            sampling=Sampling(temperature=0.0, max_tokens=self.options.answer_tokens),
        )
        correct = instance.answer.lower() in reply.text.lower()
        player = ctx.model_for("player")
        ctx.scores.append(ScoreRecord(panel=RULE_SCORER, player=player, metric="correct", value=float(correct)))


class RecallRow(BaseModel):
    model: str
    accuracy: float | None
    ci: tuple[float, float] | None
    episodes: int


class RecallReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    scenario: str
    rows: list[RecallRow]


def build_report(run: RunView, panel: str | None) -> RecallReport:
    by_model: dict[str, list[float]] = {}
    for score in run.scores(metrics=["correct"]):
        if score.value is not None:
            by_model.setdefault(score.player, []).append(score.value)
    rows = [
        RecallRow(model=m, accuracy=mean(v), ci=bootstrap_interval(v), episodes=len(v)) for m, v in by_model.items()
    ]
    return RecallReport(run_id=run.run_id, scenario=run.scenario, rows=rows)


def recall_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per fact and player, so `appliance compare` pairs two runs' answers to the same fact;
    the rule's scores only (a judge panel does not score this family)."""
    units = [
        Unit(key=score.instance_id, player=score.player, values={"correct": score.value})
        for score in run.scores(panels=[RULE_SCORER], metrics=["correct"])
    ]
    accuracy = HeadlineMetric("accuracy", mean_of("correct"), description="share of answers naming the fact")
    return Headline(units=units, metrics=[accuracy])


def render(console: Console, report: RecallReport) -> None:
    table = Table(title=f"{report.scenario}: recall accuracy, run {report.run_id}")
    for column in ("model", "accuracy", "95% CI", "episodes"):
        table.add_column(column)
    for row in report.rows:
        table.add_row(row.model, f"{row.accuracy:.2f}", str(row.ci), str(row.episodes))
    console.print(table)


def load(request: LoadRequest) -> RecallFamily:
    assert request.options is None or isinstance(request.options, RecallOptions)
    return RecallFamily(Path(request.source) if request.source else request.data_folder, request.spec, request.options)


ENTRY = register_family(
    FamilyEntry[RecallReport](
        name="recall",
        description=RecallFamily.description,
        load=load,
        report=build_report,
        render=render,
        quick_limit=2,
        data_folder=str(DATA),
        options=RecallOptions,
        headline=recall_headline,
    )
)
