"""nvscope.search_fusions (``nvscope search --per-fusion``) against the Thunder double: fusion k's execute takes
``base[k]`` seconds times the factor of each enable option it runs with (on the tools' clock, the `clock` fixture: no
sleep), so which candidate helps which fusion is known, and so is whether the per-fusion map beats the best global
set."""

from __future__ import annotations

import json
from typing import Any

import pytest
from noisy_double import StepClock
from thunder_double import ThunderDouble

import nvscope
from nvscope import OptionSet, nv_options
from nvscope._search._fusions import search_fusions

# The effects are 50 %, and a fusion's time is exactly what it advances the `clock` fixture by; a whole step's time
# also holds the host's microseconds between its fusions, which min_gain=0.1 leaves room for. 16 rounds: the
# per-fusion intervals are simultaneous over fusions x candidates (six here, each at 99.2 %: between the 3rd and 14th
# of 16 ratios).
QUICK = {"rounds": 16, "steps_per_round": 1, "warmup": 1, "progress": False, "min_gain": 0.1}


def model(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, clock: StepClock, base: list[float],
          factors: dict[int, dict[str, float]]) -> Any:
    original = double.fe.FusionDefinition.execute

    def execute(fd: Any, inputs: Any, **kwargs: Any) -> Any:
        tag = next(int(c[0][len("ops.tag"):]) for c in fd.calls if c[0].startswith("ops.tag"))
        seconds = base[tag]
        for name in kwargs.get("_enable_options") or ():
            seconds *= factors.get(tag, {}).get(name, 1.0)
        clock.advance(seconds)
        return original(fd, inputs, **kwargs)

    monkeypatch.setattr(double.fe.FusionDefinition, "execute", execute)
    wrappers = [double.make_wrapper(f"nvFusion{k}", ops=("linear", f"tag{k}")) for k in range(len(base))]

    def step(x: float) -> float:
        for wrapper in wrappers:
            (x,) = wrapper(x)
        return x

    return step


def test_each_fusion_gets_the_candidate_that_helps_it_and_the_map_beats_every_global_set(
        double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, clock: StepClock) -> None:
    # fast_math halves fusion 0 and doubles fusion 1; tma_pointwise the other way round: globally each is slower
    # (11 ms against 9: clearly, so that noise on a loaded machine cannot make one look faster; a wash of 9 against 9
    # did once), per fusion each wins where it helps.
    step = model(double, monkeypatch, clock, [0.004, 0.004, 0.001],
                 {0: {"fast_math": 0.5, "tma_pointwise": 2.0}, 1: {"fast_math": 2.0, "tma_pointwise": 0.5}})
    result = search_fusions(step, 1.0, candidates=["fast_math", "tma_pointwise"], **QUICK)
    chosen = {c.fusion: c.options for c in result.choices}
    assert chosen == {"forward/nvFusion0": OptionSet(["fast_math"]), "forward/nvFusion1": OptionSet(["tma_pointwise"]),
                      "forward/nvFusion2": None}
    assert result.global_best is None  # neither global set is faster end to end
    assert result.map_vs_default is not None and result.map_vs_default.verdict == "faster"
    assert result.map_vs_default.median == pytest.approx(5 / 9, abs=0.15)
    assert result.better and result.verdict() == "the per-fusion map is faster than the defaults"
    assert result.code() == ("with nv_options(enable=['fast_math'], fusions=['forward/nvFusion0']), \\\n"
                             "     nv_options(enable=['tma_pointwise'], fusions=['forward/nvFusion1']):")
    assert nvscope.current_options() == OptionSet()
    # The code it prints is what was timed: under it, each fusion runs with its own candidate.
    double.executions.clear()
    with nv_options(enable=["fast_math"], fusions=["forward/nvFusion0"]), \
         nv_options(enable=["tma_pointwise"], fusions=["forward/nvFusion1"]):
        step(1.0)
    assert [ex.enable for ex in double.executions] == [["fast_math"], ["tma_pointwise"], []]
    data = json.loads(json.dumps(result.as_dict()))
    assert data["better"] is True and data["groups"][0] == {"options": "fast_math", "fusions": ["forward/nvFusion0"]}


