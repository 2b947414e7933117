"""Fusion ids' numbers: which ``#k`` a fusion nvscope sees for the first time gets (`nvscope._core._fusion.claim`),
only where nothing else tells fusions apart. Ids as
strings here: ``base`` is an id without its ``#k``, ``short`` its ``<phase>/<name>``."""

from __future__ import annotations

from collections.abc import Iterable

from nvscope._core import _state

__all__ = ["count", "forget_ids", "next_number", "note_ids", "shares_short_form", "take"]


# How many distinct fusions claimed each id without its "#k" so far (`claim`), and the ids seen per short form
# "<phase>/<name>" (`exact_glob`); the adapters call `claim` under `nvscope._exec._frontends.TABLE_LOCK`, once per
# fusion. `nvscope.uninstall()` empties both: every fusion seen afterwards is identified afresh, in order of sight, as
# in a new process (ids with a site or a digest come back the same; only `#k` follows the order), so no two fusions
# can hold one id.
_claimed: dict[str, int] = {}
_shorts: dict[str, set[str]] = {}


def count(fusion_id: str, short: str) -> None:
    """``fusion_id`` is one of the ids whose short form is ``short`` (`shares_short_form`)."""
    _shorts.setdefault(short, set()).add(fusion_id)


def next_number(base: str) -> int:
    """The number the next fusion seen afresh with the id ``base`` gets (1: none before it)."""
    return _claimed.get(base, 0) + 1


def take(base: str, instance: int) -> None:
    """A fusion holds ``instance`` of ``base``."""
    _claimed[base] = max(_claimed.get(base, 0), instance)


def note_ids(ids: Iterable[str]) -> None:
    """Count the fusions behind ``ids`` seen in another process (a bisect's probes), for `exact_glob`."""
    for fusion_id in ids:
        phase, slash, _ = fusion_id.partition("/")
        if not slash:
            continue
        base, mark, number = fusion_id.rpartition("#")
        if not (mark and number.isdigit() and "/" in base):
            base, number = fusion_id, "1"
        _claimed[base] = max(_claimed.get(base, 0), int(number))
        count(fusion_id, f"{phase}/{base.partition('/')[2].partition('@')[0]}")


def forget_ids() -> None:
    """Numbering starts again (the adapters dropped every fusion's table: `nvscope.uninstall`)."""
    _claimed.clear()
    _shorts.clear()


_state.register(__name__, "_claimed _shorts", forget_ids, step="ids")


def shares_short_form(fusion_id: str) -> bool:
    """Whether ``fusion_id`` (one without a site) is also the short form of another fusion's id, or was claimed by
    several fusions (`nvscope._core._fusion.exact_glob`)."""
    return _claimed.get(fusion_id, 0) > 1 or len(_shorts.get(fusion_id, ())) > 1
