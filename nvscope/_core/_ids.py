"""Fusion ids' numbers: which ``#k`` a fusion nvscope sees for the first time gets (`nvscope._core._fusion.claim`),
only where nothing else tells fusions apart. Ids as
strings here: ``base`` is an id without its ``#k``, ``short`` its ``<phase>/<name>``."""

from __future__ import annotations

from collections.abc import Iterable

from nvscope._core import _state

__all__ = ["count", "forget_ids", "note_ids", "number", "shares_short_form"]


# Per id without its "#k": the number each distinct fusion got, by what it computes (its ops; `claim`), and the ids
# seen per short form "<phase>/<name>" (`exact_glob`); the adapters call `claim` under
# `nvscope._exec._frontends.TABLE_LOCK`, once per fusion. An equal fusion seen again (a step that builds or jits its
# fusions anew at every call) gets the number the first one got: numbering never grows with the steps.
# `nvscope.uninstall()` empties both: fusions seen afterwards are numbered afresh, in order of sight, as in a new
# process.
_claimed: dict[str, dict[object, int]] = {}
_shorts: dict[str, set[str]] = {}


def count(fusion_id: str, short: str) -> None:
    """``fusion_id`` is one of the ids whose short form is ``short`` (`shares_short_form`)."""
    _shorts.setdefault(short, set()).add(fusion_id)


def number(base: str, computes: object) -> int:
    """The number of the fusion with the id ``base`` that computes ``computes`` (its ops): the one an equal fusion got
    before, else the next (1: the first)."""
    numbers = _claimed.setdefault(base, {})
    found = numbers.get(computes)
    if found is None:
        found = numbers[computes] = max(numbers.values(), default=0) + 1
    return found


def note_ids(ids: Iterable[str]) -> None:
    """Count the fusions behind ``ids`` seen in another process (a bisect's probes), for `exact_glob`."""
    for fusion_id in ids:
        phase, slash, _ = fusion_id.partition("/")
        if not slash:
            continue
        base, mark, number = fusion_id.rpartition("#")
        if not (mark and number.isdigit() and "/" in base):
            base, number = fusion_id, "1"
        numbers = _claimed.setdefault(base, {})
        numbers.setdefault(("noted", int(number)), int(number))
        count(fusion_id, f"{phase}/{base.partition('/')[2].partition('@')[0]}")


def forget_ids() -> None:
    """Numbering starts again (the adapters dropped every fusion's table: `nvscope.uninstall`)."""
    _claimed.clear()
    _shorts.clear()


_state.register(__name__, "_claimed _shorts", forget_ids, step="ids")


def shares_short_form(fusion_id: str) -> bool:
    """Whether ``fusion_id`` (one without a site) is also the short form of another fusion's id, or was claimed by
    several fusions (`nvscope._core._fusion.exact_glob`)."""
    return len(_claimed.get(fusion_id, ())) > 1 or len(_shorts.get(fusion_id, ())) > 1