def test_says_plainly_when_the_map_is_not_better_than_the_global_set(double: ThunderDouble,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     clock: StepClock) -> None:
    # fast_math helps both big fusions: the map is fast_math on them, which is what fast_math globally does.
    step = model(double, monkeypatch, clock, [0.004, 0.004, 0.001], {0: {"fast_math": 0.5}, 1: {"fast_math": 0.5}})
    result = search_fusions(step, 1.0, candidates=["fast_math", "tma_pointwise"], **QUICK)
    assert result.global_best == OptionSet(["fast_math"])
    assert result.global_vs_default is not None and result.global_vs_default.verdict == "faster"
    g = result.map_vs_global  # the same options where it matters: no difference, or a sliver below min_gain
    assert g is not None and (g.verdict != "faster" or g.median > 1 - QUICK["min_gain"]), g
    assert not result.better
    assert result.verdict().startswith("the per-fusion map is NOT better than the best global set fast_math")
    assert "use nv_options('fast_math') instead" in result.verdict() or "instead" in result.table()


def test_a_map_faster_than_the_global_set_by_a_sliver_is_not_better() -> None:
    """Faster by 0.2 % with a tight interval (a real run in CI: the map and the global set were the same options on
    the fusions that mattered) is not worth the map's scopes: the same min_gain as per fusion applies."""
    from nvscope._measure._stats import RatioSummary
    from nvscope._search._fusions import FusionSearchResult

    def ratio(median: float, low: float, high: float, verdict: str) -> RatioSummary:
        return RatioSummary(median, low, high, verdict, 10)

    def result(vs_global: RatioSummary) -> FusionSearchResult:
        return FusionSearchResult((), ((OptionSet(["fast_math"]), ("forward/nvFusion0",)),), OptionSet(["fast_math"]),
                                  ratio(0.5, 0.48, 0.52, "faster"), vs_global, ratio(0.5, 0.48, 0.52, "faster"), None,
                                  (), (), 1.0, min_gain=0.03)

    sliver = result(ratio(0.998, 0.997, 0.9997, "faster"))
    assert not sliver.better
    assert sliver.verdict().startswith("the per-fusion map is NOT better than the best global set fast_math")
    assert "faster by less than min_gain 0.03" in sliver.verdict()
    assert result(ratio(0.9, 0.88, 0.92, "faster")).better
    assert json.loads(json.dumps(sliver.as_dict()))["min_gain"] == 0.03


def test_no_candidate_helps(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, clock: StepClock) -> None:
    step = model(double, monkeypatch, clock, [0.002, 0.002], {0: {"fast_math": 1.5}})
    result = search_fusions(step, 1.0, candidates=["fast_math"], **QUICK)
    assert result.groups == () and not result.better
    assert result.verdict() == "no candidate helps any fusion: keep the defaults"
    assert result.code() == "keep the defaults"


def test_identical_noisy_candidates_choose_nothing_over_fusions_x_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """4 fusions x 8 candidates that change no fusion's speed, each execution a random 1 ms (tests/noisy_double.py),
    at the default rounds: the per-fusion choices are made from 32 intervals that form one family (and the global
    set from 8), so a chance verdict anywhere has at most 5 % probability per search, and each profile confirms its
    verdicts in fresh rounds, so a chance choice needs a second miss (none of 200 seeds chose anything).
    At most 10 of 200 seeds (P(X > 10) = 0.014 at the full 5 %); one 95 % interval per fusion and candidate chose
    something in most seeds."""
    from noisy_double import NoisyFusions

    from nvscope._measure._candidates import default_candidates

    double = NoisyFusions(monkeypatch, fusions=4)
    candidates = default_candidates()[:8]
    chose = []
    try:
        for seed in range(200):
            double.reseed(seed)
            result = search_fusions(double.step, candidates=candidates, seed=seed, progress=False)
            if seed == 0:
                ratios = [r.ratio for p in result.profiles for r in p.rows]
                assert len(ratios) == 32 and all(r is not None and (r.screened or r.comparisons) == 32 for r in ratios)
            if result.groups or result.global_best is not None:
                chose.append((seed, result.code(), result.global_best))
    finally:
        double.close()
    assert len(chose) <= 10, chose


def test_a_candidate_really_faster_on_every_fusion_is_still_chosen_among_8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: fast_math makes every fusion x0.5, in the same noise, among 8 candidates at the default rounds:
    chosen for each fusion (its verdicts confirmed) and as the best global set."""
    from noisy_double import NoisyFusions

    from nvscope._measure._candidates import default_candidates

    double = NoisyFusions(monkeypatch, fusions=4, factors={"fast_math": 0.5})
    try:
        for seed in range(5):
            double.reseed(seed)
            result = search_fusions(double.step, candidates=default_candidates()[:8], seed=seed, progress=False)
            assert [c.options for c in result.choices] == [OptionSet(["fast_math"])] * 4, result.table()
            assert all(c.ratio is not None and c.ratio.screened == 32 for c in result.choices)
            assert result.global_best == OptionSet(["fast_math"])
            assert "each verdict confirmed in fresh rounds" in result.table()
    finally:
        double.close()

