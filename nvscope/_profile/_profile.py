"""Profile per fusion: what an option set does to each fusion of a step, against the defaults.

The first calls are audited (fusions, schedulers, outputs), each fusion's outputs are compared with only it under
the options, and its executions are timed in paired rounds, every verdict confirmed in fresh rounds
(docs/profile.md, "The method")."""

from __future__ import annotations

import random
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, NamedTuple

from nvscope._core import (
    FallbackWarning,
    NoEffectWarning,
    NoFusionWarning,
    NvscopeError,
    OptionSet,
    _state,
    cut,
    dev_mode,
    exact_glob,
    first_line,
    nv_options,
)
from nvscope._exec import audit, failure_note, private_failures
from nvscope._measure import (
    Compiles,
    Measure,
    Numerics,
    RatioSummary,
    Runner,
    Segment,
    SegmentRecorder,
    Timer,
    Variant,
    begin,
    compare_leaves,
    compile_clock,
    compiles_of,
    confirm,
    flagged,
    flatten_outputs,
    install_adapters,
    median,
    now,
    recorder,
    summarize,
)
from nvscope._profile._report import ProfileResult, ProfileRow
from nvscope._tools import no_fusion

__all__ = ["NO_FUSION", "PROFILES", "profile"]

# How many profiles are judged as one family: search_fusions sets it to its candidates' count around its profiles.
PROFILES: ContextVar[int] = ContextVar("nvscope_profiles", default=1)
_state.keep(__name__, "PROFILES", "per context: the block that sets it resets it")

NO_FUSION = ("{tool}: no nvFuser fusion ran through nvscope when the step ran with its defaults, so no option can "
             "reach one and there is nothing to measure per fusion: is the function jitted (thunder.jit) or built on "
             "nvFuser's FusionDefinition, and is the step run in this process?")


class _Clock:
    """The per-fusion timing hook (an entry of ``_events.TIMERS``) and what it collects, switched per pass."""

    def __init__(self, timer: Timer, rec: SegmentRecorder | None) -> None:
        self.timer, self.recorder = timer, rec  # the runner's timer: CUDA events once the default used CUDA
        self.times: dict[str, list[Any]] | None = None  # per fusion: the timer's pending intervals, while timing
        self.segments: dict[str, tuple[Segment, ...]] | None = None  # first execution's segments, while first calls
        self.wall: dict[str, float] | None = None  # ms per fusion (synchronised), while first calls
        self.outputs: dict[str, list[list[tuple[str, Any]]]] | None = None  # output copies per execution
        self.capture: str | None = None  # capture only this fusion's outputs (None: every fusion's)

    @contextmanager
    def __call__(self, record: Any) -> Iterator[Callable[[Any], None] | None]:
        fusion = record.fusion
        torch = sys.modules.get("torch")
        if torch is not None and not (self.timer.cuda or (self.wall is not None and torch.cuda.is_initialized())):
            torch = None  # CUDA events while timing a CUDA step; a synchronised wall clock in first calls that use it
        with ExitStack() as stack:
            segments = None
            if self.segments is not None and self.recorder is not None and fusion not in self.segments:
                segments = stack.enter_context(self.recorder.record())
            if self.wall is not None and torch is not None:
                torch.cuda.synchronize()
            mark = self.timer.mark() if self.times is not None else None
            began = now()
            pending: list[Any] = []  # copied once its segments and wall time are taken: the copies are not its own
            yield pending.append if self.outputs is not None and self.capture in (None, fusion) else None
            if self.times is not None:
                self.times.setdefault(fusion, []).append(self.timer.since(mark))
            if self.wall is not None:
                if torch is not None:
                    torch.cuda.synchronize()
                self.wall[fusion] = self.wall.get(fusion, 0.0) + (now() - began) * 1e3
        if segments is not None and self.segments is not None:
            self.segments[fusion] = tuple(segments) if segments else None  # type: ignore[assignment]
        if pending and self.outputs is not None:
            calls = self.outputs.setdefault(fusion, [])
            calls.append(flatten_outputs(pending[0], f"execution{len(calls)}.out"))

    def per_call(self, steps: int) -> dict[str, float]:
        """ms per step of each fusion in the block just timed (the device has been synchronised)."""
        times, self.times = self.times or {}, {}
        return {fusion: sum(map(Timer.ms, values)) / steps for fusion, values in times.items()}


