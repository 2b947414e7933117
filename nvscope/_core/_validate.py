"""What a scope's ``enable=``/``disable=`` arguments may be, checked in one place so that `nv_options`, the search
and the CLI refuse the same inputs with the same messages, each naming the fix."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nvscope._core._catalog_cache import catalog
from nvscope._core._errors import UnknownOptionError
from nvscope._core._text import cut

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvscope._core._catalog import Kind

__all__ = ["MAX_NAME", "first_line", "names", "shown", "split"]

# No nvFuser option name comes close: refused before the did-you-mean.
MAX_NAME = 100


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut short."""
    return cut(repr(value), limit)


def first_line(error: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message`` (and of its first note), cut short: a failure in a table row."""
    text = str(error).strip()
    line = f"{type(error).__name__}: {cut(text.splitlines()[0], limit)}" if text else type(error).__name__
    notes = [n.strip() for n in getattr(error, "__notes__", ()) if isinstance(n, str) and n.strip()]
    return f"{line} ({cut(notes[0].splitlines()[0], limit)})" if notes else line


def split(values: Iterable[str] | None) -> list[str]:
    """``["a,b", "c d"]`` -> ``["a", "b", "c", "d"]``: the names of repeatable command-line flags."""
    return [name for value in values or () for name in value.replace(",", " ").split()]


def names(kind: Kind, value: object) -> frozenset[str]:
    """Validate one of ``enable=``/``disable=``: a str is one name; anything else must be an iterable of str."""
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, (bytes, bytearray, memoryview)):
        try:
            hint = f", e.g. {kind}={shown(bytes(value).decode())}"
        except UnicodeDecodeError:
            hint = ""
        raise TypeError(f"{kind}= takes an option name (str) or an iterable of names, not {type(value).__name__} "
                        f"(bytes-like, whose items are ints): decode it first{hint}")
    elif isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{kind}= takes an option name (str) or an iterable of names, not {type(value).__name__}: "
                        f"{shown(value)}")
    else:
        items = list(value)
    names = []
    known = catalog()
    for item in items:
        if not isinstance(item, str):
            decode = " (decode bytes first)" if isinstance(item, (bytes, bytearray, memoryview)) else ""
            raise TypeError(f"{kind}= option names must be str, got {type(item).__name__}: {shown(item)}{decode}")
        name = item.strip()
        if not name:
            raise ValueError(f"{kind}= got an empty option name: {item!r}")
        if "," in name or any(c.isspace() for c in name):
            parts = [p for p in name.replace(",", " ").split() if p]
            raise ValueError(f"{kind}= got {shown(item)}, which looks like several names: pass a list, "
                             f"{kind}={shown(parts)}")
        if len(name) > MAX_NAME:
            raise UnknownOptionError(f"{kind}= got a {len(name)}-character name {shown(name)}: no nvFuser option "
                                     "name is that long (`nvscope options` lists them all)")
        if "(" in name:
            raise UnknownOptionError(
                f"{kind}= got {item!r}: per-call options carry no arguments; set NVFUSER_{kind.upper()}={name} "
                "in the environment before the process starts"
            )
        known.check(kind, name)
        names.append(name)
    return frozenset(names)
