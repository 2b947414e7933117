"""Paired-ratio statistics: is variant B faster than variant A on a noisy machine, and how sure are we?

The method (used by `nvscope.search` and ``benchmarks/thunder_steps.py``): time the variants back to back, in a
random order, over many short rounds. A slow spell of the machine (another process, a clock change, a page-cache
miss) then hits every variant of that round alike, so the per-round ratio B/A cancels it; what remains is the
spread of the ratios across rounds. The median ratio ignores the outlier rounds that timing always has (a GC
pause, a preempted thread), and a percentile bootstrap gives a 95% interval for it without assuming a
distribution. The verdict only says what the interval excludes: "faster" or "slower" when it excludes 1.0,
"no difference detected" otherwise (which is not "no difference": the interval says how large one could be).

Pure Python (``random``, ``math``): no numpy, and deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MIN_ROUNDS",
    "RatioSummary",
    "Verdict",
    "bootstrap_median_ci",
    "median",
    "paired_ratios",
    "summarize",
    "verdict",
]

Verdict = Literal["faster", "slower", "no difference detected"]

# Below this many rounds a percentile bootstrap is degenerate (with two values it can only return them), so no
# verdict is given: the interval is then the range of the ratios, reported as such.
MIN_ROUNDS = 5


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


def verdict(low: float, high: float) -> Verdict:
    """For a *time* ratio (candidate / baseline): "faster" when the whole interval is below 1.0, "slower" above."""
    if high < 1.0:
        return "faster"
    if low > 1.0:
        return "slower"
    return "no difference detected"


@dataclass(frozen=True)
class RatioSummary:
    """The median of per-round ratios, its interval, the verdict, and how many rounds it rests on."""

    median: float
    low: float
    high: float
    verdict: Verdict
    rounds: int

    def as_dict(self) -> dict[str, float | int | str]:
        return {"median": self.median, "low": self.low, "high": self.high, "verdict": self.verdict,
                "rounds": self.rounds}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RatioSummary:
        return cls(float(data["median"]), float(data["low"]), float(data["high"]),  # type: ignore[arg-type]
                   data["verdict"], int(data["rounds"]))  # type: ignore[arg-type,call-overload]


def summarize(numerator: Sequence[float], denominator: Sequence[float], *, confidence: float = 0.95,
              resamples: int = 2000, seed: int = 0) -> RatioSummary:
    """Paired ratios of two per-round series: median, bootstrap interval, verdict (see `verdict`).

    With times (ms per call) the ratio is a time ratio and `verdict` reads as faster/slower for the numerator.
    With fewer than `MIN_ROUNDS` rounds the interval is the range of the ratios and the verdict is always
    "no difference detected": too few rounds to conclude anything.
    """
    ratios = paired_ratios(numerator, denominator)
    if not ratios:
        raise ValueError("no rounds to summarize")
    mid = median(ratios)
    if len(ratios) < MIN_ROUNDS:
        return RatioSummary(mid, min(ratios), max(ratios), "no difference detected", len(ratios))
    low, high = bootstrap_median_ci(ratios, confidence=confidence, resamples=resamples, seed=seed)
    return RatioSummary(mid, low, high, verdict(low, high), len(ratios))
