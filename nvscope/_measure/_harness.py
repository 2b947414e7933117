"""The tools' harness: the step called, outputs and gradients copied and compared, blocks of calls timed in
interleaved rounds (docs/search.md)."""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

from nvscope._core import OptionSet, _env, first_line, nv_options
from nvscope._exec import audit, compiling, ensure_adapters
from nvscope._measure import _checks
from nvscope._measure._numerics import Numerics, compare_leaves, flatten_outputs, grad_targets
from nvscope._measure._results import Compiles
from nvscope._measure._settings import TIMED, Measure, measure_of
from nvscope._measure._timer import Timer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from nvscope._exec import FusionRecord

__all__ = ["Runner", "Stage", "Variant", "begin", "compile_clock", "compiles_of", "install_adapters",
           "progress_printer", "seconds"]

Stage = Literal["default", "candidate", "combination"]


def progress_printer(tool: str, on: bool = True) -> Callable[[str], None]:
    """``say(message)``: ``nvscope <tool>: message`` on stderr while ``on``; a closed stderr ends it quietly."""
    printing = [on]

    def say(message: str) -> None:
        if printing[0]:
            try:
                print(f"nvscope {tool}: {message}", file=sys.stderr, flush=True)
            except (OSError, ValueError):  # stderr closed
                printing[0] = False

    return say


def begin(tool: Callable[..., Any], step: object, measure: object, kwargs: dict[str, Any], defaults: Measure,
          keywords: Mapping[str, str] | tuple[str, ...] = TIMED, *, least_rounds: bool = True,
          printer: str = "") -> tuple[Measure, Callable[[str], None]]:
    """The tools' preamble: the step checked, the `Measure` folded (`measure_of`), the other keywords checked as
    the step's, the rounds checked (``least_rounds``: enough for an interval); the measure and a progress printer."""
    name = tool.__name__
    checked = _checks.step_callable(name, step)
    measure = measure_of(name, measure, kwargs, defaults, keywords)
    _checks.step_keywords(tool, checked, kwargs, keywords)
    if least_rounds:
        _checks.rounds("rounds", measure.rounds)
    return measure, progress_printer(printer or name, measure.progress)


def seconds(value: float | None) -> str:
    """A duration for a progress line: seconds, or milliseconds below one."""
    return "-" if value is None else f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.1f} ms"


class Variant:
    """A variant being measured; a tool's row when done."""

    def __init__(self, label: str, options: OptionSet, stage: Stage) -> None:
        self.label, self.options, self.stage = label, options, stage
        self.scope: AbstractContextManager[Any] = nv_options(options.enable, options.disable) if options \
            else nullcontext()
        self.first_call_s: float | None = None
        self.times: list[float] = []  # ms per call, one per round
        self.default_times: list[float] = []  # the default's, in the same rounds
        self.base_times: list[float] = []  # the set a combination extends
        self.numerics: Numerics | None = None
        self.comparisons = 1
        self.error: str | None = None
        self.fusions = self.new_partitions = 0
        self.changed = 0  # first-call executions that ran options not their own
        self.compiles: Compiles | None = None


def compile_clock() -> float:
    """Seconds nvFuser has spent compiling new partitions in this process so far."""
    return compiling()[0]


def compiles_of(records: Iterable[FusionRecord], began: float) -> Compiles:
    """What a first call with audit ``records`` compiled since `compile_clock` read ``began`` (counted from
    the audit, so it holds with ``NVSCOPE_SHARE=0`` too)."""
    records = list(records)
    own_path = {r.fusion for r in records if r.route in ("default", "fallback")}
    compiled = sum(r.route == "new" and r.shared_from is None for r in records)
    return Compiles(len({r.fusion for r in records}), compiled, max(0.0, compile_clock() - began), len(own_path))