def profile(step: Callable[..., Any], /, *args: Any, enable: Any = (), disable: Any = (), fusions: object = None,
            schedulers: str = "kernels", torch: bool = False, measure: Measure | None = None,
            **kwargs: Any) -> ProfileResult:
    """Profile ``step(*args, **kwargs)`` fusion by fusion under ``enable``/``disable`` against the defaults.

    ``fusions``: the fusions that get the options, as ``nv_options(fusions=...)``; the rows are theirs. ``schedulers``:
    ``"kernels"`` (from kernel names) or ``"nvfuser"`` (nvFuser's profiler, compile times too). ``torch``: each fusion's
    region in PyTorch too. ``measure`` and its keywords: as for `nvscope.search` (default: 20 rounds of at least one
    call, 2 warm-up calls). Runs in development mode; no scope or timing hook stays behind (docs/profile.md).
    """
    from nvscope._exec import listening

    m, say = begin(profile, step, measure, kwargs, Measure(rounds=20, steps=1, warmup=2))
    rounds, steps_per_round, tolerance = m.rounds or 0, m.steps or 1, m.tolerance
    recorder(schedulers)  # validates the choice before anything runs
    scope = nv_options(enable, disable, fusions=fusions, on_error="fallback")  # validated before anything runs
    options = scope.options
    if not isinstance(torch, bool):
        raise TypeError(f"profile: torch= takes True or False, not {cut(repr(torch), 40)}")
    if not options and not torch:
        raise ValueError("profile() needs the options to profile: enable=[...] and/or disable=[...], or torch=True "
                         "(each fusion in PyTorch)")
    began, compiled = time.perf_counter(), compile_clock()
    runner = Runner(step, args, kwargs, m, say)
    default, variant = Variant("default", OptionSet(), "default"), Variant("options", options, "candidate")
    variant.scope = scope
    eager = Variant("torch", OptionSet(), "candidate")  # the selected fusions' regions in PyTorch
    clock = _Clock(runner.timer, recorder(schedulers))  # no recorder on CPU or without nvFuser
    notes: list[str] = []
    variants, compared = [default], {}  # the variants timed; per compared one, the fusions whose ratio it gets
    under, step_numerics, broken, numerics = None, None, {}, {}
    torch_numerics: dict[str, Numerics] = {}
    torch_errors: dict[str, str] = {}
    torch_step_numerics = None
    # Timers run with a sink that keeps nothing: while one listens, every fusion execution runs inside them. Its
    # fallbacks are its own (private_failures): the user's later scopes try the options afresh, and warn.
    with listening(lambda record: None, clock), dev_mode(True), private_failures(), runner.sharing(), \
            warnings.catch_warnings():
        for quiet in (NoFusionWarning, NoEffectWarning, FallbackWarning):
            warnings.simplefilter("ignore", quiet)  # the rows say which fusions ran, changed and failed
        install_adapters()
        base = _first(runner, default, clock)
        _selected(base.infos, scope)
        runner.timer.detect()  # CUDA events (the clock's too) once the default used CUDA, as the search decides
        runner.reference = base.leaves
        chosen = [i for i in base.infos if scope.fusions is None or scope.fusions(i)]
        if options:
            under = _first(runner, variant, clock)
            step_numerics = compare_leaves(base.leaves, under.leaves, tolerance)
            broken = under.errors
            say(f"{len(base.infos)} fusions ran; {len(chosen)} selected; the options broke {len(broken)} of them; "
                f"first calls: defaults {base.compiles}; options {under.compiles}")
            working = [i for i in chosen if i.id not in broken]  # a broken one ran its defaults: nothing to compare
            numerics = _isolated(runner, clock, working, base.outputs, tolerance, say, under.counts,
                                 lambda f: nv_options(options, fusions=[f], on_error="fallback"))[0]
            if broken:  # time the options where they work: the broken ones run their defaults in both variants
                kept = [exact_glob(i.id) for i in chosen if i.id not in broken]
                variant.scope = nv_options(options, fusions=kept, on_error="fallback") if kept else \
                    nv_options(options, fusions=lambda info: False)
            variants.append(variant)
            compared["options"] = [i.id for i in working]
        if torch:  # fusion by fusion first: one without a PyTorch form (or failing there) is left in nvFuser
            torch_numerics, torch_errors = _isolated(runner, clock, chosen, base.outputs, tolerance, say, None,
                                                     lambda f: nv_options(fusions=[f], run="torch"))
            ok = [i.id for i in chosen if i.id not in torch_errors]
            say(f"{len(ok)} of {len(chosen)} selected fusions run in PyTorch")
            if ok:
                eager.scope = nv_options(fusions=[exact_glob(f) for f in ok], run="torch")
                torch_step_numerics = compare_leaves(base.leaves, _first(runner, eager, clock).leaves, tolerance)
                variants.append(eager)
                compared["torch"] = ok
        say(f"timing {' and '.join(v.label for v in variants)} x {rounds} rounds x {steps_per_round} calls, "
            "per fusion")
        rng = random.Random(m.seed)
        fusion_times, step_times = _rounds(runner, clock, variants, rounds, rng)
        ratios, steps = _verdicts(runner, clock, variants, rounds, rng, compared, (fusion_times, step_times), notes)
    rows = []
    for info in chosen:
        f = info.id
        d, o, e = (fusion_times.get(v, {}).get(f) for v in ("default", "options", "torch"))
        rows.append(ProfileRow(
            f, info.phase, tuple(info.ops or ()), base.counts.get(f, 0), median(d) if d else None,
            median(o) if o else None, ratios.get("options", {}).get(f),
            base.segments.get(f), None if under is None else under.segments.get(f), base.wall.get(f),
            None if under is None else under.wall.get(f), numerics.get(f), broken.get(f),
            under is None or under.counts.get(f, 0) > 0, base.repeat.get(f), torch_profiled=torch,
            torch_ms=median(e) if e else None, torch_ratio=ratios.get("torch", {}).get(f),
            torch_numerics=torch_numerics.get(f), torch_error=torch_errors.get(f), options_profiled=bool(options)))
    if default.numerics is not None and not default.numerics.ok:
        notes.append(f"the default is not repeatable ({default.numerics.detail}): output differences may be its own")
    if clock.recorder is None:
        notes.append("no schedulers: they need CUDA and nvFuser (`nvscope._measure._schedulers`)")
    result = ProfileResult(tuple(rows), options, runner.timer.name, rounds,
                           steps_per_round, runner.warmup, tolerance, m.seed, time.perf_counter() - began,
                           steps.get("options"),
                           step_numerics, None if clock.recorder is None else clock.recorder.source, tuple(notes),
                           compile_clock() - compiled, base.compiles, None if under is None else under.compiles,
                           torch=torch, torch_step=steps.get("torch"), torch_step_numerics=torch_step_numerics)
    say(f"done in {result.elapsed_s:.1f} s")
    return result


