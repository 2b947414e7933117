"""nvscope._measure._stats: paired ratios, the median, its interval (the sign test's, alone or one of a family) and
the verdict."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvscope._measure._stats import (
    MIN_ROUNDS,
    RatioSummary,
    confirm,
    flagged,
    median,
    median_interval,
    paired_ratios,
    rounds_needed,
    summarize,
    verdict,
)

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
    # Five rounds cannot give a 95 % interval of a median (2 / 2**5 > 5 %): even five ratios of 0.5 say nothing.
    five = summarize([1.0] * 5, [2.0] * 5)
    assert five.verdict == "no difference detected" and five.high == 0.5
    assert summarize([1.0] * 6, [2.0] * 6).verdict == "faster"
    # Judged together with 31 others, a ratio needs 11 rounds.
    assert summarize([1.0] * 10, [2.0] * 10, comparisons=32).verdict == "no difference detected"
    assert summarize([1.0] * 11, [2.0] * 11, comparisons=32).verdict == "faster"


def test_rounds_needed() -> None:
    assert [rounds_needed(m) for m in (1, 2, 7, 32, 1000)] == [6, 7, 9, 11, 16]


@pytest.mark.parametrize("n", [6, 10, 30, 61])
@pytest.mark.parametrize("confidence", [0.95, 1 - 0.05 / 32])
def test_the_sign_test_interval_is_the_binomial_one(n: int, confidence: float) -> None:
    """Order statistics k and n+1-k with the largest k whose binomial tail P(X < k) stays within (1 - c) / 2: the
    interval's coverage is 1 - 2 P(X < k) >= c, and one place further in would fall short of it."""
    from math import comb

    def below(k: int) -> float:  # P(Binomial(n, 1/2) < k)
        return sum(comb(n, i) for i in range(k)) / 2**n

    interval = median_interval([float(i) for i in range(n)], confidence)
    if interval is None:
        assert 2 * below(1) > 1 - confidence
        return
    k = int(interval[0]) + 1
    assert interval == (k - 1, n - k)
    assert 1 - 2 * below(k) >= confidence > 1 - 2 * below(k + 1)


def test_a_family_of_identical_variants_rarely_gets_any_verdict() -> None:
    """32 candidates identical to the default (independent noise, the default's rounds shared as in a search): with
    each interval at 1 - 5 %/32, a verdict anywhere in the family is rarer than 5 %; one 95 % interval each gave
    one in most families."""
    rng = random.Random(5)
    families, any_verdict, uncorrected = 300, 0, 0
    for _ in range(families):
        base = [rng.lognormvariate(0, 0.1) for _ in range(30)]
        candidates = [[rng.lognormvariate(0, 0.1) for _ in range(30)] for _ in range(32)]
        any_verdict += any(summarize(c, base, comparisons=32).verdict != "no difference detected"
                           for c in candidates)
        uncorrected += any(summarize(c, base).verdict != "no difference detected" for c in candidates)
    assert any_verdict <= 0.05 * families, any_verdict
    assert uncorrected >= 0.5 * families, uncorrected  # the same data, judged one by one


def test_a_summary_saved_before_families_reads_as_one_of_one() -> None:
    saved = {"median": 0.9, "low": 0.8, "high": 0.95, "verdict": "faster", "rounds": 30}
    assert RatioSummary.from_dict(saved) == RatioSummary(0.9, 0.8, 0.95, "faster", 30, 1)
    assert RatioSummary.from_dict(saved).screened == 0  # saved before confirmations: a plain summary
    ratio = summarize([1.0] * 11, [2.0] * 11, comparisons=32)
    assert RatioSummary.from_dict(ratio.as_dict()) == ratio and ratio.comparisons == 32
    assert ratio.confidence == pytest.approx(1 - 0.05 / 32)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["faster", "slower", "no difference detected"]), st.integers(1, 64), st.integers(1, 8),
       st.lists(st.tuples(times, times), min_size=1, max_size=30))
def test_a_confirmation_keeps_a_verdict_only_where_the_fresh_rounds_give_it_again(
        screened: str, family: int, k: int, pairs: list[tuple[float, float]]) -> None:
    screen = RatioSummary(1.0, 0.5, 2.0, screened, 20, family)  # type: ignore[arg-type]
    numerator, denominator = [a for a, _ in pairs], [b for _, b in pairs]
    fresh = summarize(numerator, denominator, comparisons=k)
    confirmed = confirm(screen, numerator, denominator, comparisons=k)
    assert (confirmed.median, confirmed.low, confirmed.high, confirmed.rounds) == \
        (fresh.median, fresh.low, fresh.high, fresh.rounds)  # the fresh rounds' figures
    assert confirmed.verdict == (screened if fresh.verdict == screened else "no difference detected")
    assert (confirmed.comparisons, confirmed.screened) == (k, family)
    assert RatioSummary.from_dict(confirmed.as_dict()) == confirmed
    assert flagged(confirmed) == (confirmed.verdict != "no difference detected") and not flagged(None)