class Runner:
    """Calls the step, copies and compares its outputs, times blocks of calls."""

    def __init__(self, step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], measure: Measure,
                 say: Callable[[str], None], *, grads: bool = True) -> None:
        """``measure``: its fields set (the tool's defaults filled in); ``grads=False``: gradients untouched."""
        self.step, self.args, self.kwargs, self.backward, self.say = step, args, kwargs, measure.backward, say
        self.tolerance, self.steps, self.warmup = measure.tolerance, measure.steps or 1, measure.warmup or 0
        self.targets = grad_targets(args, kwargs, measure.module) if grads else []
        self.reference: list[tuple[str, Any]] = []
        self.timer = Timer()
        self.share = measure.share
        self.own: dict[str, OptionSet] = {}  # per fusion, the options the default's first call ran it with

    def sharing(self) -> AbstractContextManager[Any]:
        """``nv_options(share=...)`` around every call of the step (nothing asked under ``NVSCOPE_SHARE=0``)."""
        return nv_options(share=self.share if _env.flag("NVSCOPE_SHARE") else None)

    def changed(self, record: FusionRecord) -> bool:
        """Whether an execution ran options other than its fusion's own."""
        return record.own and self.own.get(record.fusion) != record.options

    def invoke(self) -> Any:
        for _, tensor in self.targets:
            tensor.grad = None  # each call's gradients are its own
        out = self.step(*self.args, **self.kwargs)
        if self.backward:
            torch = sys.modules.get("torch")
            if torch is None or not isinstance(out, torch.Tensor) or out.numel() != 1 or not out.requires_grad:
                raise TypeError(f"backward=True: the function must return a scalar loss tensor that requires grad, "
                                f"got {type(out).__name__}: search calls .backward() on it")
            out.backward()
        return out

    def snapshot(self, out: Any) -> list[tuple[str, Any]]:
        """Copies of every output and gradient leaf, taken now."""
        leaves = flatten_outputs(out, "out")
        leaves += [(name, t.grad.detach().clone()) for name, t in self.targets if t.grad is not None]
        return leaves

    def first_call(self, v: Variant) -> list[tuple[str, Any]]:
        """The first call (timed alone: it compiles), audited, its outputs copied; then the warm-up calls."""
        began = compile_clock()
        with v.scope:
            with audit() as log:
                if v.stage == "default":  # CUDA work queued by the caller is not ours
                    self.timer.detect()
                self.timer.sync()
                start = time.perf_counter()
                out = self.invoke()
                if v.stage == "default":  # CUDA events once anything (the default) used CUDA
                    self.timer.detect()
                self.timer.sync()
                v.first_call_s = time.perf_counter() - start
            v.compiles = compiles_of(log.records, began)
            leaves = self.snapshot(out)
            del out
            for _ in range(self.warmup):
                self.invoke()
            self.timer.sync()
        if v.stage == "default":
            self.own.update((r.fusion, r.options) for r in log.records)
        v.fusions = len(log.records)
        v.new_partitions = sum(r.route == "new" for r in log.records)
        v.changed = sum(map(self.changed, log.records))
        return leaves

    def block(self, v: Variant) -> float:
        """``steps`` calls of one variant in its scope; ms per call."""
        with v.scope:
            return self.timer.time(self.invoke, self.steps)

    def calibrate(self) -> tuple[float, float]:
        """Set ``steps`` from the default's calls; (ms per call, harness ms per call)."""
        self.steps, per_call = self.timer.calibrate(self.invoke, least=self.steps)
        step, backward = self.step, self.backward
        self.step, self.backward = (lambda *a, **k: None), False  # the harness around a no-op
        try:
            _, overhead = self.timer.calibrate(self.invoke)
        finally:
            self.step, self.backward = step, backward
        return per_call, overhead

    def prepare(self, v: Variant, index: str) -> None:
        """First call, numerics and warm-up of one candidate; a failure is recorded, never raised."""
        try:
            leaves = self.first_call(v)
        except Exception as error:
            v.error = first_line(error)
            self.say(f"{index} {v.label}: FAILED, skipped: {v.error}")
            return
        v.numerics = compare_leaves(self.reference, leaves, self.tolerance)
        n = v.numerics
        state = {"ok": "ok", "not compared": "not compared (no tensor, number or str in the outputs)"}.get(
            n.verdict, f"OVER TOLERANCE ({n.detail})")
        self.say(f"{index} {v.label}: first call {seconds(v.first_call_s)} ({v.compiles}), "
                 f"numerics {state}, max rel diff {n.max_rel_diff:.2g}" + (f", {n.nonfinite}" if n.nonfinite else ""))

    def rounds(self, variants: list[Variant], rounds: int, rng: random.Random) -> dict[int, list[float]]:
        """Interleaved rounds of ``variants``: per variant id, ms per call in each round. The first (the
        baseline) propagates its failure; another that raises is marked failed and dropped."""
        live = [v for v in variants if v.error is None]
        times: dict[int, list[float]] = {id(v): [] for v in live}
        self.say(f"timing {len(live)} variants x {rounds} rounds x {self.steps} calls")
        reported = time.monotonic()
        collecting = gc.isenabled()
        gc.collect()
        for r in range(rounds):
            order = live[:]
            rng.shuffle(order)
            # No collection inside a block (it would be charged to one variant); between rounds the young ones only.
            gc.collect(1)
            gc.disable()
            try:
                for v in order:
                    try:
                        times[id(v)].append(self.block(v))
                    except Exception as error:
                        if v is variants[0]:
                            raise
                        v.error = f"(while timed, round {r + 1}) {first_line(error)}"
                        live.remove(v)
                        del times[id(v)]
                        self.say(f"{v.label}: FAILED, skipped: {v.error}")
            finally:
                if collecting:
                    gc.enable()
            if time.monotonic() - reported > 10:
                reported = time.monotonic()
                self.say(f"  round {r + 1}/{rounds}")
        return times


def install_adapters() -> None:
    """Install the adapters of what is imported now: the default, in no scope, must run through the same
    executor as the candidates."""
    ensure_adapters(direct=True)  # a direct FusionDefinition program too, as the subprocess runner does