def _verdicts(runner: Runner, clock: _Clock, variants: list[Variant], rounds: int, rng: random.Random,
              compared: dict[str, list[str]],
              first: tuple[dict[str, dict[str, list[float]]], dict[str, list[float]]],
              notes: list[str]) -> tuple[dict[str, dict[str, RatioSummary]], dict[str, RatioSummary]]:
    """Per compared variant, each fusion's ratio to the default and the whole step's from the rounds ``first``;
    every verdict among them is confirmed in as many fresh rounds, run only when some ratio has a verdict."""
    fusion_times, step_times = first
    ratios: dict[str, dict[str, RatioSummary]] = {}
    steps: dict[str, RatioSummary] = {}
    for name, fusions in compared.items():
        paired = {f: _paired(fusion_times, f, rounds, name) for f in fusions}
        family = PROFILES.get() * max(1, sum(pair is not None for pair in paired.values()))  # judged together
        ratios[name] = {f: summarize(*pair, comparisons=family) for f, pair in paired.items() if pair is not None}
        steps[name] = summarize(step_times[name], step_times["default"], comparisons=PROFILES.get())
    again = [(name, f) for name, judged in ratios.items() for f, r in judged.items() if flagged(r)]
    whole = [name for name, step in steps.items() if flagged(step)]
    if not again and not whole:
        return ratios, steps
    k = len(again) + len(whole)  # the confirmations' family
    runner.say(f"confirming {k} verdict{'s' * (k != 1)} in {rounds} fresh rounds")
    fresh, fresh_step = _rounds(runner, clock, variants, rounds, rng)
    for name, f in again:
        pair = _paired(fresh, f, rounds, name)  # None: it did not run in every fresh round, so nothing confirms it
        ratios[name][f] = confirm(ratios[name][f], *pair, comparisons=k) if pair else replace(
            ratios[name][f], verdict="no difference detected", screened=ratios[name][f].comparisons)
    lost = [_named(name, f) for name, f in again if not flagged(ratios[name][f])]
    for name in whole:
        steps[name] = confirm(steps[name], fresh_step[name], fresh_step["default"], comparisons=k)
        lost += [] if flagged(steps[name]) else [_named(name, "the whole step")]
    notes.append(f"{k} verdict{'s' * (k != 1)} of the first {rounds} rounds timed again in {rounds} fresh rounds "
                 f"(simultaneous 95% over the {k}), where a verdict stands only if both agree: "
                 + (f"not confirmed, so no difference detected: {', '.join(lost)}" if lost else "all confirmed"))
    return ratios, steps