def test_confirmed_verdicts_of_identical_variants_are_rare_and_real_ones_stay() -> None:
    """The two stages of a tool's verdicts: 32 ratios screened as one family, the flagged ones confirmed on fresh
    rounds as a family of their own. Identical variants: the screening flags some family about as often as its 5 %
    allows, the confirmation keeps almost none of them; a real gain (x0.5) survives both in every family."""
    rng = random.Random(7)

    def rounds(factor: float = 1.0) -> tuple[list[float], list[float]]:
        return ([factor * rng.lognormvariate(0, 0.2) for _ in range(20)],
                [rng.lognormvariate(0, 0.2) for _ in range(20)])

    def confirmed(factors: list[float]) -> list[str]:
        screen = [summarize(*rounds(f), comparisons=len(factors)) for f in factors]
        again = [i for i, r in enumerate(screen) if flagged(r)]
        return [confirm(screen[i], *rounds(factors[i]), comparisons=len(again)).verdict for i in again]

    families = 1000
    flagged_once = confirmed_any = 0
    for _ in range(families):
        verdicts = confirmed([1.0] * 32)
        flagged_once += bool(verdicts)
        confirmed_any += any(v != "no difference detected" for v in verdicts)
    assert 0.01 * families <= flagged_once <= 0.07 * families, flagged_once  # the screening alone: about 5 %
    assert confirmed_any <= 0.005 * families, confirmed_any  # about 5 % x 5 %
    for _ in range(50):
        assert confirmed([0.5, *[1.0] * 31])[:1] == ["faster"]


@pytest.mark.parametrize("comparisons", [0, -1, 1.5, True])
def test_comparisons_is_a_count(comparisons: object) -> None:
    with pytest.raises(ValueError, match="comparisons must be an int >= 1"):
        summarize([1.0] * 6, [1.0] * 6, comparisons=comparisons)  # type: ignore[arg-type]


def test_identical_variants_rarely_get_a_verdict() -> None:
    """The false-positive rate for two variants that are the same: at most the 5 % a 95 % interval allows (4.3 %
    at 30 rounds: the sign test's interval is exact, conservative where the binomial steps)."""
    rng = random.Random(3)
    false_positives = 0
    experiments = 1000
    for _ in range(experiments):
        base = [10 * rng.lognormvariate(0, 0.1) for _ in range(30)]
        same = [10 * rng.lognormvariate(0, 0.1) for _ in range(30)]
        false_positives += summarize(same, base).verdict != "no difference detected"
    assert false_positives / experiments <= 0.065  # P(X > 65) = 2e-3 at p = 4.3 %


@settings(max_examples=60, deadline=None)
@given(series)
def test_interval_contains_the_median(values: list[float]) -> None:
    exact = median_interval(values)
    assert exact is None or min(values) <= exact[0] <= median(values) <= exact[1] <= max(values)
    assert (exact is None) == (len(values) < 6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(times, times), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_the_order_of_rounds_does_not_matter(pairs: list[tuple[float, float]], rng: random.Random) -> None:
    shuffled = pairs[:]
    rng.shuffle(shuffled)
    a = summarize([p[0] for p in pairs], [p[1] for p in pairs])
    b = summarize([p[0] for p in shuffled], [p[1] for p in shuffled])
    assert a == b


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(times, times), min_size=rounds_needed(), max_size=30))
def test_verdict_is_what_the_interval_excludes(pairs: list[tuple[float, float]]) -> None:
    result = summarize([p[0] for p in pairs], [p[1] for p in pairs])
    assert result.verdict == verdict(result.low, result.high)
    assert (result.verdict == "faster") == (result.high < 1) and (result.verdict == "slower") == (result.low > 1)


@settings(max_examples=40, deadline=None)
@given(series, st.floats(min_value=0.1, max_value=10))
def test_scaling_the_candidate_scales_the_ratio(base: list[float], factor: float) -> None:
    candidate = [b * factor for b in base]
    result = summarize(candidate, base)
    assert result.median == pytest.approx(factor)
    assert result.low == pytest.approx(factor) and result.high == pytest.approx(factor)

