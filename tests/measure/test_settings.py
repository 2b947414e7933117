"""`nvscope.Measure`: one settings object for the tools' measuring keywords, with named presets; a tool takes it as
``measure=``, each field also as a keyword (the keyword wins), and refuses a bad one before the step runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from noisy_double import StepClock

import nvscope
from nvscope import Measure, OptionSet

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::nvscope.NvscopeWarning")


def timed_step(fusion: Callable[[], OptionSet], clock: StepClock) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        fusion()
        clock.advance(0.004)
        return x.clone()

    return step


def test_presets_are_named_frozen_and_a_wrong_name_is_said() -> None:
    quick, thorough = Measure.preset("quick"), Measure.preset("thorough")
    assert (quick.rounds, quick.steps, quick.warmup) == (10, 1, 1)
    assert (thorough.rounds, thorough.warmup) == (60, 5)
    assert Measure.preset("default") == Measure()
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.rounds = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"^Measure.preset\(\) takes 'default', 'quick', 'thorough', not 'fast'$"):
        Measure.preset("fast")


@pytest.mark.parametrize(("fields", "message"), [
    ({"steps": 0}, "steps must be an int >= 1, got 0"), ({"warmup": -1}, "warmup must be an int >= 0, got -1"),
    ({"tolerance": -1}, "tolerance must be a finite number >= 0 or None, got -1"),
    ({"repeat": 0}, "repeat must be an int >= 1, got 0"), ({"seed": 1.5}, "seed must be an int, got 1.5")])
def test_a_bad_field_is_refused_when_the_measure_is_made(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message + "$"):
        Measure(**fields)  # type: ignore[arg-type]


def test_search_runs_with_the_measure_and_a_keyword_wins_over_it(
        fusion: Callable[[], OptionSet], clock: StepClock) -> None:
    import torch

    step, x = timed_step(fusion, clock), torch.ones(3)
    quick = nvscope.search(step, x, candidates=["fast_math"],
                           measure=dataclasses.replace(Measure.preset("quick"), progress=False, seed=3))
    assert (quick.rounds, quick.warmup, quick.seed) == (10, 1, 3)
    mixed = nvscope.search(step, x, candidates=["fast_math"], measure=Measure(rounds=12, warmup=1, progress=False),
                           rounds=7)
    assert (mixed.rounds, mixed.warmup) == (7, 1)  # rounds= wins; warmup from the measure
    plain = nvscope.search(step, x, candidates=["fast_math"], rounds=6, progress=False)
    assert (plain.rounds, plain.warmup) == (6, 2)  # the tool's own defaults where nothing is given


def test_profile_takes_the_measure(fusion: Callable[[], OptionSet], clock: StepClock) -> None:
    import torch

    result = nvscope.profile(timed_step(fusion, clock), torch.ones(3), enable=["fast_math"],
                             measure=Measure(rounds=6, warmup=0, progress=False))
    assert (result.rounds, result.warmup) == (6, 0)


def test_compare_reads_rounds_as_its_repeat(fusion: Callable[[], OptionSet], clock: StepClock) -> None:
    import torch

    step, x = timed_step(fusion, clock), torch.ones(3)
    result = nvscope.compare(step, x, variants={"a": {}}, show=False, kernels=False, measure=Measure(rounds=3))
    assert len(result["a"].times_ms) == 3
    result = nvscope.compare(step, x, variants={"a": {}}, show=False, kernels=False, measure=Measure(rounds=3),
                             repeat=4)
    assert len(result["a"].times_ms) == 4


def test_a_measure_of_the_wrong_kind_and_a_bad_keyword_are_refused_before_the_step_runs() -> None:
    calls = []
    with pytest.raises(TypeError, match=r"^search\(measure=\) takes an nvscope.Measure, e.g. "):
        nvscope.search(calls.append, 1, measure="quick")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^steps_per_round must be an int >= 1, got 0$"):  # the keyword's name
        nvscope.search(calls.append, 1, measure=Measure.preset("quick"), steps_per_round=0)
    with pytest.raises(ValueError, match=r"^rounds must be an int >= 5, got 4 "):
        nvscope.profile(calls.append, 1, enable=["fast_math"], measure=Measure(rounds=4))
    assert calls == []


def test_rescue_and_bisect_program_fold_their_keywords_and_refuse_the_rest(tmp_path: Any) -> None:
    from nvscope._bisect._process import bisect_program

    with pytest.raises(TypeError, match=r"^rescue\(\) got an unexpected keyword argument 'repaet'; did you mean "
                                        r"'repeat'\? \(rescue\(\) takes reference, .*, measure, tolerance, progress, "
                                        r"repeat, timeout\)$"):
        nvscope.rescue(lambda: None, repaet=3)
    with pytest.raises(ValueError, match=r"^repeat must be an int >= 1, got 0$"):
        nvscope.rescue(lambda: None, repeat=0)
    with pytest.raises(ValueError, match=r"^timeout must be a finite number > 0, got 0$"):
        bisect_program([str(tmp_path / "x.py")], enable=["fast_math"], timeout=0)
    with pytest.raises(TypeError, match=r"did you mean 'timeout'\?"):
        bisect_program([str(tmp_path / "x.py")], enable=["fast_math"], timout=5)