def _named(variant: str, what: str) -> str:
    return what if variant == "options" else f"{what} in PyTorch"


def _paired(fusion_times: dict[str, dict[str, list[float]]], fusion: str, rounds: int,
            variant: str = "options") -> tuple[list[float], list[float]] | None:
    """The fusion's (variant, default) ms per round, where both ran in every round: one ratio per round."""
    d, o = fusion_times["default"].get(fusion), fusion_times.get(variant, {}).get(fusion)
    timed = d is not None and o is not None and len(d) == len(o) == rounds and all(x > 0 for x in (*d, *o))
    return (o, d) if timed else None  # type: ignore[return-value]


def _selected(infos: list[Any], scope: nv_options) -> None:
    """``fusions=`` selects some of the fusions the default ran: else a `ValueError` naming the fix."""
    if scope.fusions is not None and not any(scope.fusions(i) for i in infos):
        ids = [i.id for i in infos]
        shown = ", ".join(ids[:8]) + (f", ... ({len(ids)} in all)" if len(ids) > 8 else "")
        raise ValueError(f"profile: fusions={scope.fusions!r} selects none of the fusions the step ran ({shown}): "
                         "select by these ids, e.g. 'forward/*' or '*/nvFusion0' (`nvscope fusions` lists them)")


class _FirstCall(NamedTuple):
    """What a variant's first call showed, per fusion id where it is a dict."""

    infos: list[Any]  # the fusions, in first-execution order
    segments: dict[str, tuple[Segment, ...]]  # nvFuser's segments of each fusion's first execution
    wall: dict[str, float]  # ms, compile included
    outputs: dict[str, list[list[tuple[str, Any]]]]  # output copies per execution (the default's only)
    leaves: list[tuple[str, Any]]  # the step's outputs and gradients
    counts: dict[str, int]  # executions (the options': those that ran in a partition of their own)
    errors: dict[str, str]  # fusions that failed under the options: the error's first line and nvscope's note
    repeat: dict[str, Numerics]  # the default's: each fusion's outputs in a second call against the first's
    compiles: Compiles  # what the first call compiled


