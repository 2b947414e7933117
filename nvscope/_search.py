"""Option search: which nvFuser options make this function faster, with its numerics checked.

    result = nvscope.search(step, candidates=["fast_math", "fuse_matmul,-matmul_expr_eval"])
    print(result.table())            # ranked, with 95% intervals; ends with the nv_options(...) line to paste

Scoped options are what makes this possible in one process: every option set gets its own compiled kernels, so
the default and all candidates can be timed side by side, interleaved. The method (docs/search.md):

1. Every variant (the default, each candidate alone) is called once, timed on its own as its *first call* (nvFuser
   compiles there), its outputs and gradients copied and compared with the default's, then warmed up.
2. Rounds: in each, every variant runs ``steps_per_round`` calls back to back, the variants in a random order;
   the per-round ratio variant/default cancels what the machine does to the whole round (`nvscope._stats`).
3. The winners (faster, numerics within tolerance) are combined greedily, best first: a winner joins the set if
   the union is faster than the set without it, measured in the same rounds.

Candidates are measured in batches no larger than nvscope's per-fusion partition bound (NVSCOPE_MAX_PARTITIONS),
so that no variant's kernels are evicted and recompiled in the middle of the rounds.
"""

from __future__ import annotations

import gc
import math
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import nvscope
from nvscope import OptionSet, nv_options
from nvscope._candidates import label, resolve
from nvscope._numerics import Numerics, compare_leaves, flatten_outputs, grad_targets
from nvscope._search_report import SearchResult, SearchRow, Stage
from nvscope._stats import MIN_ROUNDS, median, summarize

__all__ = ["search"]

def _partition_bound() -> int:
    # Internal on purpose: the LRU size of each fusion's partition table, read by nvscope's one env parser.
    from nvscope import _env

    return _env.integer("NVSCOPE_MAX_PARTITIONS")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.1f} ms"


def _first_line(error: BaseException) -> str:
    """``Type: first line of the message``, and the first line of the first note (add_note) if there is one."""
    text = str(error).strip()
    line = f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
    notes = [n.strip() for n in getattr(error, "__notes__", ()) if isinstance(n, str) and n.strip()]
    return f"{line} ({notes[0].splitlines()[0]})" if notes else line


class _Variant:
    """A variant being measured (mutable while the search runs; a `SearchRow` when it is done)."""

    def __init__(self, label: str, options: OptionSet, stage: Stage) -> None:
        self.label, self.options, self.stage = label, options, stage
        self.scope: AbstractContextManager[Any] = nv_options(options.enable, options.disable) if options \
            else nullcontext()
        self.first_call_s: float | None = None
        self.times: list[float] = []  # ms per call, one per round
        self.default_times: list[float] = []  # the default's, in the same rounds
        self.base_times: list[float] = []  # a combination's: the set it extends, in the same rounds
        self.numerics: Numerics | None = None
        self.error: str | None = None
        self.fusions = self.new_partitions = 0


