"""nvscope.profile against the Thunder double: per-fusion times through the timing hook, per-fusion outputs, a
fusion that fails under the options as a row, the schedulers plumbing (a fake nvFuser profiler), report and JSON.

The fake nvFuser's ``execute`` is wrapped so that each fusion's speed and output depend on the options it runs
with: fusion k holds the op ``tag<k>``, and `Behaviour` says what each tag does under which option."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import thunder_double
from noisy_double import StepClock
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
from nvscope import OptionSet
from nvscope._measure._schedulers import SegmentRecorder
from nvscope._profile._profile import profile
from nvscope._profile._report import ProfileResult

QUICK = {"rounds": 6, "steps_per_round": 1, "warmup": 1, "progress": False}
# For verdicts: the fusions' intervals are simultaneous (four fusions timed: each at 98.75 %, which needs 8 rounds),
# and a few rounds disturbed by a busy machine must not move a x0.5 fusion's interval across 1.0.
TIMED = {**QUICK, "rounds": 12}


class Model:
    """Four fusions in a row; tag k's execute takes ``sleep[k]`` seconds, times ``factor[k]`` under ``option[k]``,
    and multiplies its output by ``scale[k]`` under that option (and by ``1 + drift[k] * calls`` always). It does not
    sleep: it advances the tools' clock (tests/noisy_double.py `StepClock`) by that much, so that a loaded machine
    cannot decide a verdict."""

    def __init__(self, double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, behaviour: dict[int, dict[str, Any]],
                 breaks: dict[int, str] | None = None, n: int = 4, eager: dict[int, str] | None = None) -> None:
        fe = double.fe
        original = fe.FusionDefinition.execute

        calls: dict[int, int] = {}
        clock = StepClock(monkeypatch)

        def execute(fd: Any, inputs: Any, **kwargs: Any) -> Any:
            enabled = set(kwargs.get("_enable_options") or ())
            tag = next(int(c[0][len("ops.tag"):]) for c in fd.calls if c[0].startswith("ops.tag"))
            b = behaviour.get(tag, {})
            on = b.get("option") in enabled
            clock.advance(b.get("sleep", 0.001) * (b.get("factor", 1.0) if on else 1.0))
            outputs = original(fd, inputs, **kwargs)
            calls[tag] = calls.get(tag, 0) + 1
            if b.get("drift"):  # moves on every call, options or not (an output it leaves unwritten, say)
                outputs = [o * (1 + b["drift"] * calls[tag]) for o in outputs]
            return [o * b.get("scale", 1.0) for o in outputs] if on else outputs

        monkeypatch.setattr(fe.FusionDefinition, "execute", execute)
        regions: list[Any] = []

        class TimedRegion(thunder_double.RegionSymbol):
            """Fusion k's region in PyTorch takes ``behaviour[k]["torch"]`` seconds (1 ms if not said)."""

            def __init__(self, kind: str, name: str | None = None) -> None:
                super().__init__(kind, name)
                self.tag = len(regions)  # the wrappers are made in order, one input (one region symbol) each
                regions.append(self)

            def __call__(self, x: Any) -> Any:
                clock.advance(behaviour.get(self.tag, {}).get("torch", 0.001))
                return super().__call__(x)

        monkeypatch.setattr(thunder_double, "RegionSymbol", TimedRegion)
        breaks, eager = breaks or {}, eager or {}
        self.wrappers = [double.make_wrapper(f"nvFusion{k}", ops=("linear", f"tag{k}"), breaks_with=breaks.get(k),
                                             eager=eager.get(k, "double")) for k in range(n)]

    def __call__(self, x: float) -> float:
        for wrapper in self.wrappers:
            (x,) = wrapper(x)
        return x


