"""Plain-text tables for the command line: left-aligned columns, two spaces apart."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    cells = [list(map(str, headers))] + [[("" if value is None else str(value)) for value in row] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    lines = []
    for row in cells:
        # The last column is left ragged so a long reason does not pad every other line.
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths)] + [row[-1]]
        lines.append(indent + "  ".join(padded).rstrip())
    return "\n".join(lines)


def shorten(names: Sequence[str], limit: int) -> str:
    """``a, b, c and 12 more``: a readable preview of a long list."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
