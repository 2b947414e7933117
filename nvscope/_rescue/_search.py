"""The rescue's search for one failing fusion: which option sets to try, in which order, and the first that cures.

The likeliest cures first: the options the failure names, the escape hatches, other disables, enables, then larger
sets; a set counts once it cures again (docs/rescue.md, "How sure a cure is")."""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from nvscope._core import OptionSet, catalog
from nvscope._measure import OPTION_PAIRS as _PAIRS

__all__ = ["ESCAPE_HATCHES", "Attempt", "candidates", "expected_sets", "how_sure", "rate_lower_bound", "runs_needed",
           "search"]

# (kind, name): the escape hatches nvFuser's messages and release notes name, in the order tried.
ESCAPE_HATCHES = (("disable", "resize_scheduler"), ("disable", "greedy_scheduler"), ("disable", "infer_contiguity"),
                  ("disable", "matmul_expr_eval"), ("disable", "parallel_compile"))
_NAMED = re.compile(r"NVFUSER_(ENABLE|DISABLE)=([a-z0-9_]+)")


@dataclass(frozen=True)
class Attempt:
    """One option set tried on one fusion: whether it cured (``cured``), what the probe saw (``detail``)."""

    options: OptionSet
    cured: bool
    detail: str = ""
    seconds: float = 0.0


def singles(ops: Collection[str] | None, taken: OptionSet, message: str = "") -> list[tuple[str, str]]:
    """The single options worth trying on a fusion holding ``ops`` (None: every option) that runs with ``taken``
    already, in the order tried."""
    known = catalog()
    usable = [o for o in known.options if o.effect == "codegen" and not o.requires_args
              and o.name not in (taken.enable if o.kind == "enable" else taken.disable)
              and (ops is None or known.can_affect(o.kind, o.name, ops))]
    present = {(o.kind, o.name) for o in usable}
    named = [(kind.lower(), name) for kind, name in _NAMED.findall(message)]
    first = [i for i in dict.fromkeys([*named, *ESCAPE_HATCHES]) if i in present]
    rest = sorted(present - set(first), key=lambda i: (i[0] != "disable", i[1]))
    return [*first, *rest]


def candidates(ops: Collection[str] | None, taken: OptionSet, max_set_size: int = 2,
               message: str = "") -> list[OptionSet]:
    """Every candidate set for one fusion, in the order tried: the singles, then larger sets."""
    order = singles(ops, taken, message)
    rank = {item: i for i, item in enumerate(order)}
    out = [_options((item,)) for item in order]
    for size in range(2, max_set_size + 1):
        paired = [tuple(("enable", n) for n in enable) + tuple(("disable", n) for n in disable)
                  for enable, disable in _PAIRS]
        sets = [p for p in paired if len(p) == size and all(i in rank for i in p)]
        combos = sorted((c for c in itertools.combinations(order, size) if len({n for _, n in c}) == size),
                        key=lambda c: (sum(rank[i] for i in c), c))  # not one name both enabled and disabled
        seen = {frozenset(p) for p in sets}
        out += [_options(s) for s in [*sets, *(c for c in combos if frozenset(c) not in seen)]]
    return out


def expected_sets(ops: Collection[str] | None, taken: OptionSet, max_set_size: int = 2,
                  message: str = "") -> list[OptionSet]:
    """The sets a cure is expected among, alone: the options the failure's message names and the escape hatches
    (`ESCAPE_HATCHES`), each alone. Once a PyTorch route is proven, the rest of `candidates` is not worth its time."""
    order = singles(ops, taken, message)
    named = {(kind.lower(), name) for kind, name in _NAMED.findall(message)}
    return [_options((item,)) for item in order if item in named or item in ESCAPE_HATCHES]


def _options(items: Sequence[tuple[str, str]]) -> OptionSet:
    return OptionSet([n for k, n in items if k == "enable"], [n for k, n in items if k == "disable"])


def rate_lower_bound(failures: int, runs: int, level: float) -> float:
    """The one-sided Clopper-Pearson lower bound of a failure rate seen in ``failures`` of ``runs`` independent runs:
    the true rate is below it with probability at most ``level``."""
    if failures <= 0 or runs <= 0:
        return 0.0
    if failures >= runs:
        return float(level ** (1.0 / runs))

    def tail(p: float) -> float:  # P(at least `failures` of `runs` fail | rate p): rises with p
        return sum(math.comb(runs, i) * p ** i * (1 - p) ** (runs - i) for i in range(failures, runs + 1))

    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if tail(middle) < level else (low, middle)
    return low


def runs_needed(p_low: float, level: float) -> int | None:
    """The fewest clean runs ``n`` with ``(1 - p_low)**n <= level`` (None: no number of runs, ``p_low`` is 0)."""
    if p_low <= 0.0:
        return None
    if p_low >= 1.0:
        return 1
    n = max(1, math.ceil(math.log(level) / math.log1p(-p_low)))
    while (1 - p_low) ** n > level:  # the logarithms' rounding
        n += 1
    return n


def search(sets: Sequence[OptionSet], cures: Callable[[list[OptionSet]], list[tuple[bool, str]]], *,
           jobs: int, confirm: int, budget_s: float, clock: Callable[[], float] = time.monotonic,
           again: Callable[[list[OptionSet]], list[tuple[bool, str]]] | None = None,
           ) -> tuple[OptionSet | None, list[Attempt], bool]:
    """The first set of ``sets`` that cures and cures again ``confirm`` times; every attempt; whether the budget ran
    out before the sets did. ``cures(batch)`` runs up to ``jobs`` probes at once and says for each whether it cured
    (and what it saw); ``again``, where given, runs the confirmations instead (the rescue's in fresh processes).
    No batch, of tries or of confirmations, starts once ``budget_s`` is spent."""
    start = clock()
    attempts: list[Attempt] = []
    queue = list(sets)
    while queue:
        if clock() - start >= budget_s:
            return None, attempts, True
        batch, queue = queue[:jobs], queue[jobs:]
        began = clock()
        verdicts = cures(batch)
        each = (clock() - began) / len(batch)
        attempts += [Attempt(options, ok, detail, each) for options, (ok, detail) in zip(batch, verdicts, strict=True)]
        # In order: the first that cures is the smallest tried.
        for options, (ok, _) in zip(batch, verdicts, strict=True):
            if not ok:
                continue
            left, held = confirm, True
            while left and held:  # `jobs` at a time; one run that fails ends it
                if clock() - start >= budget_s:
                    return None, attempts, True
                repeated = (again or cures)([options] * min(jobs, left))
                left -= len(repeated)
                held = all(ok_again for ok_again, _ in repeated)
                attempts += [Attempt(options, ok_again, f"confirm: {detail}" if detail else "confirm")
                             for ok_again, detail in repeated]
            if held:
                return options, attempts, False
    return None, attempts, False


def how_sure(failed: int, reached: int, alpha: float, planned: int) -> tuple[int | None, str]:
    """For a flaky failure (it failed ``failed`` of ``reached`` more runs of the defaults): the clean runs that
    prove a cure at ``alpha`` over ``planned`` candidates (None: no number does), and the words for it. Half of
    ``alpha`` bounds the failure rate from below, half the candidates' false cures (Bonferroni)."""
    p_low = rate_lower_bound(failed, reached, alpha / 2)
    needed = runs_needed(p_low, alpha / 2 / max(planned, 1))
    rate = f"flaky under the defaults: it failed again in {failed} of {reached} runs"
    if failed:
        rate += f" (rate {failed / reached:.2g}, >= {p_low:.2g} at {100 * (1 - alpha / 2):g}% confidence)"
    return needed, rate
