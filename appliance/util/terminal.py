"""Number formatting shared by the families' terminal renderers."""

from __future__ import annotations


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def interval(value: tuple[float, float] | None) -> str:
    return "-" if value is None else f"[{value[0]:.2f}, {value[1]:.2f}]"
