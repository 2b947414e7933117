"""Paired-ratio statistics: per-round ratios B/A of variants timed back to back in a random order (a slow spell hits
both), their median with the sign test's interval (family-wise over the ratios judged together), and a verdict
confirmed on fresh rounds (`confirm`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import median  # the mean of the middle two for an even count; ValueError for none
from typing import Literal

__all__ = [
    "CONFIDENCE",
    "MIN_ROUNDS",
    "RatioSummary",
    "Verdict",
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

MIN_ROUNDS = 5  # fewer rounds say nothing; a verdict may need more (`rounds_needed`)
CONFIDENCE = 0.95  # family-wise: all the intervals of one table hold together this often


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Per-round ratios; both series equally long, positive and finite."""
    if len(numerator) != len(denominator):
        raise ValueError(f"paired ratios need one value of each per round: got {len(numerator)} and "
                         f"{len(denominator)} values")
    for value in (*numerator, *denominator):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"paired ratios need positive, finite values (times or rates), got {value!r}")
    return [n / d for n, d in zip(numerator, denominator, strict=True)]


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The sign test's ``confidence`` interval of the median; None when ``n`` values are too few."""
    n = len(values)
    tail = Fraction(1 - confidence) * 2 ** (n - 1)  # binomial weight (of 2**n) one side may leave out
    k, below = 0, 0
    while k < n and below + math.comb(n, k) <= tail:
        below += math.comb(n, k)
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def rounds_needed(comparisons: int = 1) -> int:
    """The fewest rounds that give ``comparisons`` ratios a verdict at family-wise `CONFIDENCE`."""
    n = 1
    while median_interval([0.0] * n, 1 - (1 - CONFIDENCE) / comparisons) is None:
        n += 1
    return n


def verdict(low: float, high: float) -> Verdict:
    """"faster" when the whole interval of a time ratio is below 1.0, "slower" when above."""
    if high < 1.0:
        return "faster"
    if low > 1.0:
        return "slower"
    return "no difference detected"


@dataclass(frozen=True)
class RatioSummary:
    """Per-round ratios' median, interval, verdict and rounds; ``comparisons``: the ratios judged with it;
    ``screened``: for a confirmation, those the first rounds judged."""

    median: float
    low: float
    high: float
    verdict: Verdict
    rounds: int
    comparisons: int = 1
    screened: int = 0

    @property
    def confidence(self) -> float:
        """This interval's own confidence (Bonferroni)."""
        return 1 - (1 - CONFIDENCE) / self.comparisons

    def as_dict(self) -> dict[str, float | int | str]:
        return {"median": self.median, "low": self.low, "high": self.high, "verdict": self.verdict,
                "rounds": self.rounds, "comparisons": self.comparisons, "screened": self.screened}

    @classmethod
    def from_dict(cls, data: dict[str, object] | None) -> RatioSummary | None:
        """The summary `as_dict` wrote (None: none)."""
        if data is None:
            return None
        return cls(float(data["median"]), float(data["low"]), float(data["high"]),  # type: ignore[arg-type]
                   data["verdict"], int(data["rounds"]),  # type: ignore[arg-type,call-overload]
                   int(data.get("comparisons", 1)), int(data.get("screened", 0)))  # type: ignore[call-overload]


def summarize(numerator: Sequence[float], denominator: Sequence[float], *, comparisons: int = 1) -> RatioSummary:
    """Paired ratios' median, interval at ``1 - (1 - CONFIDENCE) / comparisons`` and verdict (none with fewer
    rounds than `rounds_needed`: the interval is then the range)."""
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
    """Whether ``summary`` has a verdict for `confirm` to time again."""
    return summary is not None and summary.verdict != "no difference detected"


def confirm(screen: RatioSummary, numerator: Sequence[float], denominator: Sequence[float], *,
            comparisons: int) -> RatioSummary:
    """``screen``'s verdict timed again on fresh rounds: it stands only where the fresh verdict agrees."""
    fresh = summarize(numerator, denominator, comparisons=comparisons)
    kept: Verdict = fresh.verdict if fresh.verdict == screen.verdict else "no difference detected"
    return RatioSummary(fresh.median, fresh.low, fresh.high, kept, fresh.rounds, comparisons, screen.comparisons)
