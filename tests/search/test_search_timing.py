"""The search's timing and statistics: a verdict between identical variants is wrong no more often than its interval
says; however many candidates are tried, the search recommends a set that is no faster at most 5 % of the time (a
family-wise rate); a call too short to judge is warned about. The timed calls draw how long they take and advance the
tools' clock by that (tests/noisy_double.py): no test here sleeps, and a loaded machine cannot decide a verdict."""

from __future__ import annotations

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
# seed) of one candidate that changes the fusion's options but not its speed (each execution a random 1 ms, the same
# law for both), so the number of verdicts other than "no difference detected" is Binomial(TRIALS, p), p at most 5 %
# (the sign test's interval is exact; at 60 rounds it is 95.2 %). Allowing at most BOUND of TRIALS: P(X > 9) = 2.3e-5
# at p = 7 % and 4.5e-4 even at p = 10 %, so the test does not flake; an interval that covered 80 % (p = 20 %) or a
# bias the rounds do not cancel fails it. On the host's clock alone, with a sub-microsecond step, a loaded machine
# made 13 of 30 trials say "faster": the drawn times are what is measured now.
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
        monkeypatch: pytest.MonkeyPatch) -> None:
    double = NoisyFusions(monkeypatch)
    verdicts: Counter[str] = Counter()
    try:
        for seed in range(TRIALS):
            double.reseed(seed)
            result = nvscope.search(double.step, candidates=["fast_math"], seed=seed, rounds=ROUNDS, warmup=1,
                                    progress=False)
            if seed == 0:  # the candidate ran the fusion in a partition of its own: judged on time
                assert result["fast_math"].new_partitions == 1
            verdicts[result["fast_math"].status] += 1
    finally:
        double.close()
    wrong = TRIALS - verdicts["no difference detected"]
    assert wrong <= BOUND, verdicts


def test_a_call_too_short_to_judge_is_warned_about(fusion: Callable[[], OptionSet]) -> None:
    step = first_fused(fusion, lambda: None)
    with pytest.warns(nvscope.NvscopeWarning, match="too short to judge") as caught:
        result = nvscope.search(step, candidates=["fast_math"], rounds=5, progress=False)
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert any("too short to judge" in note for note in result.notes)
    assert "too short to judge" in result.table()


def test_a_call_long_enough_is_not_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    double = NoisyFusions(monkeypatch)  # each call a drawn 1 ms, against microseconds of the search's own per call
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", nvscope.NvscopeWarning)
            result = nvscope.search(double.step, candidates=["fast_math"], rounds=5, steps_per_round=1,
                                    progress=False)
    finally:
        double.close()
    assert not any("too short" in note or "raised" in note for note in result.notes)


# --- many candidates: the family-wise rate ---------------------------------------------------------------------

# The case: every default candidate (32 sets) on a step whose speed no option changes, the search at its
# default rounds. Each search judges 32 ratios; the sign-test intervals are simultaneous at 95 % (Bonferroni), so a
# chance "faster" anywhere has at most 2.5 % probability (one side of the two; 6 of 200 seeds had one), a chance
# combination needs a chance single first, and the set chosen is recommended only if fresh rounds confirm it (a
# second chance miss: about 2.5 % x 2.5 %; none of 200 seeds). Recommending anything in more than 10 of 200 seeds
# would be P(X > 10) = 0.003 at p = 2.5 %; before the correction (one 95 % bootstrap interval per candidate) it was
# most seeds. The clock counts only the drawn delays (see tests/noisy_double.py), so 200 searches of 32
# candidates take under a minute.
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
        result = nvscope.search(noisy.step, seed=seed, progress=False)
        if seed == 0:  # every candidate ran the fusion in a partition of its own: each was judged on time
            assert [r.new_partitions for r in result.rows[1:]] == [1] * 32
            assert all(r.ratio is not None and r.ratio.comparisons == 32 for r in result.rows[1:33])
        if result.recommended:
            recommended.append((seed, result.recommendation()))
    assert len(recommended) <= MOST, recommended


def test_a_candidate_that_is_faster_is_still_found_among_32(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the same property: the correction and the confirmation keep a real gain (x0.5 on the
    fusion) visible among the 32 candidates, in the same noise; recommending nothing would pass the test above
    without controlling anything."""
    double = NoisyFusions(monkeypatch, factors={"fast_math": 0.5})
    try:
        for seed in range(10):
            double.reseed(seed)
            result = nvscope.search(double.step, seed=seed, progress=False)
            assert result.recommended == OptionSet(["fast_math"]), result.table()
            assert result["fast_math"].status == "faster"
            [note] = [n for n in result.notes if "fresh rounds" in n]
            assert note.startswith("fast_math timed again against the default in 30 fresh rounds") and \
                note.endswith("confirmed")
    finally:
        double.close()


def test_a_winner_the_fresh_rounds_do_not_confirm_is_not_recommended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gain that lasts only as long as the candidates' rounds (a machine that changed under the search, say): the
    candidate's row says "faster", but the fresh rounds that confirm a recommendation see no difference, so nothing
    is recommended and a note says why."""
    double = NoisyFusions(monkeypatch)
    calls = [0]

    def counted() -> float:
        calls[0] += 1
        if calls[0] > measured:
            double.factors.clear()
        return double.step()

    try:
        measured = 10**9  # first: how many calls a search makes when nothing wins (no fast_math factor)
        double.reseed(3)
        assert not nvscope.search(counted, candidates=["fast_math"], seed=3, progress=False).recommended
        measured, calls[0] = calls[0], 0
        double.factors["fast_math"] = 0.5  # x0.5 in the candidates' rounds, x1 from the confirmation on
        result = nvscope.search(counted, candidates=["fast_math"], seed=3, progress=False)
    finally:
        double.close()
    assert result["fast_math"].status == "faster" and not result.recommended
    assert result.recommendation().startswith("keep the defaults")
    [note] = [n for n in result.notes if "fresh rounds" in n]
    assert note.endswith("not confirmed, so nothing is recommended (its 'faster' was chance, or too small to show "
                         "twice)"), note
