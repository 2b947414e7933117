"""One plain-text table renderer for every tool (audit summaries, compare, search, ``nvscope options``)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["render"]


def render(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "") -> str:
    """Columns padded to their widest cell, a dashed rule under the header; columns in ``right`` align right.

    The last column is not padded (so long descriptions do not leave trailing blanks).
    """
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header)]
    last = len(header) - 1

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            if i in right:
                parts.append(cell.rjust(width))
            else:
                parts.append(cell if i == last else cell.ljust(width))
        return (indent + "  ".join(parts)).rstrip()

    lines = [line(header), indent + "  ".join("-" * w for w in widths)]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)
