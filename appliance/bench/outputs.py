"""A bench's two files in bench_results/: the JSON record and its markdown rendering."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


def write_bench_files(folder: Path, stem: str, report: BaseModel, markdown: str) -> tuple[Path, Path]:
    """`folder/<stem>.json` and `folder/<stem>.md`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_text(report.model_dump_json(indent=2) + "\n")
    markdown_path.write_text(markdown)
    return json_path, markdown_path
