"""The search's timing and statistics: the calls per sample are calibrated, so that a verdict between identical
variants is wrong no more often than its interval says; however many candidates are tried, the search recommends a
set that is no faster at most 5 % of the time (a family-wise rate); a call too short to judge is warned about."""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from noisy_double import NoisyFusions

import nvscope
from nvscope import OptionSet
from nvscope._measure._candidates import default_candidates

pytest.importorskip("torch")  # nvscope's direct adapter rebuilds definitions from Python that imports torch

# The statistical property, with a binomial argument. Each trial is an independent search (its own default, its own
# seed) of one candidate that changes the fusion's options but not its speed, so the number of verdicts other than
# "no difference detected" is Binomial(TRIALS, p), p at most 5 % (the sign test's interval is exact; at 60 rounds it
# is 95.2 %). Allowing at most BOUND of TRIALS: P(X > 9) = 2.3e-5 at p = 7 % and 4.5e-4 even at p = 10 % (a machine
# adding noise the rounds do not cancel), so the test does not flake. Before the calibration, samples of 5 calls of
# a sub-microsecond step (a few microseconds) were biased by what surrounds a block, which differs between variants
# (a scope is entered just before it): 57 of 90 trials said "slower" (p = 0.63), which passes this bound with
# probability P(X <= 9) = 2.5e-4 (2 % at p = 0.5). ROUNDS = 60 rather than the default 30: the bias is small
# (0.6 %), and narrower intervals expose it.
TRIALS = 30
ROUNDS = 60
BOUND = 9


def first_fused(fusion: Callable[[], OptionSet], then: Callable[[], object]) -> Callable[[], object]:
    """A step that runs a fusion in its first call (so the search takes it: the default's first call ran one), and
    is ``then`` after it: a short call stays short."""
    called: list[OptionSet] = []

    def step() -> object:
        if not called:
            called.append(fusion())
        return then()

    return step


def test_verdicts_between_identical_variants_are_wrong_about_5_percent_of_the_time(
        fusion: Callable[[], OptionSet]) -> None:
    verdicts: Counter[str] = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nvscope.NvscopeWarning)  # a slow machine may find the step too short
        for seed in range(TRIALS):
            # Under a microsecond: before calibration, a sample of 5 calls lasted a few microseconds.
            step = first_fused(fusion, lambda: sum(range(100)))
            result = nvscope.search(step, candidates=["fast_math"], seed=seed, rounds=ROUNDS, progress=False)
            verdicts[result["fast_math"].status] += 1
    wrong = TRIALS - verdicts["no difference detected"]
    assert wrong <= BOUND, verdicts


def test_a_call_too_short_to_judge_is_warned_about(fusion: Callable[[], OptionSet]) -> None:
    step = first_fused(fusion, lambda: None)
    with pytest.warns(nvscope.NvscopeWarning, match="too short to judge") as caught:
        result = nvscope.search(step, candidates=["fast_math"], rounds=5, progress=False)
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert any("too short to judge" in note for note in result.notes)
    assert "too short to judge" in result.table()


def test_a_call_long_enough_is_not_warned_about(fusion: Callable[[], OptionSet]) -> None:
    def step() -> None:
        fusion()
        time.sleep(0.002)

    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NvscopeWarning)
        result = nvscope.search(step, candidates=["fast_math"], rounds=5, steps_per_round=1, progress=False)
    assert not any("too short" in note or "raised" in note for note in result.notes)


# --- many candidates: the family-wise rate ---------------------------------------------------------------------

# The case: every default candidate (32 sets) on a step whose speed no option changes. Each search judges 32
# ratios; the sign-test intervals are simultaneous at 95 % (Bonferroni), so a chance "faster" anywhere has at most
# 2.5 % probability (one side of the two), and a chance combination needs a chance single first. Recommending
# anything in more than 10 of 200 seeds would be P(X > 10) = 0.003 at p = 2.5 %; before the correction (one 95 %
# bootstrap interval per candidate) it was most seeds. The clock is the host's plus the drawn delays (see
# tests/noisy_double.py), so 200 searches of 32 candidates take seconds.
SEEDS = 200
MOST = 10


@pytest.fixture
def noisy(monkeypatch: pytest.MonkeyPatch) -> Iterator[NoisyFusions]:
    double = NoisyFusions(monkeypatch)
    yield double
    double.close()


def test_32_identical_noisy_candidates_recommend_nothing_in_190_of_200_seeds(noisy: NoisyFusions) -> None:
    assert len(default_candidates()) == 32
    recommended = []
    for seed in range(SEEDS):
        noisy.reseed(seed)
        result = nvscope.search(noisy.step, seed=seed, steps_per_round=1, warmup=1, progress=False)
        if seed == 0:  # every candidate ran the fusion in a partition of its own: each was judged on time
            assert [r.new_partitions for r in result.rows[1:]] == [1] * 32
            assert all(r.ratio is not None and r.ratio.comparisons == 32 for r in result.rows[1:33])
        if result.recommended:
            recommended.append((seed, result.recommendation()))
    assert len(recommended) <= MOST, recommended


def test_a_candidate_that_is_faster_is_still_found_among_32(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the same property: the correction keeps a real gain (x0.5 on the fusion) visible among the
    32 candidates, in the same noise; recommending nothing would pass the test above without controlling anything."""
    double = NoisyFusions(monkeypatch, factors={"fast_math": 0.5})
    try:
        for seed in range(10):
            double.reseed(seed)
            result = nvscope.search(double.step, seed=seed, steps_per_round=1, warmup=1, progress=False)
            assert result.recommended == OptionSet(["fast_math"]), result.table()
            assert result["fast_math"].status == "faster"
    finally:
        double.close()
