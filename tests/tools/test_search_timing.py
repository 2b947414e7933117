"""The search's timing of fast functions: the calls per sample are calibrated, so that a verdict between identical
variants is wrong about as often as its 95% interval says, and a call too short to judge is warned about."""

from __future__ import annotations

import time
import warnings
from collections import Counter

import pytest

import nvscope

# The statistical property, with a binomial argument. Each trial is an independent search (its own default, its own
# seed) of one candidate that changes nothing (no fusion runs on CPU), so the number of verdicts other than "no
# difference detected" is Binomial(TRIALS, p). Nominally p = 5 %; the percentile bootstrap of a median undercovers a
# little: 6.3 % on simulated i.i.d. ratios of 60 rounds, 6.0 % measured (12 of 200 trials, 7 faster and 5 slower, on
# a loaded 2-core machine). Allowing at most BOUND of TRIALS: P(X > 9) = 2.3e-5 at p = 7 % and 4.5e-4 even at
# p = 10 % (a machine adding noise the rounds do not cancel), so the test does not flake. Before the calibration,
# samples of 5 calls of this sub-microsecond step (a few microseconds) were biased by what surrounds a block, which
# differs between variants (a scope is entered just before it): 57 of 90 trials said "slower" (p = 0.63), which
# passes this bound with probability P(X <= 9) = 2.5e-4 (2 % at p = 0.5). ROUNDS = 60 rather than the default 30:
# the bias is small (0.6 %), and narrower intervals expose it.
TRIALS = 30
ROUNDS = 60
BOUND = 9


def short_step() -> int:
    return sum(range(100))  # under a microsecond: before calibration, a sample of 5 calls lasted a few microseconds


def test_verdicts_between_identical_variants_are_wrong_about_5_percent_of_the_time() -> None:
    verdicts: Counter[str] = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nvscope.NvscopeWarning)  # a slow machine may find the step too short
        for seed in range(TRIALS):
            result = nvscope.search(short_step, candidates=["fast_math"], seed=seed, rounds=ROUNDS, progress=False)
            verdicts[result["fast_math"].status] += 1
    wrong = TRIALS - verdicts["no difference detected"]
    assert wrong <= BOUND, verdicts


def test_a_call_too_short_to_judge_is_warned_about() -> None:
    with pytest.warns(nvscope.NvscopeWarning, match="too short to judge") as caught:
        result = nvscope.search(lambda: None, candidates=["fast_math"], rounds=5, progress=False)
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert any("too short to judge" in note for note in result.notes)
    assert "too short to judge" in result.table()


def test_a_call_long_enough_is_not_warned_about() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NvscopeWarning)
        result = nvscope.search(lambda: time.sleep(0.002), candidates=["fast_math"], rounds=5, steps_per_round=1,
                        progress=False)
    assert not any("too short" in note or "raised" in note for note in result.notes)
