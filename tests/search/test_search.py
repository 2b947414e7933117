"""nvscope search on CPU: a step that runs a fusion (the direct double, through nvscope's adapter: the `fusion`
fixture) and whose speed and numerics depend on the options that fusion ran with. Big effects (x0.5, x2), and the
step's time is what it advances the tools' clock by (the `clock` fixture: no sleep), so verdicts are certain and the
file is quick."""

from __future__ import annotations

import io
import itertools
import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from noisy_double import NoisyFusions, StepClock
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
from nvscope import OptionSet, UnknownOptionError, current_options
from nvscope._measure._candidates import default_candidates, parse_candidate
from nvscope._search._report import SearchResult, SearchRow
from nvscope._search._search import search

torch = pytest.importorskip("torch")
# Most tests here search functions of a microsecond on purpose; test_search_timing.py tests that warning.
pytestmark = pytest.mark.filterwarnings("ignore:nvscope.search. a call of the function takes:nvscope.NvscopeWarning")

BASE_S = 0.004
FAST = {"fast_math": 0.5, "memory_promotion": 0.6, "tma_inner_persistent": 0.7}  # time factors, alone
QUICK = {"rounds": 5, "steps_per_round": 1, "warmup": 1, "progress": False}
# For the tests that assert timing verdicts. The intervals are simultaneous over all candidates (seven, at most, here:
# each at 99.3 %, between the 6th and 19th of 24 ratios); on the `clock` fixture's time every round's ratio is what
# the step says, so only tma_reduction's alternation spreads them, and no busy machine can.
TIMED = {**QUICK, "rounds": 24}

Fusion = Callable[[], OptionSet]  # the `fusion` fixture (tests/conftest.py): runs a fusion, returns its options


class Workload:
    """``step(x)``: runs a fusion, takes BASE_S x the factors of the options it ran with (on the tools' clock: no
    sleep), returns x (times 1.01 under tma_pointwise).

    fast_math x0.5 and memory_promotion x0.6 compound; tma_inner_persistent is x0.7 alone but x1.5 on top of
    fast_math (it conflicts); ws_normalization x2 (slower); tma_reduction alternates x0.5 / x1.5 from call to call
    (no difference on median, with a wide interval); -fma raises. Every call's options are recorded.
    """

    def __init__(self, fusion: Fusion, clock: StepClock) -> None:
        self.fusion, self.clock = fusion, clock
        self.calls: list[OptionSet] = []
        self.parity = 0

    def __call__(self, x: Any) -> Any:
        options = self.fusion()  # what nvFuser received: the scope's options
        self.calls.append(options)
        if "fma" in options.disable:
            raise RuntimeError("INTERNAL ASSERT FAILED at csrc/scheduler/runtime_info.h:69\nthe rest of the message")
        factor = 1.0
        for name, f in FAST.items():
            if name in options.enable:
                factor *= 1.5 if name == "tma_inner_persistent" and "fast_math" in options.enable else f
        if "ws_normalization" in options.enable:
            factor *= 2.0
        if "tma_reduction" in options.enable:
            self.parity += 1
            factor *= 0.5 if self.parity % 2 else 1.5
        self.clock.advance(BASE_S * factor)
        return x * 1.01 if "tma_pointwise" in options.enable else x.clone()


@pytest.fixture
def fusion(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fusion]:
    """``fusion()`` runs a fusion in the active scope and returns the options nvFuser received: as the conftest's
    fixture, but one that every option can change (its definition holds every op the catalog gates on), so that
    memory_promotion or ws_normalization reach it."""
    double = NoisyFusions(monkeypatch, noise=False)
    yield double.run
    double.close()


@pytest.fixture
def work(fusion: Fusion, clock: StepClock) -> Workload:
    return Workload(fusion, clock)


