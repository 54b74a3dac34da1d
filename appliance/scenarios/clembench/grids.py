"""5x5 letter grids: parsing, comparison and the shapes our generators draw."""

from __future__ import annotations

import random
import re

EMPTY = "▢"
Grid = tuple[tuple[str, ...], ...]


def parse_grid(text: str, size: int = 5) -> Grid:
    """A grid from `size` lines of `size` space-separated cells; raises ValueError otherwise."""
    rows = [line.split() for line in text.strip().splitlines() if line.strip()]
    if len(rows) != size or any(len(row) != size for row in rows):
        raise ValueError(f"expected {size} rows of {size} cells")
    for row in rows:
        for cell in row:
            if not (cell == EMPTY or re.fullmatch(r"[A-Z]", cell)):
                raise ValueError(f"cell '{cell}' is neither a capital letter nor {EMPTY}")
    return tuple(tuple(row) for row in rows)


def render_grid(grid: Grid) -> str:
    return "\n".join(" ".join(row) for row in grid)


def widest_grids(target: Grid) -> list[str]:
    """Candidates for the longest valid drawing of a grid of `target`'s size, in any tokenizer: every cell
    empty, every cell one of the target's letters, and each of those alternating with empty cells."""
    letters = sorted({cell for row in target for cell in row if cell != EMPTY}) or ["X"]
    size = range(len(target))
    fills = [EMPTY, *letters]
    grids = [tuple(tuple(fill for _ in size) for _ in size) for fill in fills]
    grids += [tuple(tuple(letter if (r + c) % 2 else EMPTY for c in size) for r in size) for letter in letters]
    return [render_grid(grid) for grid in grids]


def cell_f1(target: Grid, drawn: Grid) -> tuple[float, float, float]:
    """Precision, recall and F1 (0-100) of the filled cells, as clembench's image game scores them."""
    hits = sum(
        1
        for t_row, d_row in zip(target, drawn, strict=True)
        for t, d in zip(t_row, d_row, strict=True)
        if t != EMPTY and t.lower() == d.lower()
    )
    filled_target = sum(1 for row in target for cell in row if cell != EMPTY)
    filled_drawn = sum(1 for row in drawn for cell in row if cell != EMPTY)
    precision = hits / filled_drawn if filled_drawn else 0.0
    recall = hits / filled_target if filled_target else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    return round(100 * precision), round(100 * recall), round(100 * f1)


def empty_grid(size: int = 5) -> list[list[str]]:
    return [[EMPTY] * size for _ in range(size)]


def compact_shape(rng: random.Random, letter: str, size: int = 5) -> Grid:
    """A regular figure: a row, column, diagonal, frame, cross, letter-like or filled block."""
    grid = empty_grid(size)
    kind = rng.choice(["row", "column", "diagonal", "anti-diagonal", "frame", "cross", "ell", "tee", "block"])
    k = rng.randrange(size)
    for r in range(size):
        for c in range(size):
            filled = {
                "row": r == k,
                "column": c == k,
                "diagonal": r == c,
                "anti-diagonal": r + c == size - 1,
                "frame": r in (0, size - 1) or c in (0, size - 1),
                "cross": r == size // 2 or c == size // 2,
                "ell": c == 0 or r == size - 1,
                "tee": r == 0 or c == size // 2,
                "block": r < 3 and c < 3,
            }[kind]
            if filled:
                grid[r][c] = letter
    return tuple(tuple(row) for row in grid)


def random_shape(rng: random.Random, letters: str, cells: int, size: int = 5) -> Grid:
    grid = empty_grid(size)
    for index in rng.sample(range(size * size), cells):
        grid[index // size][index % size] = rng.choice(letters)
    return tuple(tuple(row) for row in grid)
