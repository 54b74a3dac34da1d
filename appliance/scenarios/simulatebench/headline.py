"""SimulateBench's headline metrics for `appliance compare`: CA and RCoV per field, per character."""

from __future__ import annotations

from collections import defaultdict

from appliance.headline import Headline, HeadlineMetric, Unit, mean_of
from appliance.scenarios.simulatebench.report import VariantResult, build_consistency_report, field_rcov
from appliance.store.run_view import RunView


def simulatebench_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per character and player: its base-profile CA and its RCoV for each perturbed field."""
    report = build_consistency_report(run, panel)
    units = []
    fields: set[str] = set()
    for row in report.rows:
        by_character: dict[str, list[VariantResult]] = defaultdict(list)
        for variant in row.variants:
            by_character[variant.character].append(variant)
        for character, variants in by_character.items():
            base = next((v.ca for v in variants if v.variant == "base"), None)
            own_fields = sorted({v.field for v in variants} - {"base"})
            fields.update(own_fields)
            values: dict[str, float | None] = {"ca": base}
            values.update({f"rcov_{field}": field_rcov(variants, field) for field in own_fields})
            units.append(Unit(key=character, player=row.model, values=values))
    metrics = [HeadlineMetric("ca", mean_of("ca"), description="consistency accuracy, mean over characters")]
    metrics += [
        HeadlineMetric(f"rcov_{field}", mean_of(f"rcov_{field}"), higher_is_better=False, description="RCoV %")
        for field in sorted(fields)
    ]
    return Headline(units=units, metrics=metrics, settings={"answer test": report.answer_test})