class _Runner:
    """Calls the function, copies and compares its outputs, times blocks of calls."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], backward: bool,
                 module: Any, tolerance: float | None, steps: int, warmup: int, say: Callable[[str], None]) -> None:
        self.fn, self.args, self.kwargs, self.backward = fn, args, kwargs, backward
        self.tolerance, self.steps, self.warmup, self.say = tolerance, steps, warmup, say
        self.targets = grad_targets(args, kwargs, module)
        self.reference: list[tuple[str, Any]] = []
        self.cuda = False
        self.events: tuple[Any, Any] | None = None

    def invoke(self) -> Any:
        for _, tensor in self.targets:
            tensor.grad = None  # as zero_grad(set_to_none=True): each call's gradients are its own
        out = self.fn(*self.args, **self.kwargs)
        if self.backward:
            torch = sys.modules.get("torch")
            if torch is None or not isinstance(out, torch.Tensor) or out.numel() != 1 or not out.requires_grad:
                raise TypeError(f"backward=True: the function must return a scalar loss tensor that requires grad, "
                                f"got {type(out).__name__}: search calls .backward() on it")
            out.backward()
        return out

    def snapshot(self, out: Any) -> list[tuple[str, Any]]:
        """Copies of every output and gradient leaf, taken now: a function returning a reused buffer, or the next
        variant overwriting .grad, cannot change what is compared."""
        leaves = flatten_outputs(out, "out")
        leaves += [(name, t.grad.detach().clone()) for name, t in self.targets if t.grad is not None]
        return leaves

    def sync(self) -> None:
        if self.cuda:
            sys.modules["torch"].cuda.synchronize()

    def first_call(self, v: _Variant) -> list[tuple[str, Any]]:
        """The first call (timed alone: it compiles), audited, its outputs copied; then the warm-up calls."""
        torch = sys.modules.get("torch")
        with v.scope:
            with nvscope.audit() as log:
                if v.stage == "default" and torch is not None:  # CUDA work queued by the caller is not ours
                    self.cuda = torch.cuda.is_initialized()
                self.sync()
                start = time.perf_counter()
                out = self.invoke()
                torch = sys.modules.get("torch")  # the function may have imported it
                if v.stage == "default" and torch is not None:  # CUDA events once anything (the default) used CUDA
                    self.cuda = torch.cuda.is_initialized()
                self.sync()
                v.first_call_s = time.perf_counter() - start
            leaves = self.snapshot(out)
            del out
            for _ in range(self.warmup):
                self.invoke()
            self.sync()
        v.fusions = len(log.records)
        v.new_partitions = sum(r.partition == "new" for r in log.records)
        return leaves

    def block(self, v: _Variant) -> float:
        """``steps`` calls of one variant inside its scope; milliseconds per call."""
        with v.scope:
            if self.cuda:
                if self.events is None:
                    torch = sys.modules["torch"]
                    self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                start, end = self.events
                self.sync()
                start.record()
                for _ in range(self.steps):
                    self.invoke()
                end.record()
                end.synchronize()
                return float(start.elapsed_time(end)) / self.steps
            begin = time.perf_counter()
            for _ in range(self.steps):
                self.invoke()
            return (time.perf_counter() - begin) * 1e3 / self.steps

    def prepare(self, v: _Variant, index: str) -> None:
        """First call, numerics and warm-up of one candidate; a failure is recorded on it, never raised."""
        try:
            leaves = self.first_call(v)
        except Exception as error:
            v.error = _first_line(error)
            self.say(f"{index} {v.label}: FAILED, skipped: {v.error}")
            return
        v.numerics = compare_leaves(self.reference, leaves, self.tolerance)
        n = v.numerics
        state = "ok" if n.ok else f"OVER TOLERANCE ({n.detail})"
        self.say(f"{index} {v.label}: first call {_seconds(v.first_call_s)} ({v.new_partitions} partitions compiled), "
                 f"numerics {state}, max rel diff {n.max_rel_diff:.2g}" + (f", {n.nonfinite}" if n.nonfinite else ""))

    def rounds(self, variants: list[_Variant], rounds: int, rng: random.Random) -> dict[int, list[float]]:
        """Interleaved rounds of ``variants`` (the first is the baseline, whose failure propagates): per variant
        (by id) its ms per call in each round. A variant that raises is marked failed and dropped."""
        live = [v for v in variants if v.error is None]
        times: dict[int, list[float]] = {id(v): [] for v in live}
        self.say(f"timing {len(live)} variants x {rounds} rounds x {self.steps} calls")
        reported = time.monotonic()
        collecting = gc.isenabled()
        gc.collect()
        for r in range(rounds):
            order = live[:]
            rng.shuffle(order)
            # No collection inside a block (it would be charged to that variant alone); between rounds only the
            # young generations, which hold what the round left: a full collection costs ~50 ms once torch is loaded.
            gc.collect(1)
            gc.disable()
            try:
                for v in order:
                    try:
                        times[id(v)].append(self.block(v))
                    except Exception as error:
                        if v is variants[0]:
                            raise
                        v.error = f"(while timed, round {r + 1}) {_first_line(error)}"
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


def search(fn: Callable[..., Any], /, *args: Any, candidates: Iterable[object] | None = None, rounds: int = 30,
           steps_per_round: int = 5, warmup: int = 2, tolerance: float | None = None, backward: bool = False,
           module: Any = None, seed: int = 0, progress: bool = True, **kwargs: Any) -> SearchResult:
    """Find the nvFuser options that make ``fn(*args, **kwargs)`` faster, with its numerics checked.

    ``candidates``: a list of candidates (see `parse_candidate`: ``"fast_math"``, ``"fuse_matmul,-matmul_expr_eval"``,
    ``{"disable": ["fma"]}``, ...), all validated before anything runs; None for `default_candidates`.
    ``rounds`` x ``steps_per_round``: the timing (see the module docstring); ``warmup``: calls after the first.
    ``tolerance``: bound on max|diff| / max|default| for every output and gradient (None: `DEFAULT_TOLERANCES`).
    ``backward=True``: ``fn`` returns a scalar loss and the search calls ``.backward()`` on it. Gradients compared:
    those of ``module``'s parameters (an ``nn.Module``, a Thunder module, or an iterable of tensors) and of the
    leaf tensors in ``args``/``kwargs`` that require grad, also when ``fn`` runs backward itself; their ``.grad`` is
    set to None before every call. Progress goes to stderr unless ``progress=False``. Runs in development mode and
    restores the previous setting; no scope stays active afterwards.
    """
    if not callable(fn):
        raise TypeError(f"search() needs a callable, not {type(fn).__name__}: {fn!r}")
    for name, value, least in (("rounds", rounds, MIN_ROUNDS), ("steps_per_round", steps_per_round, 1),
                               ("warmup", warmup, 0), ("seed", seed, -sys.maxsize)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}"
                             + (" (fewer rounds give no confidence interval)" if name == "rounds" else ""))
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                      and tolerance >= 0):
        raise ValueError(f"tolerance must be a finite number >= 0 or None, got {tolerance!r}")
    options = resolve(candidates)

    def say(message: str) -> None:
        if progress:
            print(f"nvscope search: {message}", file=sys.stderr, flush=True)

    began = time.perf_counter()
    rng = random.Random(seed)
    runner = _Runner(fn, args, kwargs, backward, module, tolerance, steps_per_round, warmup, say)
    default = _Variant("default", OptionSet(), "default")
    singles = [_Variant(label(o), o, "candidate") for o in options]
    combos: list[tuple[_Variant, _Variant]] = []  # (combination, the set it extends)
    notes: list[str] = []
    previous = nvscope.set_development_mode(True)  # an explicit developer action: no DevelopmentModeWarning
    try:
        with warnings.catch_warnings():
            # Fusions seen are counted per variant instead; a warning per candidate scope would only repeat it.
            warnings.simplefilter("ignore", nvscope.NoFusionWarning)
            _install_adapters()
            say(f"{len(singles)} candidates; each variant's first call compiles (seconds each)")
            default_leaves = runner.first_call(default)  # a default that fails is the caller's bug: it propagates
            runner.reference = default_leaves
            default.numerics = compare_leaves(default_leaves, runner.snapshot(runner.invoke()), tolerance)
            say(f"default: first call {_seconds(default.first_call_s)}, {default.fusions} nvFuser fusion executions; "
                f"timer {'CUDA events' if runner.cuda else 'time.perf_counter'}")
            batch = max(1, _partition_bound() - 1)  # an enclosing scope may hold one partition per fusion too
            for first in range(0, len(singles), batch):
                group = singles[first:first + batch]
                for i, v in enumerate(group, first + 1):
                    runner.prepare(v, f"[{i}/{len(singles)}]")
                times = runner.rounds([default, *group], rounds, rng)
                default.times = default.times or times[id(default)]
                for v in group:
                    v.times, v.default_times = times.get(id(v), []), times[id(default)]
            if len(singles) > batch:
                notes.append(f"candidates were timed in batches of {batch} (the partition bound "
                             "NVSCOPE_MAX_PARTITIONS less one), each against the default in the same rounds")
            winners = sorted((v for v in singles if _wins(v, v.default_times, seed)),
                             key=lambda v: median(_ratios(v.times, v.default_times)))
            best = winners[0] if winners else None
            for w in winners[1:]:
                assert best is not None
                union = best.options | w.options
                if union == best.options:
                    continue
                trial = _Variant(f"{best.label} + {w.label}", union, "combination")
                say(f"combining: {trial.label}")
                runner.prepare(trial, "[combination]")
                combos.append((trial, best))
                if trial.error is not None:
                    continue
                times = runner.rounds([default, best, trial], rounds, rng)
                if id(best) not in times:  # the set failed when run again: recommend nothing rather than it
                    best = None
                    break
                if id(trial) not in times:
                    continue
                trial.times, trial.default_times, trial.base_times = (
                    times[id(trial)], times[id(default)], times[id(best)])
                if _wins(trial, trial.base_times, seed) and _wins(trial, trial.default_times, seed):
                    best = trial
    finally:
        nvscope.set_development_mode(previous)
    variants = [*singles, *(c for c, _ in combos)]
    recommended = OptionSet() if best is None else best.options
    rows = [_row(v, seed, recommended, None) for v in (default, *singles)]
    rows += [_row(c, seed, recommended, base) for c, base in combos]
    result = SearchResult(tuple(rows), recommended, "CUDA events" if runner.cuda else "time.perf_counter", rounds,
                          steps_per_round, warmup, tolerance, seed, time.perf_counter() - began,
                          tuple(notes + _notes(default, variants)))
    say(f"done in {result.elapsed_s:.1f} s; recommended: {result.recommendation()}")
    return result


def _install_adapters() -> None:
    # The default must run through the same (patched) executor as the candidates, from its first call: a scope
    # installs the adapter only when it is entered, and the default runs in none. Internal on purpose.
    try:
        from nvscope import _autoinstall
    except ImportError:
        return
    _autoinstall.ensure_adapters()


def _ratios(times: list[float], base: list[float]) -> list[float]:
    return [a / b for a, b in zip(times, base, strict=True)]


def _wins(v: _Variant, base_times: list[float], seed: int) -> bool:
    """Timed, numerics within tolerance, and faster than ``base_times`` (measured in the same rounds)."""
    if v.error is not None or v.numerics is None or not v.numerics.ok or not v.times:
        return False
    return summarize(v.times, base_times, seed=seed).verdict == "faster"


def _row(v: _Variant, seed: int, recommended: OptionSet, base: _Variant | None) -> SearchRow:
    timed = v.error is None and bool(v.times) and v.stage != "default"
    ratio = summarize(v.times, v.default_times, seed=seed) if timed else None
    versus = summarize(v.times, v.base_times, seed=seed) if timed and v.base_times else None
    return SearchRow(v.label, v.options, v.stage, v.first_call_s, median(v.times) if v.times else None, ratio,
                     v.numerics, v.error, v.fusions, v.new_partitions, None if base is None else base.label, versus,
                     bool(recommended) and v.options == recommended and v.error is None)


def _notes(default: _Variant, variants: list[_Variant]) -> list[str]:
    notes = []
    n = default.numerics
    if n is not None and not n.ok:
        notes.append(f"the default is not repeatable: its second call differs from its first ({n.detail}); "
                     "numerics are compared with its first call, so differences below may be its own")
    if n is not None and n.nonfinite:
        notes.append(f"the default itself has NaN/Inf ({n.nonfinite}); variants are checked to have the same")
    if default.fusions == 0 and not any(v.fusions for v in variants):
        notes.append("no nvFuser fusion ran through nvscope in any first call, so the options reached nothing: is "
                     "the function jitted (thunder.jit) or built on nvFuser's FusionDefinition?")
    return notes