def test_rows_per_fusion_with_ratios_outputs_and_a_failure(double: ThunderDouble,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    behaviour = {0: {"option": "fast_math", "sleep": 0.004, "factor": 0.5},  # twice as fast
                 1: {"option": "fast_math", "sleep": 0.002, "factor": 2.0},  # twice as slow
                 2: {"option": "fast_math", "scale": 1.01}}  # its outputs move by 1 %
    model = Model(double, monkeypatch, behaviour, breaks={3: "fast_math"}, n=5)
    filters = list(warnings.filters)
    result = profile(model, 1.0, enable=["fast_math"], **TIMED)
    assert [r.fusion for r in result.rows] == [f"forward/nvFusion{k}" for k in range(5)]
    fast, slow, moved, broken = (result[f"forward/nvFusion{k}"] for k in range(4))
    assert fast.ratio is not None and fast.ratio.verdict == "faster" and fast.ratio.median == pytest.approx(0.5, 0.2)
    assert slow.ratio is not None and slow.ratio.verdict == "slower" and slow.ratio.median == pytest.approx(2, 0.2)
    assert fast.interval == (fast.ratio.low, fast.ratio.high) and fast.ratio.rounds == 12
    assert fast.ratio.screened == 4  # the four fusions timed (the broken one is not): one family; then confirmed
    assert slow.ratio.screened == 4 and fast.ratio.comparisons == slow.ratio.comparisons >= 2
    assert fast.default_ms == pytest.approx(4, rel=0.5) and fast.options_ms == pytest.approx(2, rel=0.5)
    # Outputs fusion by fusion: only fusion 2 differs, and only by its own 1 % (its input is the default's).
    assert fast.numerics is not None and fast.numerics.ok and fast.numerics.max_rel_diff == 0
    assert moved.numerics is not None and not moved.numerics.ok
    assert moved.numerics.max_rel_diff == pytest.approx(0.01) and moved.status == "outputs differ"
    downstream = result["forward/nvFusion4"]  # its input moved under the options, but not when it alone has them
    assert downstream.numerics is not None and downstream.numerics.ok, downstream.numerics
    # The failing fusion is a row that says so; the profile went on (the step completed in every round).
    assert broken.status == "failed" and broken.error is not None and "INTERNAL ASSERT" in broken.error
    assert "nvscope:" in broken.error and broken.ratio is None
    assert result.step is not None and result.step.rounds == 12 and (result.step.screened or
                                                                     result.step.comparisons) == 1
    assert result.step_numerics is not None and not result.step_numerics.ok  # fusion 2 moved the output
    # Ranked by the time the options save: the fast fusion first, the slow one after, the failure last.
    assert result.ranked()[0].fusion == "forward/nvFusion0"
    assert result.ranked()[-1].fusion == "forward/nvFusion3"  # the failure last
    assert result.schedulers_from is None and fast.schedulers == {"default": None, "options": None}
    # Nothing left behind.
    assert nvscope.current_options() == OptionSet() and list(warnings.filters) == filters
    from nvscope._exec import _events

    assert _events.TIMERS == []


def test_the_table_json_round_trip_and_chart(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Any) -> None:
    model = Model(double, monkeypatch, {0: {"option": "fast_math", "sleep": 0.002, "factor": 0.5}},
                  breaks={2: "fast_math"})
    result = profile(model, 1.0, enable=["fast_math"], **QUICK)
    table = result.table()
    assert table.splitlines()[0] == "nvscope profile: fast_math against the defaults, per fusion (ms per step)"
    assert " 1 forward/nvFusion0" in table and "FAILED under the options" in table
    assert "whole step: ratio" in table
    again = ProfileResult.from_json(result.to_json())
    assert again == result
    assert json.loads(result.to_json())["rows"][0]["schedulers"] == {"default": None, "options": None}
    pytest.importorskip("matplotlib")
    path = result.plot(str(tmp_path / "profile.png"))
    assert (tmp_path / "profile.png").stat().st_size > 1000 and path.endswith("profile.png")


@pytest.mark.parametrize(("n", "said"), [(1, "95% (one fusion ratio); "),
                                         (2, "simultaneous 95% over the 2 fusion ratios judged together (each at "
                                             "97.5%)")])
def test_the_interval_note_counts_the_fusions(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch, n: int,
                                              said: str) -> None:
    """Issue 35 item 6: one fusion read "over the 1 fusion ratios"."""
    result = profile(Model(double, monkeypatch, {}, n=n), 1.0, enable=["fast_math"], **QUICK)
    table = result.table()
    assert said in table and "over the 1 fusion" not in table


def test_only_the_selected_fusions_get_the_options_and_rows(double: ThunderDouble,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(double, monkeypatch, {})
    result = profile(model, 1.0, enable=["fast_math"], fusions=["forward/nvFusion1", "*/nvFusion3"], **QUICK)
    assert [r.fusion for r in result.rows] == ["forward/nvFusion1", "forward/nvFusion3"]
    enabled = {tuple(ex.enable or ()) for ex in double.executions}
    assert enabled == {(), ("fast_math",)}


def test_fusions_the_options_cannot_change_are_marked_not_reached(double: ThunderDouble,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(double, monkeypatch, {})
    model.wrappers.append(double.make_wrapper("nvFusion9", ops=("add", "tag9")))  # no matmul: fuse_matmul can't
    result = profile(model, 1.0, enable=["fuse_matmul"], disable=["matmul_expr_eval"], **QUICK)
    assert result["forward/nvFusion9"].reached is False and result["forward/nvFusion9"].status == "not reached"
    assert result["forward/nvFusion0"].reached is True
    assert result.ranked()[-1].fusion == "forward/nvFusion9"


def test_a_fusion_whose_defaults_move_between_calls_is_no_reference(double: ThunderDouble,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(double, monkeypatch, {3: {"option": "fast_math", "drift": 0.5}})  # the last fusion drifts
    result = profile(model, 1.0, enable=["fast_math"], **QUICK)
    drifting = result["forward/nvFusion3"]
    assert drifting.status == "default not repeatable", drifting
    assert drifting.default_repeat is not None and not drifting.default_repeat.ok
    assert all(result[f"forward/nvFusion{k}"].default_repeat.ok for k in range(3))  # type: ignore[union-attr]
    assert all(result[f"forward/nvFusion{k}"].status != "default not repeatable" for k in range(3))
    table = result.table()
    assert "DEFAULT NOT REPEATABLE" in table and "default not repeatable: the fusion's outputs moved" in table
    assert "not reached:" not in table  # that legend only where a row is not reached
    assert ProfileResult.from_json(result.to_json()) == result


def test_output_copies_are_not_counted_as_the_fusions_own_work(double: ThunderDouble,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile copies each fusion's outputs to compare them; those copies must not show up among the fusion's
    segments (they did: kernel names read 'Memcpy DtoD' after each nanoGPT fusion on the H200) or in its time."""
    torch = pytest.importorskip("torch")
    from contextlib import contextmanager

    import nvscope._profile._profile
    from nvscope._measure._schedulers import Segment

    class OpsRecorder(SegmentRecorder):
        """Segments from the CPU ops torch.profiler sees inside the execution: ``aten::mul`` is the fusion's own."""

        @contextmanager
        def _kernel_names(self) -> Iterator[list[Segment]]:
            segments: list[Segment] = []
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                yield segments
            segments += [Segment(i, e.name, e.name) for i, e in enumerate(prof.events()) if e.name.startswith("aten::")]

    monkeypatch.setattr(nvscope._profile._profile, "recorder", lambda source="kernels": OpsRecorder("CPU ops"))
    model = Model(double, monkeypatch, {})
    result = profile(model, torch.ones(8), enable=["fast_math"], **QUICK)
    for row in result.rows:
        seen = {s.scheduler for s in row.default_segments or ()}
        assert "aten::mul" in seen and "aten::clone" not in seen, (row.fusion, seen)
    assert all(r.numerics is not None and r.numerics.ok for r in result.rows)  # the copies were still taken


def test_a_fusion_the_options_broke_gets_no_outputs_verdict(double: ThunderDouble,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the options a broken fusion ran its defaults (fallback): comparing those with its defaults says
    nothing about the options, so its row has no numerics (it had "match", and the step ran once more for it)."""
    model = Model(double, monkeypatch, {}, breaks={1: "fast_math"})
    result = profile(model, 1.0, enable=["fast_math"], **QUICK)
    broken = result["forward/nvFusion1"]
    assert broken.status == "failed" and broken.numerics is None, broken.numerics
    assert all(result[f"forward/nvFusion{k}"].numerics is not None for k in (0, 2, 3))


def test_fusions_without_a_ratio_rank_after_the_timed_ones(double: ThunderDouble,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A fusion missing from some rounds has medians but no paired ratio ("not timed"): the difference of its
    medians is no ranking (it came first here, ahead of the fusion the options really made faster)."""
    model = Model(double, monkeypatch, {0: {"option": "fast_math", "sleep": 0.004, "factor": 0.5},
                                        9: {"option": "fast_math", "sleep": 0.02, "factor": 0.1}})
    sometimes = double.make_wrapper("nvFusion9", ops=("linear", "tag9"))
    calls = [0]

    def step(x: float) -> float:
        calls[0] += 1
        x = model(x)
        if calls[0] <= 10 or calls[0] % 2:  # every call until the rounds (call 11 on), then every other one
            (x,) = sometimes(x)
        return x

    result = profile(step, 1.0, enable=["fast_math"], **QUICK)
    untimed = result["forward/nvFusion9"]
    assert untimed.ratio is None and untimed.default_ms is not None and untimed.options_ms is not None  # the case
    assert untimed.status == "not timed"
    ranked = [r.fusion for r in result.ranked()]
    assert ranked[0] == "forward/nvFusion0" and ranked[-1] == "forward/nvFusion9", ranked


def test_the_default_not_repeatable_legend_goes_with_its_cells(double: ThunderDouble,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(double, monkeypatch, {9: {"drift": 0.5}})
    model.wrappers.append(double.make_wrapper("nvFusion9", ops=("add", "tag9")))  # not reached, and drifting
    result = profile(model, 1.0, enable=["fuse_matmul"], **QUICK)
    assert result["forward/nvFusion9"].status == "not reached"
    table = result.table()
    assert "DEFAULT NOT REPEATABLE" in table
    assert "default not repeatable: the fusion's outputs moved" in table  # the cell is explained


def test_the_chart_shows_ratios_beyond_its_range_at_its_edge(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's axis stops at 0.1 and 10: a fusion 30 times slower (or faster) under the options must still show,
    at the edge, not vanish from the chart."""
    figure = pytest.importorskip("matplotlib.figure")
    from nvscope._measure._stats import RatioSummary
    from nvscope._profile._report import ProfileRow

    saved: list[Any] = []
    monkeypatch.setattr(figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    rows = (ProfileRow("forward/nvFusion0", "forward", (), 1, 1.0, 30.0, RatioSummary(30.0, 20.0, 40.0, "slower", 6)),
            ProfileRow("forward/nvFusion1", "forward", (), 1, 1.0, 0.01,
                       RatioSummary(0.01, 0.005, 0.02, "faster", 6)),
            ProfileRow("forward/nvFusion2", "forward", (), 1, 1.0, 0.9, RatioSummary(0.9, 0.8, 1.0, "faster", 6)))
    result = ProfileResult(rows, OptionSet(["fast_math"]), "time.perf_counter", 6, 1, 1, None, 0, 1.0)
    result.plot(str(tmp_path / "p.png"))
    ax = saved[0].axes[0]
    left, right = ax.get_xlim()
    shown = {round(float(line.get_ydata()[0])) for line in ax.lines
             if len(line.get_xdata()) == 1 and left <= float(line.get_xdata()[0]) <= right}
    assert shown == {0, 1, 2}, (shown, (left, right))  # every row has its marker inside the axis
    # ... and not under the legend: the bottom row is the last ranked, the fusion the options slow down most.
    saved[0].draw_without_rendering()
    box = ax.get_legend().get_window_extent()
    under = [line.get_ydata()[0] for line in ax.lines if len(line.get_xdata()) == 1
             and box.contains(*ax.transData.transform((line.get_xdata()[0], line.get_ydata()[0])))]
    assert under == [], under


class FakeKernel:
    def __init__(self, segment: int, scheduler: str, compile_ms: float) -> None:
        self.segment_id, self.scheduler, self.name = segment, scheduler, f"nvfuser_{scheduler}_f0_c1_r0_g{segment}"
        self.compile_time_ms, self.time_ms = compile_ms, 0.5


def fake_profiler(double: ThunderDouble) -> type:
    """nvFuser's PythonProfiler, as far as nvscope reads it: the segments of the execution inside it (a matmul
    segment under fuse_matmul, else an expr_eval one, then a pointwise one), compile time on the first execution."""
    compiled: set[int] = set()

    class PythonProfiler:
        def __enter__(self) -> PythonProfiler:
            self.before = len(double.executions)
            return self

        def __exit__(self, *exc: Any) -> None:
            ex = double.executions[-1]
            first = id(ex.fd) not in compiled
            compiled.add(id(ex.fd))
            kind = "matmul" if "fuse_matmul" in (ex.enable or ()) else "expr_eval"
            self.profile = type("FusionProfile", (), {"kernel_profiles": [
                FakeKernel(0, kind, 120.0 if first else 0.0), FakeKernel(1, "pointwise", 30.0 if first else 0.0)]})

    return PythonProfiler


def test_schedulers_and_compile_time_per_variant(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    import nvscope._profile._profile

    model = Model(double, monkeypatch, {})
    monkeypatch.setattr(nvscope._profile._profile, "recorder",
                        lambda source="kernels": SegmentRecorder("nvFuser's PythonProfiler", fake_profiler(double)))
    result = profile(model, 1.0, enable=["fuse_matmul"], disable=["matmul_expr_eval"], **QUICK)
    row = result["forward/nvFusion2"]
    assert row.schedulers == {"default": ("expr_eval", "pointwise"), "options": ("matmul", "pointwise")}
    assert row.compile_ms == {"default": 150.0, "options": 150.0}  # both first calls compiled
    assert result.schedulers_from == "nvFuser's PythonProfiler"
    assert "expr_eval+pointwise -> matmul+pointwise" in result.table()
    assert ProfileResult.from_json(result.to_json()) == result


def test_bad_input_fails_before_anything_runs(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def step() -> None:
        calls.append(1)

    with pytest.raises(nvscope.UnknownOptionError):
        profile(step, enable=["fast_maht"])
    with pytest.raises(ValueError, match="needs the options"):
        profile(step)
    with pytest.raises(ValueError, match="rounds must be"):
        profile(step, enable=["fast_math"], rounds=2)
    with pytest.raises(TypeError, match="fusions="):
        profile(step, enable=["fast_math"], fusions=3)
    assert calls == []


def test_scheduler_names_from_kernel_names() -> None:
    from nvscope._measure._schedulers import scheduler_of_kernel

    assert scheduler_of_kernel("nvf::nvfuser_pointwise_f0_c1_r0_g1") == "pointwise"
    assert scheduler_of_kernel("nvf::nvfuser_inner_persistent_f2_c1_r0_g0") == "inner_persistent"
    assert scheduler_of_kernel("nvf::nvfuser_12") == "unknown"  # static_fusion_count: numbered, no scheduler
    assert scheduler_of_kernel("nvjet_tst_128x256_64x4") == "expr_eval"  # cuBLAS: a segment nvFuser gave to ATen


def test_no_recorder_without_cuda_and_a_stale_profile_is_not_reused() -> None:
    from nvscope._measure._schedulers import recorder

    assert recorder() is None and recorder("nvfuser") is None  # this machine: no CUDA
    with pytest.raises(ValueError, match="schedulers= takes 'kernels' or 'nvfuser'"):
        recorder("cupti")
    profiles = iter([7, 7, 8])

    class Profiler:
        def __enter__(self) -> None:
            pass

        def __exit__(self, *exc: Any) -> None:
            fusion_id = next(profiles)
            self.profile = type("P", (), {"fusion_id": fusion_id,
                                          "kernel_profiles": [FakeKernel(0, f"s{fusion_id}", 1.0)]})

    rec = SegmentRecorder("nvFuser's PythonProfiler", Profiler)
    seen = []
    for _ in range(3):
        with rec.record() as segments:
            pass
        seen.append([s.scheduler for s in segments])
    # The second execution left nvFuser's last profile as it was (same fusion_id): no segments rather than wrong ones.
    assert seen == [["s7"], [], ["s8"]]


def test_a_direct_fusion_definition_program_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Thunder: nvFuser's FusionDefinition used directly; the profile installs the direct adapter itself."""
    pytest.importorskip("torch")  # the direct adapter rebuilds definitions from Python that imports torch
    from thunder_double import load_frontend

    reset_nvscope()
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    try:
        fds = []
        for op in ("linear", "matmul"):  # two definitions: equal ones would be one fusion (docs/fusions.md)
            with fe.FusionDefinition() as fd:
                fd.define_tensor(shape=[1], dtype=fe.DataType.Float)
                getattr(fd.ops, op)(0)
            fds.append(fd)

        def step(x: float) -> float:
            for fd in fds:
                (x,) = fd.execute([x])
            return x

        result = profile(step, 1.0, enable=["fast_math"], **QUICK)
        assert [r.calls for r in result.rows] == [1, 1] and len({r.fusion for r in result.rows}) == 2
        assert all(r.fusion.startswith("call/FusionDefinition@") and r.ratio is not None for r in result.rows)
    finally:
        reset_nvscope()


def test_a_failure_the_profile_met_is_not_kept_for_the_users_own_scopes(double: ThunderDouble,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 35 item 5: the profile's fallback is its own; the user's scope afterwards tries the options and warns.
    from nvscope import FallbackWarning

    model = Model(double, monkeypatch, {}, breaks={1: "fast_math"})
    assert profile(model, 1.0, enable=["fast_math"], **QUICK)["forward/nvFusion1"].status == "failed"
    for first in (True, False):  # warned in the first scope; the second records the failure, as any scope does
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with nvscope.nv_options(enable=["fast_math"], on_error="fallback"):
                assert model(1.0) == 16.0
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert len(fallbacks) == first and all("forward/nvFusion1" in m for m in fallbacks)


# --- many fusions: the family-wise rate ---------------------------------------------------------------------------

@pytest.mark.parametrize("fusions", [1, 4, 16])
def test_verdicts_over_identical_noisy_fusions_are_rarely_wrong_anywhere(monkeypatch: pytest.MonkeyPatch,
                                                                         fusions: int) -> None:
    """Fusions whose speed no option changes, each execution a random 1 ms (tests/noisy_double.py), the profile at
    its default rounds: with one 95 % interval per fusion, about half the profiles of 16 would call some fusion
    "faster" or "slower" (25 of 50 seeds did); as one family (Bonferroni) about 5 % of profiles did, at the bound
    (12 of 200 seeds with 4 fusions). Each verdict is now confirmed in fresh rounds, so a wrong one needs two chance
    misses: about 5 % x 5 %. At most 10 of 200 seeds: P(X > 10) = 0.014 even at the full 5 %; none of 200 was seen
    for 1, 4 or 16 fusions (the fresh rounds ran in 10, 11 and 19 of them)."""
    from noisy_double import NoisyFusions

    double = NoisyFusions(monkeypatch, fusions=fusions)
    wrong, confirmations = [], 0
    try:
        for seed in range(200):
            double.reseed(seed)
            result = profile(double.step, enable=["fast_math"], seed=seed, progress=False)
            if seed == 0:
                assert result.rounds == 20 and len(result.rows) == fusions
                assert {r.ratio.screened or r.ratio.comparisons for r in result.rows if r.ratio} == {fusions}
            verdicts = [r.status for r in result.rows if r.status in ("faster", "slower")]
            if verdicts:
                wrong.append((seed, verdicts))
            confirmations += any("fresh rounds" in note for note in result.notes)
    finally:
        double.close()
    assert len(wrong) <= 10, wrong
    assert confirmations <= 30, confirmations  # the fresh rounds ran only where the first flagged something


def test_a_fusion_really_faster_keeps_its_verdict_through_the_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: a fusion the options make x0.5 is "faster" (confirmed) in the same noise, at the default
    rounds, among 16 fusions judged together."""
    from noisy_double import NoisyFusions

    double = NoisyFusions(monkeypatch, fusions=16, factors={"fast_math": 0.5})
    try:
        for seed in range(10):
            double.reseed(seed)
            result = profile(double.step, enable=["fast_math"], seed=seed, progress=False)
            assert [r.status for r in result.rows] == ["faster"] * 16, result.table()
            assert all(r.ratio is not None and r.ratio.screened == 16 and r.ratio.comparisons == 17
                       for r in result.rows)  # confirmed together with the whole step's verdict
            assert result.step is not None and result.step.verdict == "faster"
            assert any("fresh rounds" in note and "all confirmed" in note for note in result.notes)
            assert "each verdict timed again in fresh rounds" in result.table()
    finally:
        double.close()


def test_a_verdict_the_fresh_rounds_do_not_repeat_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gain that lasts only as long as the first rounds (a machine that changed under the profile, say): flagged
    there, not confirmed in the fresh rounds, so the row says "no difference detected" with the fresh rounds' ratio,
    and a note names it."""
    from noisy_double import NoisyFusions

    double = NoisyFusions(monkeypatch, fusions=1)
    calls = [0]
    step = double.step

    def counted() -> float:
        calls[0] += 1
        if calls[0] > screening:
            double.factors.clear()
        return step()

    try:
        screening = 10**9  # first: how many calls a profile makes when nothing is flagged (no fast_math factor)
        double.reseed(1)
        profile(counted, enable=["fast_math"], seed=1, progress=False)
        screening, calls[0] = calls[0], 0
        double.factors["fast_math"] = 0.5  # x0.5 up to the end of the first rounds, x1 in the fresh ones
        result = profile(counted, enable=["fast_math"], seed=1, progress=False)
    finally:
        double.close()
    [row] = result.rows
    assert row.status == "no difference detected" and row.ratio is not None
    assert row.ratio.screened == 1 and row.ratio.comparisons == 2 and row.ratio.low <= 1 <= row.ratio.high
    assert result.step is not None and result.step.verdict == "no difference detected"
    [note] = [n for n in result.notes if "fresh rounds" in n]
    assert f"not confirmed, so no difference detected: {row.fusion}, the whole step" in note
    data = json.loads(result.to_json())
    assert data["rows"][0]["ratio"]["screened"] == 1 and ProfileResult.from_json(result.to_json()) == result


# --- torch=True: each fusion's region in PyTorch beside nvFuser's defaults ------------------------------------------

def test_the_pytorch_column_ratios_outputs_and_a_fusion_without_a_pytorch_form(double: ThunderDouble,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    behaviour = {0: {"sleep": 0.004, "torch": 0.002},  # nvFuser loses to eager here: PyTorch x0.5
                 1: {"sleep": 0.002, "torch": 0.004},  # PyTorch x2
                 2: {"option": "fast_math", "sleep": 0.004, "factor": 0.5}}  # the options' own column still works
    model = Model(double, monkeypatch, behaviour, n=5, eager={3: "wrong", 4: "unsupported"})
    result = profile(model, 1.0, enable=["fast_math"], torch=True, **TIMED)
    eager_wins, nvfuser_wins, options, wrong, formless = (result[f"forward/nvFusion{k}"] for k in range(5))
    assert eager_wins.torch_ratio is not None and eager_wins.torch_status == "faster"
    assert eager_wins.torch_ratio.median == pytest.approx(0.5, 0.2) and eager_wins.torch_ms == pytest.approx(2, 0.5)
    assert nvfuser_wins.torch_status == "slower" and nvfuser_wins.torch_ratio.median == pytest.approx(2, 0.2)
    assert eager_wins.torch_interval == (eager_wins.torch_ratio.low, eager_wins.torch_ratio.high)
    assert eager_wins.torch_ratio.screened == 4  # the four fusions that ran in PyTorch: one family of their own
    assert options.status == "faster" and options.torch_numerics is not None and options.torch_numerics.ok
    # eager="wrong": its region computes 3x where nvFuser computes 2x, so its outputs differ; nvFuser's do not.
    assert wrong.torch_status == "outputs differ" and wrong.torch_numerics is not None
    assert wrong.torch_numerics.max_rel_diff == pytest.approx(0.5) and wrong.status != "outputs differ"
    # A region Thunder's PyTorch executor cannot run: the row says so, the profile went on.
    assert formless.torch_status == "no PyTorch form" and formless.torch_ratio is None
    assert formless.torch_error is not None and "cannot run its region" in formless.torch_error
    assert formless.ratio is not None  # still timed under the options
    assert result.torch_step is not None and result.torch_step_numerics is not None
    assert not result.torch_step_numerics.ok  # the "wrong" region moved the step's output
    table = result.table()
    assert table.splitlines()[0] == ("nvscope profile: fast_math and PyTorch against the defaults, per fusion (ms per "
                                     "step)")
    assert " torch  ratio " in table.splitlines()[1] and "NO PYTORCH FORM" in table and "torch: DIFFER" in table
    assert "whole step in PyTorch: ratio" in table
    data = json.loads(result.to_json())
    assert data["rows"][4]["torch_status"] == "no PyTorch form" and data["rows"][0]["torch_ratio"]["median"] < 1
    assert ProfileResult.from_json(result.to_json()) == result


def test_pytorch_alone_against_the_defaults(double: ThunderDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(double, monkeypatch, {2: {"sleep": 0.004, "torch": 0.001}}, n=3)
    result = profile(model, 1.0, torch=True, **TIMED)
    assert {tuple(ex.enable or ()) for ex in double.executions} == {()}  # no options anywhere
    assert result.ranked()[0].fusion == "forward/nvFusion2"  # where nvFuser loses most, first
    row = result["forward/nvFusion2"]
    assert row.status == "no options" and row.ratio is None and row.torch_status == "faster"
    assert result.step is None and result.torch_step is not None and result.options_compiles is None
    table = result.table()
    assert table.splitlines()[0] == "nvscope profile: PyTorch against nvFuser's defaults, per fusion (ms per step)"
    assert "options" not in table.splitlines()[1] and "ratio torch/default per round" in table
    assert ProfileResult.from_json(result.to_json()) == result


def test_torch_is_checked_before_anything_runs() -> None:
    calls = []

    def step() -> None:
        calls.append(1)

    with pytest.raises(TypeError, match="torch= takes True or False"):
        profile(step, torch="yes")
    with pytest.raises(ValueError, match="or torch=True"):
        profile(step)
    assert calls == []
