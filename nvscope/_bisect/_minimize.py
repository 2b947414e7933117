"""A 1-minimal failing subset in O(k log n) tests: the search behind `nvscope.bisect`, for options and for fusions.

While the elements found test good, the shortest bad prefix of the rest is found by bisection and its last element
joins them; a final check of each element makes the result 1-minimal for a test that is not monotone
(docs/bisect.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["minimize", "probe_budget"]

T = TypeVar("T")


def probe_budget(n: int, k: int) -> int:
    """The most tests `minimize` makes for ``n`` items and a result of ``k`` (k >= 1), with a monotone test whose
    empty set is good and whose full set is known to be bad."""
    log = max(0, (n - 1).bit_length())  # ceil(log2 n)
    return k * (log + 1) + (k if k > 1 else 0)


def minimize(items: Sequence[T], bad: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal subset of ``items`` for which ``bad`` (given subsets in the items' order) is True; the caller has
    seen ``bad(items)`` True and ``bad([])`` False (neither is tested again)."""
    items = list(items)

    def test(indices: list[int]) -> bool:
        return bad([items[i] for i in sorted(indices)])

    required: list[int] = []
    candidates = list(range(len(items)))
    while True:
        required = _grow(required, candidates, test)
        if len(required) <= 1:
            return [items[i] for i in sorted(required)]
        for element in required:
            rest = [i for i in required if i != element]
            if test(rest):
                # Not needed after all (a test that is not monotone): minimize what is left, which is bad.
                required, candidates = [], sorted(rest)
                break
        else:
            return [items[i] for i in sorted(required)]


def _grow(required: list[int], candidates: list[int], test: Callable[[list[int]], bool]) -> list[int]:
    """Elements of ``candidates`` added to ``required`` until it is bad; ``required + candidates`` is bad and
    ``required`` is good on entry."""
    required = list(required)
    while candidates:
        low, high = 0, len(candidates)  # bad with candidates[:high], good with candidates[:low]
        while high - low > 1:
            middle = (low + high) // 2
            if test([*required, *candidates[:middle]]):
                high = middle
            else:
                low = middle
        required.append(candidates[high - 1])
        candidates = candidates[:high - 1]
        if not candidates or test(required):
            break
    return required