def test_verdicts_ranking_failures_and_the_greedy_combination(work: Workload) -> None:
    candidates = ["fast_math", "memory_promotion", "tma_inner_persistent", "ws_normalization", "tma_reduction",
                  "tma_pointwise", "-fma"]
    result = search(work, torch.ones(4), candidates=candidates, **TIMED)
    status = {row.label: row.status for row in result.rows}
    assert status == {
        "default": "baseline",
        "fast_math": "faster", "memory_promotion": "faster", "tma_inner_persistent": "faster",
        "ws_normalization": "slower", "tma_reduction": "no difference detected",
        "tma_pointwise": "over tolerance", "-fma": "failed",
        "fast_math + memory_promotion": "faster",
        "fast_math + memory_promotion + tma_inner_persistent": "faster",  # than the default, not than the set
    }
    assert result["fast_math"].ratio is not None and result["fast_math"].ratio.median == pytest.approx(0.5, abs=0.1)
    assert result["-fma"].error == "RuntimeError: INTERNAL ASSERT FAILED at csrc/scheduler/runtime_info.h:69"
    assert result["-fma"].ratio is None and result["-fma"].ms_per_call is None
    # Adding tma_inner_persistent was measured against the set it extends, in the same rounds, and was slower.
    tried = result["fast_math + memory_promotion + tma_inner_persistent"]
    assert tried.versus == "fast_math + memory_promotion"
    assert tried.versus_ratio is not None and tried.versus_ratio.verdict == "slower"
    kept = result["fast_math + memory_promotion"]
    assert kept.versus == "fast_math" and kept.versus_ratio is not None and kept.versus_ratio.verdict == "faster"
    assert result.recommended == OptionSet(["fast_math", "memory_promotion"])
    assert [r.label for r in result.rows if r.recommended] == ["fast_math + memory_promotion"]
    assert result.recommendation() == "nv_options(enable=['fast_math', 'memory_promotion'])"
    ranked = [r.label for r in result.ranked()]
    assert ranked[0] == "default" and ranked[-1] == "-fma"
    assert ranked.index("fast_math + memory_promotion") < ranked.index("fast_math") < ranked.index("ws_normalization")
    # Over tolerance: timed, ranked, marked, never recommended, and the output difference is reported.
    over = result["tma_pointwise"]
    assert over.numerics is not None and not over.numerics.ok and "out: rel diff" in over.numerics.detail
    assert over.numerics.max_abs_diff == pytest.approx(0.01) and over.numerics.max_rel_diff == pytest.approx(0.01)


def test_a_candidate_that_changed_no_fusion_is_never_recommended(monkeypatch: pytest.MonkeyPatch,
                                                                 clock: StepClock) -> None:
    """fuse_matmul cannot affect a pointwise fusion (the catalog routes it to its defaults), so its kernels are the
    default's and any speed it shows is noise; here the step itself runs faster under any option, as noise once made
    a candidate look on CI: timed "faster", yet not recommended, and the notes say why. fast_math, which the fusion
    did run with, is recommended on the same timing."""
    reset_nvscope()
    try:
        wrapper = ThunderDouble(monkeypatch).make_wrapper("nvFusion0", ops=("add",))

        def step(x: float) -> float:
            clock.advance(BASE_S * (0.5 if current_options().enable else 1.0))
            (y,) = wrapper(x)
            return float(y)

        with warnings.catch_warnings():
            warnings.simplefilter("error", nvscope.NoEffectWarning)  # the note says it: no warning per candidate
            result = search(step, 1.0, candidates=["fuse_matmul", "fast_math"], **TIMED)
    finally:
        reset_nvscope()
    idle, used = result["fuse_matmul"], result["fast_math"]
    assert idle.status == "faster" and idle.fusions == 1 and idle.new_partitions == 0 and not idle.recommended
    assert used.status == "faster" and used.new_partitions == 1 and used.recommended
    assert result.recommended == OptionSet(["fast_math"])
    assert [r.label for r in result.rows] == ["default", "fuse_matmul", "fast_math"]  # nothing combined with it
    assert any(n.startswith("fuse_matmul: every fusion it reached ran its defaults") for n in result.notes)