def _first(runner: Runner, v: Variant, clock: _Clock) -> _FirstCall:
    """A variant's first call (audited, segments, wall times, outputs of the default's fusions), then its warm-up."""
    segments: dict[str, tuple[Segment, ...]] = {}
    wall: dict[str, float] = {}
    outputs: dict[str, list[list[tuple[str, Any]]]] = {}
    clock.segments, clock.wall = segments, wall
    clock.outputs, clock.capture = (outputs, None) if v.stage == "default" else (None, None)
    began = compile_clock()
    try:
        with audit() as log, v.scope:
            runner.timer.sync()
            out = runner.invoke()
            runner.timer.sync()
        compiled = compiles_of(log.records, began)
        leaves = runner.snapshot(out)
        del out
    finally:
        clock.segments = clock.wall = clock.outputs = None
    if v.stage == "default" and not log.records:  # nothing to profile: said before the step runs again
        raise ValueError(no_fusion(NO_FUSION.format(tool="profile")))
    repeat: dict[str, Numerics] = {}
    if v.stage == "default":  # once more: a fusion whose own defaults move between calls has no reference outputs
        again: dict[str, list[list[tuple[str, Any]]]] = {}
        clock.outputs = again
        try:
            v.numerics = compare_leaves(leaves, runner.snapshot(runner.invoke()), runner.tolerance)
        finally:
            clock.outputs = None
        repeat = {f: compare_leaves(_flat(calls), _flat(again.get(f, [])), runner.tolerance)
                  for f, calls in outputs.items()}
    with v.scope:
        for _ in range(runner.warmup):
            runner.invoke()
    runner.timer.sync()
    infos = log.fusions()
    if v.stage == "default":
        runner.own.update((r.fusion, r.options) for r in log.records)
        counts = {i.id: sum(r.fusion == i.id for r in log.records) for i in infos}
    else:  # executions that ran the options (a partition of their own), not their fusion's own options
        counts = {i.id: sum(r.fusion == i.id and runner.changed(r) for r in log.records) for i in infos}
    errors = {r.fusion: _error_line(r.error) for r in log.records if r.route == "fallback" and r.error}
    return _FirstCall(infos, segments, wall, outputs, leaves, counts, errors, repeat, compiled)


def _flat(calls: list[list[tuple[str, Any]]]) -> list[tuple[str, Any]]:
    return [leaf for execution in calls for leaf in execution]


def _error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    note = [line.strip() for line in (failure_note(text) or "").splitlines()]
    script = next((line for line in note if line.startswith("repro script:")), "")
    return "\n".join(x for x in (cut(first, 300), note[0] if note else "", script) if x)


def _isolated(runner: Runner, clock: _Clock, chosen: list[Any], reference: dict[str, list[list[tuple[str, Any]]]],
              tolerance: float | None, say: Callable[[str], None], reached: dict[str, int] | None,
              scope: Callable[[str], nv_options]) -> tuple[dict[str, Any], dict[str, str]]:
    """Per fusion: its outputs with only it under ``scope(its glob)`` against its outputs under the defaults, and
    the fusions for which that step failed, with why. ``reached``: executions the options reached per fusion (those
    with none are skipped); None: every fusion runs."""
    numerics, errors = {}, {}
    for info in chosen:
        if reached is not None and (not reached.get(info.id) or info.id not in reference):
            continue  # the options did not reach it (catalog gates), or it broke under them
        outputs: dict[str, list[list[tuple[str, Any]]]] = {}
        clock.outputs, clock.capture = outputs, info.id
        try:
            with scope(exact_glob(info.id)):
                runner.invoke()
        except Exception as error:
            if reached is None and isinstance(error, NvscopeError):  # run="torch" refused it: no PyTorch form
                errors[info.id] = f"no PyTorch form: {cut(str(error).split(' in PyTorch: ', 1)[-1], 200)}"
            else:
                say(f"{info.id}: the step failed with only this fusion changed: {first_line(error)}")
                errors[info.id] = f"failed: {first_line(error)}"
            continue
        finally:
            clock.outputs = clock.capture = None
        if info.id in reference:
            numerics[info.id] = compare_leaves(_flat(reference[info.id]), _flat(outputs.get(info.id, [])), tolerance)
    return numerics, errors


def _rounds(runner: Runner, clock: _Clock, variants: list[Variant], rounds: int,
            rng: random.Random) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[float]]]:
    """``rounds`` rounds of every variant in a random order: per variant, each fusion's ms per step and the step's."""
    fusion_times: dict[str, dict[str, list[float]]] = {v.label: {} for v in variants}
    step_times: dict[str, list[float]] = {v.label: [] for v in variants}
    for _ in range(rounds):
        order = [(v.label, v) for v in variants]
        rng.shuffle(order)
        for name, v in order:
            clock.times = {}
            try:
                step_times[name].append(runner.block(v))
                for fusion, ms in clock.per_call(runner.steps).items():
                    fusion_times[name].setdefault(fusion, []).append(ms)
            finally:
                clock.times = None
    return fusion_times, step_times
