"""nvscope._measure._stats: paired ratios, the median, its bootstrap interval and the verdict."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvscope._measure._stats import MIN_ROUNDS, bootstrap_median_ci, median, paired_ratios, summarize, verdict

times = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
series = st.lists(times, min_size=1, max_size=40)


def test_paired_ratios_are_per_round() -> None:
    assert paired_ratios([2.0, 3.0, 8.0], [1.0, 3.0, 4.0]) == [2.0, 1.0, 2.0]


@pytest.mark.parametrize(("numerator", "denominator", "match"), [
    ([1.0, 2.0], [1.0], "one value of each per round"),
    ([1.0, 0.0], [1.0, 1.0], "positive, finite"),
    ([1.0, float("nan")], [1.0, 1.0], "positive, finite"),
    ([1.0], [float("inf")], "positive, finite"),
    ([1.0], [-2.0], "positive, finite"),
])
def test_paired_ratios_reject_bad_input(numerator: list[float], denominator: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_ratios(numerator, denominator)


def test_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_verdict_reads_a_time_ratio() -> None:
    assert verdict(0.90, 0.99) == "faster"
    assert verdict(1.01, 1.20) == "slower"
    assert verdict(0.95, 1.05) == "no difference detected"
    assert verdict(0.95, 1.0) == "no difference detected"  # an interval touching 1.0 does not exclude it


def test_clear_differences_get_verdicts() -> None:
    rng = random.Random(1)
    base = [10 * rng.lognormvariate(0, 0.05) for _ in range(30)]
    faster = [b * 0.8 * rng.lognormvariate(0, 0.02) for b in base]
    slower = [b * 1.3 * rng.lognormvariate(0, 0.02) for b in base]
    fast, slow = summarize(faster, base), summarize(slower, base)
    assert fast.verdict == "faster" and fast.high < 1 and fast.median == pytest.approx(0.8, rel=0.03)
    assert slow.verdict == "slower" and slow.low > 1 and slow.median == pytest.approx(1.3, rel=0.03)
    assert fast.rounds == slow.rounds == 30


def test_pairing_cancels_what_hits_a_whole_round() -> None:
    """Round-to-round swings of +-40 % hide a 3 % difference from unpaired medians, not from paired ratios."""
    rng = random.Random(2)
    machine = [rng.uniform(0.6, 1.4) for _ in range(40)]  # how slow the machine was in each round
    base = [m * 10 * rng.lognormvariate(0, 0.005) for m in machine]
    candidate = [m * 9.7 * rng.lognormvariate(0, 0.005) for m in machine]
    result = summarize(candidate, base)
    assert result.verdict == "faster"
    assert result.median == pytest.approx(0.97, abs=0.005)


def test_too_few_rounds_give_the_range_and_no_verdict() -> None:
    result = summarize([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert result.median == 0.5 and (result.low, result.high) == (0.5, 0.5)
    assert result.verdict == "no difference detected" and result.rounds == 3 < MIN_ROUNDS


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bootstrap_median_ci([])
    with pytest.raises(ValueError):
        bootstrap_median_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_median_ci([1.0, 2.0], resamples=0)


def test_identical_variants_rarely_get_a_verdict() -> None:
    """The false-positive rate for two variants that are the same: about the 5 % a 95 % interval allows."""
    rng = random.Random(3)
    false_positives = 0
    experiments = 200
    for _ in range(experiments):
        base = [10 * rng.lognormvariate(0, 0.1) for _ in range(30)]
        same = [10 * rng.lognormvariate(0, 0.1) for _ in range(30)]
        false_positives += summarize(same, base, resamples=500).verdict != "no difference detected"
    assert false_positives / experiments <= 0.12


@settings(max_examples=60, deadline=None)
@given(series)
def test_interval_contains_the_median(values: list[float]) -> None:
    low, high = bootstrap_median_ci(values, resamples=400)
    assert low <= median(values) <= high
    assert min(values) <= low and high <= max(values)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(times, times), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_the_order_of_rounds_does_not_matter(pairs: list[tuple[float, float]], rng: random.Random) -> None:
    shuffled = pairs[:]
    rng.shuffle(shuffled)
    a = summarize([p[0] for p in pairs], [p[1] for p in pairs], resamples=300)
    b = summarize([p[0] for p in shuffled], [p[1] for p in shuffled], resamples=300)
    assert a == b


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(times, times), min_size=MIN_ROUNDS, max_size=30))
def test_verdict_is_what_the_interval_excludes(pairs: list[tuple[float, float]]) -> None:
    result = summarize([p[0] for p in pairs], [p[1] for p in pairs], resamples=300)
    assert result.verdict == verdict(result.low, result.high)
    assert (result.verdict == "faster") == (result.high < 1) and (result.verdict == "slower") == (result.low > 1)


@settings(max_examples=40, deadline=None)
@given(series, st.floats(min_value=0.1, max_value=10))
def test_scaling_the_candidate_scales_the_ratio(base: list[float], factor: float) -> None:
    candidate = [b * factor for b in base]
    result = summarize(candidate, base, resamples=200)
    assert result.median == pytest.approx(factor)
    assert result.low == pytest.approx(factor) and result.high == pytest.approx(factor)


def test_seeded_and_reproducible() -> None:
    rng = random.Random(4)
    values = [rng.uniform(0.9, 1.1) for _ in range(25)]
    assert bootstrap_median_ci(values, seed=7) == bootstrap_median_ci(values, seed=7)
    assert bootstrap_median_ci(values, seed=7) != bootstrap_median_ci(values, seed=8)