def test_every_call_runs_under_exactly_one_variant_and_nothing_leaks(work: Workload) -> None:
    result = search(work, torch.ones(2), candidates=["-fma", "fast_math"], **QUICK)
    allowed = {OptionSet(), OptionSet(disable=["fma"]), OptionSet(["fast_math"])}
    assert set(work.calls) == allowed
    failing = work.calls.index(OptionSet(disable=["fma"]))
    assert work.calls[failing + 1:].count(OptionSet(disable=["fma"])) == 0  # skipped after its failure
    assert current_options() == OptionSet()
    # 1 first call + 1 warm-up + 5 rounds of 1 call.
    assert work.calls.count(OptionSet(["fast_math"])) == 1 + 1 + 5
    assert result["fast_math"].ratio is not None and result["fast_math"].ratio.rounds == 5


def test_a_failure_while_timed_is_reported_and_dropped(fusion: Fusion, clock: StepClock) -> None:
    count = {"n": 0}

    def flaky(x: Any) -> Any:
        if "fast_math" in fusion().enable:
            count["n"] += 1
            if count["n"] > 4:  # first call and warm-up pass; it breaks in the rounds
                raise ValueError("out of memory")
        clock.advance(0.001)  # over MIN_SAMPLE_S (nvscope._measure._timer): a sample is one call
        return x

    result = search(flaky, 1.0, candidates=["fast_math", "tma_pointwise"], **QUICK)
    assert result["fast_math"].error is not None and result["fast_math"].error.endswith("ValueError: out of memory")
    assert "while timed, round" in result["fast_math"].error
    assert result["tma_pointwise"].ratio is not None and result["tma_pointwise"].ratio.rounds == 5


def test_runs_in_development_mode_and_restores_the_setting(fusion: Fusion) -> None:
    seen = []

    def fn(x: Any) -> Any:
        fusion()
        seen.append(nvscope.is_development_mode())
        return x

    nvscope.set_development_mode(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.DevelopmentModeWarning)
        search(fn, 1.0, candidates=["fast_math"], **QUICK)
    assert all(seen) and seen
    assert nvscope.set_development_mode(True) is False  # the previous setting is back


def test_the_search_s_development_mode_does_not_leak_to_other_threads(fusion: Fusion) -> None:
    """The search turns development mode on for its own context: a thread running meanwhile keeps the process-wide
    setting (it entered its scopes outside development mode, and must still be warned)."""
    import threading

    nvscope.set_development_mode(False)
    asked, answered, seen_there, seen_here = threading.Event(), threading.Event(), [], []

    def other() -> None:
        asked.wait(30)
        seen_there.append(nvscope.is_development_mode())
        answered.set()

    def fn(x: Any) -> Any:
        fusion()
        if not asked.is_set():
            asked.set()
            answered.wait(30)
        seen_here.append(nvscope.is_development_mode())
        return x

    thread = threading.Thread(target=other)
    thread.start()
    search(fn, 1.0, candidates=["fast_math"], **QUICK)
    thread.join(30)
    assert seen_there == [False] and seen_here and all(seen_here)
    assert nvscope.is_development_mode() is False


def test_the_default_failing_stops_the_search() -> None:
    def broken(x: Any) -> Any:
        raise KeyError("no such parameter")

    with pytest.raises(KeyError, match="no such parameter"):
        search(broken, 1.0, candidates=["fast_math"], **QUICK)
    assert current_options() == OptionSet()


def test_winners_that_contradict_each_other_are_not_combined(fusion: Fusion, clock: StepClock) -> None:
    def step(x: Any) -> Any:  # id_model and -id_model: both faster, alone; together they are no option set
        options = fusion()
        clock.advance(BASE_S * (0.5 if "id_model" in options.enable else 0.6 if "id_model" in options.disable else 1))
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error", nvscope.NvscopeWarning)  # nothing stopped early
        result = search(step, 1.0, candidates=["id_model", "-id_model"], **TIMED)
    assert result["id_model"].status == result["-id_model"].status == "faster"
    assert [r.stage for r in result.rows] == ["default", "candidate", "candidate"]  # no combination was run
    assert "id_model + -id_model not tried: it would enable and disable id_model" in result.notes
    assert result.recommended == OptionSet(["id_model"])


