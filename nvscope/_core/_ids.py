"""Fusion ids' numbers: the ``#k`` a fusion seen for the first time gets, where nothing else tells fusions apart.

``base`` is an id without its ``#k``, ``short`` its ``<phase>/<name>``."""

from __future__ import annotations

from collections.abc import Iterable

from nvscope._core import _state

__all__ = ["IDS", "FusionNumbers", "count", "forget_ids", "note_ids", "number", "shares_short_form"]


class FusionNumbers:
    """The numbers given per base id, and the ids seen per short form."""

    def __init__(self) -> None:
        # An equal fusion built anew at every step gets the number the first one got: numbering does not grow.
        self._numbers: dict[str, dict[object, int]] = {}
        self._shorts: dict[str, set[str]] = {}

    def count(self, fusion_id: str, short: str) -> None:
        """``fusion_id`` is one of the ids whose short form is ``short`` (`shares_short_form`)."""
        self._shorts.setdefault(short, set()).add(fusion_id)

    def number(self, base: str, computes: object) -> int:
        """The number of fusion ``base`` computing ``computes``: the one an equal fusion got, else the next."""
        numbers = self._numbers.setdefault(base, {})
        found = numbers.get(computes)
        if found is None:
            found = numbers[computes] = max(numbers.values(), default=0) + 1
        return found

    def note_ids(self, ids: Iterable[str]) -> None:
        """Count the fusions behind ``ids`` seen in another process (a bisect's probes)."""
        for fusion_id in ids:
            phase, slash, _ = fusion_id.partition("/")
            if not slash:
                continue
            base, mark, number = fusion_id.rpartition("#")
            if not (mark and number.isdigit() and "/" in base):
                base, number = fusion_id, "1"
            numbers = self._numbers.setdefault(base, {})
            numbers.setdefault(("noted", int(number)), int(number))
            self.count(fusion_id, f"{phase}/{base.partition('/')[2].partition('@')[0]}")

    def forget_ids(self) -> None:
        """Numbering starts again."""
        self._numbers.clear()
        self._shorts.clear()

    def shares_short_form(self, fusion_id: str) -> bool:
        """Whether ``fusion_id`` is also another fusion's short form, or was given to several fusions."""
        return len(self._numbers.get(fusion_id, ())) > 1 or len(self._shorts.get(fusion_id, ())) > 1


IDS = FusionNumbers()
count, number, note_ids, forget_ids, shares_short_form = (
    IDS.count, IDS.number, IDS.note_ids, IDS.forget_ids, IDS.shares_short_form)
_state.register(__name__, "IDS._numbers IDS._shorts", forget_ids, step="ids")
