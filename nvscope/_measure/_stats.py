"""Paired-ratio statistics: is variant B faster than variant A on a noisy machine, and how sure are we?

The method (used by `nvscope.search`, `nvscope.profile` and ``benchmarks/thunder_steps.py``): time the variants back
to back, in a random order, over many short rounds. A slow spell of the machine (another process, a clock change, a
page-cache miss) then hits every variant of that round alike, so the per-round ratio B/A cancels it; what remains is
the spread of the ratios across rounds. The median ratio ignores the outlier rounds that timing always has (a GC
pause, a preempted thread), and its interval is the sign test's: two order statistics of the ratios, chosen with the
binomial distribution, which cover the median with at least the stated confidence whatever the distribution of the
ratios (exact, where a bootstrap's interval of a median over a few dozen rounds is too narrow, more so the further
out in the tails it is read). The verdict only says what the interval excludes: "faster" or "slower" when it
excludes 1.0, "no difference detected" otherwise (which is not "no difference": the interval says how large one
could be).

A tool judges many ratios at once (a search's candidates, a profile's fusions): ``comparisons`` of them share a
family-wise confidence (Bonferroni: each interval at ``1 - (1 - confidence) / comparisons``), so that the chance
that *any* interval of the family misses its median stays within ``1 - confidence`` however many there are.

A tool's verdicts are then confirmed (`confirm`): the ratios with a verdict in the first rounds (the screening) are
timed again in fresh rounds, their intervals a family of their own (Bonferroni over the ``k`` flagged), and a verdict
stands only where the fresh interval excludes 1.0 on the same side. A chance verdict must then miss twice, in
independent rounds: the family-wise rate is at most about the product of the two levels (5% x 5%), where Bonferroni
alone sits at its 5% bound (the sign test's steps leave little slack at a tool's default rounds); a real difference
passes both, and the fresh rounds cost time only when something was flagged.

Pure Python (``math``, ``random`` for the bootstrap that benchmarks use): no numpy, deterministic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

__all__ = [
    "CONFIDENCE",
    "MIN_ROUNDS",
    "RatioSummary",
    "Verdict",
    "bootstrap_median_ci",
    "confirm",
    "flagged",
    "median",
    "median_interval",
    "paired_ratios",
    "rounds_needed",
    "summarize",
    "verdict",
]

Verdict = Literal["faster", "slower", "no difference detected"]

# The least number of rounds a tool accepts: fewer say nothing at all. A verdict needs more where many ratios are
# judged together (`rounds_needed`: 6 for one, 11 for 32 at 95%); below that the interval is the range of the ratios
# and no verdict is given.
MIN_ROUNDS = 5

# The family-wise confidence of every tool's intervals: all the intervals of one table hold together this often.
CONFIDENCE = 0.95


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Per-round ratios ``numerator[i] / denominator[i]``; both must be equally long, positive and finite."""
    if len(numerator) != len(denominator):
        raise ValueError(f"paired ratios need one value of each per round: got {len(numerator)} and "
                         f"{len(denominator)} values")
    for value in (*numerator, *denominator):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"paired ratios need positive, finite values (times or rates), got {value!r}")
    return [n / d for n, d in zip(numerator, denominator, strict=True)]


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("the median of no values is undefined")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def bootstrap_median_ci(values: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap ``confidence`` interval of the median of ``values``.

    The values are sorted before resampling, so the interval depends on the values, not on their order: the same
    rounds measured in another order give the same interval. ``seed`` makes it reproducible.
    """
    if not values:
        raise ValueError("a confidence interval needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    ordered = sorted(values)
    n = len(ordered)
    if ordered[0] == ordered[-1]:
        return ordered[0], ordered[0]
    rng = random.Random(seed)
    mid = n // 2
    medians = []
    for _ in range(resamples):
        sample = sorted(rng.choices(ordered, k=n))
        medians.append(sample[mid] if n % 2 else (sample[mid - 1] + sample[mid]) / 2)
    medians.sort()
    alpha = 1 - confidence
    low = medians[max(0, math.floor(alpha / 2 * resamples))]
    high = medians[min(resamples - 1, math.ceil((1 - alpha / 2) * resamples) - 1)]
    return low, high


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The distribution-free ``confidence`` interval of the median of ``values`` (independent draws): the sorted
    values ``x[k-1]`` and ``x[n-k]`` for the largest ``k`` with ``P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2``,
    the sign test's interval. It covers the median at least ``confidence`` of the time whatever the distribution;
    None when ``n`` values are too few for that confidence (``2 / 2**n > 1 - confidence``)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    n = len(values)
    tail = Fraction(1 - confidence) * 2 ** (n - 1)  # the most binomial weight (of 2**n in all) a side may leave out
    k, below = 0, 0  # below: the weight of Binomial(n, 1/2) < k, in units of 2**-n
    while k < n and below + math.comb(n, k) <= tail:
        below += math.comb(n, k)
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def rounds_needed(comparisons: int = 1, confidence: float = CONFIDENCE) -> int:
    """The fewest rounds that give ``comparisons`` ratios a verdict at family-wise ``confidence``."""
    n = 1
    while median_interval([0.0] * n, 1 - (1 - confidence) / comparisons) is None:
        n += 1
    return n


def verdict(low: float, high: float) -> Verdict:
    """For a *time* ratio (candidate / baseline): "faster" when the whole interval is below 1.0, "slower" above."""
    if high < 1.0:
        return "faster"
    if low > 1.0:
        return "slower"
    return "no difference detected"


@dataclass(frozen=True)
class RatioSummary:
    """The median of per-round ratios, its interval, the verdict, how many rounds it rests on, and how many ratios
    were judged together with it (``comparisons``: the interval is one of a family that holds together with
    `CONFIDENCE`; its own confidence is `confidence`). ``screened``: 0 for a plain summary; for a confirmation
    (`confirm`: a verdict timed again in fresh rounds, which these figures come from) how many ratios the first
    rounds judged together."""

    median: float
    low: float
    high: float
    verdict: Verdict
    rounds: int
    comparisons: int = 1
    screened: int = 0

    @property
    def confidence(self) -> float:
        """This interval's own confidence: ``1 - (1 - CONFIDENCE) / comparisons`` (Bonferroni)."""
        return 1 - (1 - CONFIDENCE) / self.comparisons

    def as_dict(self) -> dict[str, float | int | str]:
        return {"median": self.median, "low": self.low, "high": self.high, "verdict": self.verdict,
                "rounds": self.rounds, "comparisons": self.comparisons, "screened": self.screened}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RatioSummary:
        """The summary `as_dict` wrote (one saved before ``comparisons`` existed stood alone: 1; before
        ``screened``, unconfirmed: 0)."""
        return cls(float(data["median"]), float(data["low"]), float(data["high"]),  # type: ignore[arg-type]
                   data["verdict"], int(data["rounds"]),  # type: ignore[arg-type,call-overload]
                   int(data.get("comparisons", 1)), int(data.get("screened", 0)))  # type: ignore[call-overload]


def summarize(numerator: Sequence[float], denominator: Sequence[float], *, comparisons: int = 1) -> RatioSummary:
    """Paired ratios of two per-round series: median, interval (`median_interval`), verdict (see `verdict`).

    ``comparisons``: how many ratios are judged together with this one (a table's rows); its interval is then at
    ``1 - (1 - CONFIDENCE) / comparisons``, so that a verdict of the family is wrong with at most ``1 - CONFIDENCE``
    probability, one-sided ("faster" alone) with half that. With fewer rounds than `rounds_needed` the interval is
    the range of the ratios and the verdict is always "no difference detected": too few rounds to conclude anything.
    With times (ms per call) the ratio is a time ratio and `verdict` reads as faster/slower for the numerator.
    """
    if not isinstance(comparisons, int) or isinstance(comparisons, bool) or comparisons < 1:
        raise ValueError(f"comparisons must be an int >= 1, got {comparisons!r}")
    ratios = paired_ratios(numerator, denominator)
    if not ratios:
        raise ValueError("no rounds to summarize")
    mid = median(ratios)
    interval = median_interval(ratios, 1 - (1 - CONFIDENCE) / comparisons)
    if interval is None:
        return RatioSummary(mid, min(ratios), max(ratios), "no difference detected", len(ratios), comparisons)
    low, high = interval
    return RatioSummary(mid, low, high, verdict(low, high), len(ratios), comparisons)


def flagged(summary: RatioSummary | None) -> bool:
    """Whether ``summary`` has a verdict ("faster" or "slower") that `confirm` must time again."""
    return summary is not None and summary.verdict != "no difference detected"


def confirm(screen: RatioSummary, numerator: Sequence[float], denominator: Sequence[float], *,
            comparisons: int) -> RatioSummary:
    """A verdict of the screening rounds (``screen``) confirmed on fresh rounds: the summary of the fresh per-round
    series, its interval one of ``comparisons`` (the verdicts confirmed together), whose verdict stands only where it
    is ``screen``'s; else "no difference detected" (an interval on the other side of 1.0 than the screening's is
    two chance results that disagree). ``screened`` records the screening's family."""
    fresh = summarize(numerator, denominator, comparisons=comparisons)
    kept: Verdict = fresh.verdict if fresh.verdict == screen.verdict else "no difference detected"
    return RatioSummary(fresh.median, fresh.low, fresh.high, kept, fresh.rounds, comparisons, screen.comparisons)