def test_a_failure_late_in_the_search_keeps_what_was_measured(fusion: Fusion, clock: StepClock) -> None:
    combined: list[bool] = []

    def step(x: Any) -> Any:
        options = fusion()
        if len(options.enable) == 2:
            combined.append(True)
        elif not options and combined:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")  # the default, at last
        clock.advance(BASE_S * (0.5 if options.enable else 1))
        return x

    with pytest.warns(nvscope.NvscopeWarning, match="stopped early"):
        result = search(step, 1.0, candidates=["fast_math", "memory_promotion"], **TIMED)
    assert result["fast_math"].status == result["memory_promotion"].status == "faster"  # measured, kept
    note = next(n for n in result.notes if n.startswith("the search stopped early"))
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in note
    assert result.recommended in (OptionSet(["fast_math"]), OptionSet(["memory_promotion"]))  # the best measured
    assert note.endswith("the recommendation rests on them alone, not confirmed in fresh rounds")
    assert "note: the search stopped early" in result.table()


def test_progress_to_a_closed_stderr_does_not_stop_the_search(work: Workload, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    result = search(work, torch.ones(1), candidates=["fast_math"], **{**QUICK, "progress": True})
    assert result["fast_math"].ratio is not None


# --- numerics ---------------------------------------------------------------------------------------------------

def test_a_reused_output_buffer_does_not_hide_a_difference(fusion: Fusion) -> None:
    buffer = torch.zeros(3)

    def in_place(x: Any) -> Any:
        buffer.fill_(2.0 if "fast_math" in fusion().enable else 1.0)
        return buffer  # every call returns the same tensor

    result = search(in_place, None, candidates=["fast_math", "tma_pointwise"], **QUICK)
    assert result["fast_math"].numerics is not None and result["fast_math"].numerics.max_abs_diff == 1.0
    assert not result["fast_math"].numerics.ok
    assert result["tma_pointwise"].numerics is not None and result["tma_pointwise"].numerics.max_abs_diff == 0.0


@pytest.mark.parametrize(("bad", "kind"), [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_nan_and_inf_anywhere_show(bad: float, kind: str, fusion: Fusion) -> None:
    def fn(x: Any) -> Any:
        out = x.clone()
        if "fast_math" in fusion().enable:
            out[1, 2] = bad
        return {"hidden": [1, out]}

    result = search(fn, torch.ones(2, 4), candidates=["fast_math"], **QUICK)
    n = result["fast_math"].numerics
    assert n is not None and not n.ok
    assert n.nonfinite == f"{kind} in out['hidden'][1] (1)"
    assert "NaN/Inf where the default has none" in n.detail
    assert result.recommended == OptionSet()
    assert result.recommendation().startswith("keep the defaults")


class Opaque:
    """An output neither tool can compare."""


@pytest.mark.parametrize(("default", "candidate", "verdict", "detail"), [
    (None, None, "not compared", ""),  # nothing to judge: not "ok"
    ("text", "text", "ok", ""),  # str are compared for equality
    ("text", "other", "over", "out: 'text' became 'other'"),
    (1 + 2j, 1 + 3j, "over", "out: rel diff 0.45 > 1e-07"),
    ({"y": 1.0}, {"x": 1.0}, "over", "the structure differs: out['y'] only in the default; out['x'] only in this"),
    ([1.0, [2.0]], [[1.0], 2.0], "over", "the structure differs: out[0], out[1][0] only in the default; out[0][0], "),
    (1.0, "a", "over", "out: a float became a str"),
    (True, 1, "over", "out: a bool became an int"),
])
def test_outputs_without_numbers_are_not_called_ok(default: Any, candidate: Any, verdict: str, detail: str,
                                                  fusion: Fusion) -> None:
    result = search(lambda: candidate if fusion() else default, candidates=["fast_math"], **QUICK)
    n = result["fast_math"].numerics
    assert n is not None and n.verdict == verdict and n.detail.startswith(detail)
    assert (result["fast_math"].status == "over tolerance") == (verdict == "over")
    row = next(line for line in result.table().splitlines() if " fast_math " in line)
    assert f"  {'OVER: ' + detail if verdict == 'over' else verdict}" in row


def test_objects_that_cannot_be_compared_are_named(fusion: Fusion) -> None:
    result = search(lambda: (torch.ones(2), Opaque(), fusion())[:2], candidates=["fast_math"], **QUICK)
    n = result["fast_math"].numerics
    assert n is not None and n.verdict == "ok" and n.compared == 1 and n.uncompared == "out[1] (an Opaque)"
    assert "ok; not compared: out[1] (an Opaque)" in result.table()
    assert SearchResult.from_json(result.to_json()) == result


def test_tolerance_is_user_settable(work: Workload) -> None:
    strict = search(work, torch.ones(3), candidates=["tma_pointwise"], **QUICK)
    loose = search(work, torch.ones(3), candidates=["tma_pointwise"], tolerance=0.05, **QUICK)
    assert strict["tma_pointwise"].status == "over tolerance"
    assert loose["tma_pointwise"].numerics is not None and loose["tma_pointwise"].numerics.ok
    assert loose.tolerance == 0.05


def test_default_tolerance_follows_the_dtype(fusion: Fusion) -> None:
    def fn(x: Any) -> Any:
        return x * (1.005 if "fast_math" in fusion().enable else 1.0)

    half = search(fn, torch.ones(3, dtype=torch.bfloat16), candidates=["fast_math"], **QUICK)
    full = search(fn, torch.ones(3, dtype=torch.float32), candidates=["fast_math"], **QUICK)
    ints = search(lambda n: n + ("fast_math" in fusion().enable), 3, candidates=["fast_math"], **QUICK)
    assert half["fast_math"].numerics is not None and half["fast_math"].numerics.ok  # within bf16's 4e-2
    assert full["fast_math"].status == "over tolerance"  # beyond fp32's 1e-4
    assert ints["fast_math"].status == "over tolerance"  # integers must match exactly


def test_gradients_are_compared_with_backward_true(fusion: Fusion) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4, requires_grad=True)

    def loss(x: Any) -> Any:
        scale = 1.02 if "fast_math" in fusion().enable else 1.0
        return (model(x) ** 2).mean() * scale

    result = search(loss, x, candidates=["fast_math", "tma_pointwise"], backward=True, module=model, **QUICK)
    fast, same = result["fast_math"].numerics, result["tma_pointwise"].numerics
    assert fast is not None and same is not None
    assert fast.compared == same.compared == 4  # the loss, weight.grad, bias.grad (model) and x.grad (argument)
    assert not fast.ok and fast.detail.startswith("out: rel diff")
    assert same.ok and same.max_abs_diff == 0.0
    assert model.weight.grad is not None  # the search really ran backward


def test_gradients_of_a_function_that_runs_backward_itself_are_compared(fusion: Fusion) -> None:
    w = torch.ones(3, requires_grad=True)

    def step(w: Any) -> None:
        scale = 2.0 if "fast_math" in fusion().enable else 1.0
        (w * scale).sum().backward()  # returns nothing: only the gradient can show the difference

    result = search(step, w, candidates=["fast_math"], **QUICK)
    n = result["fast_math"].numerics
    assert n is not None and not n.ok and n.detail.startswith("grad[arg0]") and n.max_abs_diff == 1.0


def test_backward_true_needs_a_scalar_loss() -> None:
    with pytest.raises(TypeError, match="scalar loss tensor"):
        search(lambda: torch.ones(2, requires_grad=True) * 2, candidates=["fast_math"], backward=True, **QUICK)


def test_an_unrepeatable_default_is_noted(fusion: Fusion) -> None:
    counter = itertools.count()  # the search calls the default many times: a sample lasts at least a millisecond

    result = search(lambda: (fusion(), float(next(counter)))[1], candidates=["fast_math"], **QUICK)
    assert result.default.status == "baseline" and result.default.numerics is not None
    assert not result.default.numerics.ok
    assert any("not repeatable" in note for note in result.notes)


# --- candidates -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "expected"), [
    ("fast_math", OptionSet(["fast_math"])),
    ("+fast_math", OptionSet(["fast_math"])),
    ("fuse_matmul, -matmul_expr_eval", OptionSet(["fuse_matmul"], ["matmul_expr_eval"])),
    ("enable:fuse_matmul,disable:matmul_expr_eval", OptionSet(["fuse_matmul"], ["matmul_expr_eval"])),
    ({"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}, OptionSet(["fuse_matmul"], ["matmul_expr_eval"])),
    (OptionSet(disable=["fma"]), OptionSet(disable=["fma"])),
    (nvscope.nv_options(disable="fma"), OptionSet(disable=["fma"])),
])
def test_candidate_forms(spec: object, expected: OptionSet) -> None:
    assert parse_candidate(spec) == expected


@pytest.mark.parametrize(("candidates", "error", "match"), [
    (["fast_maht"], UnknownOptionError, "did you mean 'fast_math'"),
    (["fma"], UnknownOptionError, "write '-fma'"),
    (["-fast_math"], UnknownOptionError, "enable option: write .fast_math."),
    (["fast_math,,fma"], ValueError, "empty name"),
    ([{"enable": []}], ValueError, "no options"),
    ([{"enabled": ["fast_math"]}], TypeError, "unknown keys"),
    (["fast_math", "+fast_math"], ValueError, "same option set"),
    ([], ValueError, "is empty"),
    ("fast_math", TypeError, r"candidates=\['fast_math'\]"),
    ([42], TypeError, "a candidate is a str"),
])
def test_bad_candidates_fail_before_anything_runs(candidates: Any, error: type[Exception], match: str) -> None:
    calls: list[object] = []
    with pytest.raises(error, match=match):
        search(calls.append, 1, candidates=candidates, **QUICK)
    assert calls == [] and current_options() == OptionSet()


@pytest.mark.parametrize(("fn", "candidates", "kwargs"), [
    (lambda: None, ["x" * 100_000], {}),
    (lambda: None, ["fast_math," + "x" * 100_000], {}),
    (lambda: None, ["fast_math,," + "x" * 100_000], {}),
    (lambda: None, "x" * 100_000, {}),
    (lambda: None, [{"enable": ["fast_math"], "k" * 100_000: 1}], {}),
    (lambda: None, [b"x" * 100_000], {}),
    ("x" * 100_000, ["fast_math"], {}),
    (lambda: None, ["fast_math"], {"rounds": "9" * 100_000}),
    (lambda: None, ["fast_math"], {"tolerance": "9" * 100_000}),
])
def test_errors_do_not_echo_huge_inputs(fn: Any, candidates: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        search(fn, candidates=candidates, **{**QUICK, **kwargs})
    assert len(str(info.value)) < 500, str(info.value)[:300]


def test_a_huge_error_message_is_cut_in_the_table(fusion: Fusion) -> None:
    def fn() -> float:
        if fusion():
            raise RuntimeError("x" * 100_000)
        return 1.0

    result = search(fn, candidates=["fast_math"], **QUICK)
    assert result["fast_math"].error is not None and len(result["fast_math"].error) < 300
    assert result["fast_math"].error.endswith("(100000 characters)")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rounds": 4}, "rounds must be an int >= 5"),
    ({"steps_per_round": 0}, "steps_per_round"),
    ({"warmup": -1}, "warmup"),
    ({"tolerance": -1.0}, "tolerance"),
    ({"tolerance": float("nan")}, "tolerance"),
])
def test_bad_settings_fail_early(kwargs: dict[str, Any], match: str) -> None:
    settings = {**QUICK, **kwargs}
    with pytest.raises(ValueError, match=match):
        search(lambda: None, candidates=["fast_math"], **settings)


def test_default_candidates_are_the_catalogs_codegen_options_without_arguments() -> None:
    specs = default_candidates()
    catalog = nvscope.catalog()
    singles = {parse_candidate(s) for s in specs if "," not in s}
    expected = {OptionSet(**{o.kind: [o.name]}) for o in catalog.options
                if o.effect == "codegen" and not o.requires_args}
    assert singles == expected
    assert "fuse_matmul,-matmul_expr_eval" in specs and len(specs) == len(expected) + 1


def test_candidates_are_timed_in_batches_within_the_partition_bound(work: Workload,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "3")  # batches of 2 candidates
    candidates = ["fast_math", "ws_normalization", "tma_pointwise", "tma_reduction"]
    result = search(work, torch.ones(1), candidates=candidates, **QUICK)
    spans = {label: [i for i, o in enumerate(work.calls) if o == parse_candidate(label)] for label in candidates}
    assert max(spans["fast_math"] + spans["ws_normalization"]) < min(spans["tma_pointwise"] + spans["tma_reduction"])
    assert any("batches of 2" in note for note in result.notes)
    assert all(result[c].ratio is not None and result[c].ratio.rounds == 5 for c in candidates)  # type: ignore[union-attr]


# --- output -----------------------------------------------------------------------------------------------------

def test_table_progress_and_json_round_trip(work: Workload, capsys: pytest.CaptureFixture[str]) -> None:
    result = search(work, torch.ones(2), candidates=["fast_math", "-fma"], **{**TIMED, "progress": True})
    err = capsys.readouterr().err
    assert "nvscope search: [1/2] fast_math: first call" in err and "-fma: FAILED, skipped" in err
    assert "nvscope search: done" in err
    table = result.table()
    assert "* 1 fast_math" in table and "FAILED: RuntimeError: INTERNAL ASSERT FAILED" in table
    assert "the rest of the message" not in table
    assert table.endswith("recommended: nv_options(enable=['fast_math'])")
    text = result.to_json()
    data = json.loads(text)
    assert data["recommended"] == {"enable": ["fast_math"], "disable": []}
    assert [row["status"] for row in data["rows"]] == ["baseline", "faster", "failed"]
    assert SearchResult.from_json(text) == result
    quiet = search(work, torch.ones(2), candidates=["fast_math"], **QUICK)
    assert capsys.readouterr().err == "" and quiet.timer == "time.perf_counter"


def test_json_keeps_infinite_differences_valid(fusion: Fusion) -> None:
    def fn() -> Any:
        return [1.0] if "fast_math" in fusion().enable else [1.0, 2.0]  # the structure changes

    result = search(fn, candidates=["fast_math"], **QUICK)
    n = result["fast_math"].numerics
    assert n is not None and n.max_rel_diff == float("inf") and "structure" in n.detail
    assert "Infinity" not in result.to_json()
    assert SearchResult.from_json(result.to_json()) == result


def test_plot_writes_a_png(work: Workload, tmp_path: Any) -> None:
    pytest.importorskip("matplotlib")
    result = search(work, torch.ones(2), candidates=["fast_math", "ws_normalization", "-fma"], **QUICK)
    path = tmp_path / "search.png"
    assert result.plot(str(path)) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_get_it(work: Workload, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Any) -> None:
    result = search(work, torch.ones(2), candidates=["fast_math"], **QUICK)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        result.plot(str(tmp_path / "x.png"))


# --- what the search refuses, and how sure its verdicts are ------------------------------------------------------

def test_a_step_through_which_no_fusion_ran_is_refused(clock: StepClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """As profile and bisect refuse it: no option can reach such a step, so any speed a candidate showed would be
    chance (the issue's plain function ended in a recommendation)."""
    monkeypatch.setattr("nvscope._tools._common.machine_cause", lambda: None)  # a machine that runs fusions
    calls: list[OptionSet] = []

    def plain() -> float:
        calls.append(current_options())
        clock.advance(0.001 if current_options().enable else 0.002)  # it even reads the options: still refused
        return 1.0

    with pytest.raises(ValueError, match=r"^search: no nvFuser fusion ran through nvscope when the step ran with its "
                                         r"defaults.*is the function jitted \(thunder.jit\)") as info:
        search(plain, candidates=["fast_math"], **QUICK)
    assert "\n" not in str(info.value)
    assert calls == [OptionSet()] * 2  # the default's first call and its warm-up call only: no candidate ran
    assert current_options() == OptionSet()


def test_too_few_rounds_for_the_family_give_no_verdict_and_say_so(work: Workload) -> None:
    """Five rounds cannot give a 95 % interval of a median (the sign test needs six for one ratio, nine for seven):
    even a candidate twice as fast gets no verdict, and the note says how many rounds would."""
    result = search(work, torch.ones(1), candidates=["fast_math", "memory_promotion"], **QUICK)
    assert result["fast_math"].ratio is not None and result["fast_math"].ratio.median < 0.7
    assert result["fast_math"].status == result["memory_promotion"].status == "no difference detected"
    assert result.recommended == OptionSet()
    assert "note: 5 rounds are too few for any verdict: 2 candidates judged together at 95% need at least 7 rounds" \
        in result.table()


def test_one_candidate_is_said_in_the_singular(work: Workload, capsys: pytest.CaptureFixture[str]) -> None:
    search(work, torch.ones(1), candidates=["fast_math"], **{**QUICK, "progress": True})
    assert "nvscope search: 1 candidate; each variant's first call compiles" in capsys.readouterr().err


def _ranked_result(n: int) -> SearchResult:
    """A result of ``n`` timed candidates (the default's 32 labels, ranked by ratio), one failed one, a combination."""
    from nvscope._measure._numerics import Numerics
    from nvscope._measure._stats import RatioSummary

    ok = Numerics(0.0, 0.0, True, 1, "", "")
    labels = default_candidates()[:n]
    rows = [SearchRow("default", OptionSet(), "default", 0.004, 1.5, None, ok)]
    rows += [SearchRow(label, parse_candidate(label), "candidate", 0.003, 1.5 * (1 + i / 100),
                       RatioSummary(1 + i / 100, 0.9, 1.2, "no difference detected", 30, n), ok)
             for i, label in enumerate(labels)]
    rows.append(SearchRow("-fma", OptionSet(disable=["fma"]), "candidate", 0.002, error="RuntimeError: broken"))
    both = parse_candidate(labels[0]) | parse_candidate(labels[1])
    rows.append(SearchRow(f"{labels[0]} + {labels[1]}", both, "combination", 1.25, 1.2,
                          RatioSummary(0.8, 0.7, 0.9, "faster", 30, 2), ok, versus=labels[0],
                          versus_ratio=RatioSummary(0.8, 0.7, 0.95, "faster", 30, 2), recommended=True))
    return SearchResult(tuple(rows), both, "time.perf_counter", 30, 1, 1, None, 0, 1.0)


def test_the_table_keeps_its_columns_apart_for_ranks_of_10_and_more() -> None:
    """Ranks of 10 and more ran into labels (" 10-fma"), and cells as wide as their header touched it ("ms/call
    first call max|diff|")."""
    lines = _ranked_result(12).table().splitlines()
    header, rows = lines[0], lines[2:lines.index("")]
    assert "  ms/call  first call  max|diff|  max rel  numerics" in header
    # A mark, the rank right-aligned in two places, a blank, then the label.
    assert [line[:4] for line in rows] == ["    ", "* 1 ", "    ", *(f" {i:>2} " for i in range(2, 14)), "  - "]
    labels = default_candidates()[:12]
    assert [line[4:].strip().split("  ")[0] for line in rows] == [
        "default", f"{labels[0]} + {labels[1]}", f"vs {labels[0]}", *labels, "-fma"]
    # Every ratio sits under its header: the right-aligned column ends where "ratio" ends.
    end = header.index("ratio") + len("ratio")
    assert all(re.fullmatch(r"\d\.\d{3}", line[end - 5:end]) for line in rows[:-1]), rows
    assert rows[-1].split() == ["-", "-fma", "-", "failed", "-", "2.0", "ms", "-", "-", "FAILED:", "RuntimeError:",
                                "broken"]


def test_ranks_below_10_take_two_places_too() -> None:
    """Issue 35 item 6: the mark ran into a rank of one digit (`*1 fast_math`) but not into ranks of 10 and more."""
    lines = _ranked_result(3).table().splitlines()
    assert lines[2].startswith("    default ")
    assert [line[:4] for line in lines[3:8]] == ["* 1 ", "    ", "  2 ", "  3 ", "  4 "]  # the combination, its "vs"
    assert "interval: " in "\n".join(lines) and "simultaneous 95% over the 3 candidates (each at 98.33%)" in \
        "\n".join(lines)
