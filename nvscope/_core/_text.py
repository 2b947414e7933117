"""Text for people: the plain-text table renderer of every tool, and cutting a long text short in a message."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["cut", "render"]


def cut(text: str, limit: int, show: Callable[[str], str] = str) -> str:
    """``show(text)``, or for a text longer than ``limit`` its first ``limit`` characters and its length."""
    return show(text) if len(text) <= limit else f"{show(text[:limit])}... ({len(text)} characters)"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "") -> str:
    """Columns padded to their widest cell (the last one not), a dashed rule under the header; columns in ``right``
    align right."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(width) if i in right else cell.ljust(width)
                 for i, (cell, width) in enumerate(zip(cells, widths, strict=True))]
        return (indent + "  ".join(parts)).rstrip()  # the last column's padding goes

    lines = [line(header), indent + "  ".join("-" * w for w in widths)]
    lines.extend(line(row) for row in rows)
    return "\n".join(lines)
