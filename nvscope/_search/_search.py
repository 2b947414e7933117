"""Option search: which nvFuser options make a function faster, with its numerics checked.

Every variant has its own compiled kernels, so all are timed interleaved in one process; winners are combined
greedily and the set chosen is confirmed in fresh rounds (docs/search.md)."""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from nvscope._core import NoEffectWarning, NoFusionWarning, NvscopeWarning, OptionSet, _env, dev_mode, first_line
from nvscope._measure import (
    MIN_SAMPLE_S,
    Measure,
    RatioSummary,
    Runner,
    Variant,
    begin,
    compare_leaves,
    compile_clock,
    confirm,
    install_adapters,
    median,
    resolve,
    rounds_needed,
    seconds,
    spec,
    summarize,
)
from nvscope._search._report import SearchResult, SearchRow
from nvscope._tools import no_fusion

__all__ = ["search"]

# Above this share of a call, the search's own overhead dilutes the ratios toward 1: the call is too short to judge.
_SHORT_CALL = 0.25

NO_FUSION = ("search: no nvFuser fusion ran through nvscope when the step ran with its defaults, so no option can "
             "reach one and any speed a candidate showed would be chance: is the function jitted (thunder.jit) or "
             "built on nvFuser's FusionDefinition, and is the step run in this process?")


def search(step: Callable[..., Any], /, *args: Any, candidates: Iterable[object] | None = None,
           measure: Measure | None = None, **kwargs: Any) -> SearchResult:
    """Find the nvFuser options that make ``step(*args, **kwargs)`` faster, numerics checked (docs/search.md).

    ``candidates``: the option sets to try (forms: `parse_candidate`), validated first; None: `default_candidates`.
    ``measure``: an `nvscope.Measure` (default: 30 rounds, at least 5 calls per sample, 2 warm-up calls); each field is
    also a keyword, which wins over it. Other keywords go to the step. Runs in development mode, in this context only.
    """
    m, say = begin(search, step, measure, kwargs, Measure(rounds=30, steps=5, warmup=2))
    rounds, steps_per_round, tolerance = m.rounds or 0, m.steps or 1, m.tolerance
    options = resolve(candidates)
    began, compiled = time.perf_counter(), compile_clock()
    rng = random.Random(m.seed)
    runner = Runner(step, args, kwargs, m, say)
    default = Variant("default", OptionSet(), "default")
    singles = [Variant(spec(o), o, "candidate") for o in options]
    combos: list[tuple[Variant, Variant]] = []  # (combination, the set it extends)
    notes: list[str] = []
    chosen: list[Variant] = []  # the set to recommend so far (the last one); none: keep the defaults
    stopped = ""
    # An explicit developer action: no DevelopmentModeWarning, in this context only.
    with dev_mode(True), runner.sharing(), warnings.catch_warnings():
        # Fusions seen and changed are counted per variant instead (the notes say when a candidate changed none); a
        # warning per candidate scope would only repeat it.
        warnings.simplefilter("ignore", NoFusionWarning)
        warnings.simplefilter("ignore", NoEffectWarning)
        install_adapters()
        say(f"{_count(len(singles), 'candidate')}; each variant's first call compiles (seconds each)")
        default_leaves = runner.first_call(default)  # a default that fails is the caller's bug: it propagates
        if not default.fusions:  # refused as profile and bisect refuse it, before any candidate compiles
            raise ValueError(no_fusion(NO_FUSION))
        runner.reference = default_leaves
        default.numerics = compare_leaves(default_leaves, runner.snapshot(runner.invoke()), tolerance)
        per_call, overhead = runner.calibrate()
        notes += _timing_notes(steps_per_round, runner.steps, per_call, overhead)
        say(f"default: first call {seconds(default.first_call_s)}, {default.fusions} nvFuser fusion executions "
            f"({default.compiles}); "
            f"timer {runner.timer.name}, {runner.steps} calls per sample ({per_call * 1e3:.3g} us per call)")
        notes += _rounds_note(rounds, len(singles))
        try:
            _measure(runner, default, singles, combos, chosen, notes, rounds, rng)
        except Exception as error:  # what was measured is kept: the result says where the search stopped
            stopped = first_line(error)
        if chosen and not stopped:  # recommended only where fresh rounds confirm it
            try:
                _confirm(runner, default, chosen, notes, rounds, rng)
            except Exception as error:  # as a stop before it: what was measured is kept, the set unconfirmed
                stopped = first_line(error)
    if stopped:
        say(f"stopped early: {stopped}")
        notes.append(f"the search stopped early ({stopped}): the rows hold what was measured before, and the "
                     "recommendation rests on them alone" + (", not confirmed in fresh rounds" if chosen else ""))
    variants = [*singles, *(c for c, _ in combos)]
    recommended = chosen[-1].options if chosen else OptionSet()
    rows = [_row(v, recommended, None) for v in (default, *singles)]
    rows += [_row(c, recommended, base) for c, base in combos]
    result = SearchResult(tuple(rows), recommended, runner.timer.name, rounds, runner.steps, runner.warmup, tolerance,
                          m.seed, time.perf_counter() - began, tuple(notes + _notes(default, variants)),
                          compile_clock() - compiled)
    for note in notes:
        if note.startswith(("the search stopped early", "a call of the function takes")):
            warnings.warn(f"nvscope.search: {note}", NvscopeWarning, stacklevel=2)
    say(f"done in {result.elapsed_s:.1f} s; recommended: {result.recommendation()}")
    return result


def _measure(runner: Runner, default: Variant, singles: list[Variant], combos: list[tuple[Variant, Variant]],
             chosen: list[Variant], notes: list[str], rounds: int, rng: random.Random) -> None:
    """Time the candidates in batches, then combine the winners greedily. Each set chosen is appended to
    ``chosen`` at once, so that a later failure keeps it; the last one is the recommendation."""
    say = runner.say
    for v in singles:
        v.comparisons = len(singles)
    # Less one: an enclosing scope may hold one partition per fusion too.
    batch = max(1, _env.integer("NVSCOPE_MAX_PARTITIONS") - 1)
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
    winners = sorted((v for v in singles if _wins(v, v.default_times)),
                     key=lambda v: _summary(v, v.default_times).median)
    if not winners:
        return
    best = winners[0]
    chosen.append(best)
    tries = 2 * (len(winners) - 1)  # the combinations' family: each union judged against its set and the default
    if tries and rounds < rounds_needed(tries):
        notes.append(f"{rounds} rounds are too few for a combination's verdict ({rounds_needed(tries)} needed for "
                     f"{_count(tries, 'comparison')}): the best candidate alone is recommended")
        return
    for w in winners[1:]:
        union = best.options | w.options
        if union == best.options:
            continue
        both = union.enable & union.disable
        if both:
            notes.append(f"{best.label} + {w.label} not tried: it would enable and disable "
                         f"{', '.join(sorted(both))}")
            say(f"not combining {best.label} + {w.label}: contradictory")
            continue
        trial = Variant(f"{best.label} + {w.label}", union, "combination")
        trial.comparisons = tries
        say(f"combining: {trial.label}")
        runner.prepare(trial, "[combination]")
        combos.append((trial, best))
        if trial.error is not None:
            continue
        times = runner.rounds([default, best, trial], rounds, rng)
        if id(best) not in times:  # the set failed when run again: recommend nothing rather than it
            chosen.clear()
            return
        if id(trial) not in times:
            continue
        trial.times, trial.default_times, trial.base_times = times[id(trial)], times[id(default)], times[id(best)]
        if _wins(trial, trial.base_times) and _wins(trial, trial.default_times):
            best = trial
            chosen.append(best)


def _confirm(runner: Runner, default: Variant, chosen: list[Variant], notes: list[str], rounds: int,
             rng: random.Random) -> None:
    """Time the chosen set against the default in fresh rounds; empty ``chosen`` unless it is faster there too."""
    best = chosen[-1]
    screen = _summary(best, best.default_times)
    runner.say(f"confirming {best.label} against the default in {rounds} fresh rounds")
    for v in (default, best):  # its kernels may have been evicted by a later batch: compiled again before the rounds
        with v.scope:
            runner.invoke()
    times = runner.rounds([default, best], rounds, rng)
    fresh = confirm(screen, times[id(best)], times[id(default)], comparisons=1) if id(best) in times else None
    if fresh is None or fresh.verdict != "faster":
        chosen.clear()
    ratio = "it failed" if fresh is None else f"ratio {fresh.median:.3f} ({fresh.low:.3f}-{fresh.high:.3f})"
    notes.append(f"{best.label} timed again against the default in {rounds} fresh rounds to confirm it: {ratio}, "
                 + ("confirmed" if chosen else "not confirmed, so nothing is recommended (its 'faster' was "
                    "chance, or too small to show twice)"))


def _timing_notes(asked: int, steps: int, per_call: float, overhead: float) -> list[str]:
    notes = []
    if steps > asked:
        notes.append(f"{steps} calls per variant per round (steps_per_round={asked} raised) so that a timed sample "
                     f"lasts at least {MIN_SAMPLE_S * 1e3:g} ms: a call takes {per_call * 1e3:.3g} us")
    if overhead > _SHORT_CALL * per_call:
        notes.append(f"a call of the function takes {per_call * 1e3:.3g} us, of which about {overhead * 1e3:.2g} us "
                     "is the search's own per-call overhead: too short to judge (ratios are diluted toward 1 and "
                     "mostly measure Python's call machinery); time a step that does more work per call")
    return notes


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _rounds_note(rounds: int, candidates: int) -> list[str]:
    needed = rounds_needed(candidates)
    return [] if rounds >= needed else [
        f"{rounds} rounds are too few for any verdict: {_count(candidates, 'candidate')} judged together at 95% "
        f"need at least {needed} rounds, so nothing can be recommended: pass rounds={needed} or more"]


def _summary(v: Variant, base_times: list[float]) -> RatioSummary:
    """The paired-ratio summary of ``v`` against ``base_times``, as one of its family (``v.comparisons``)."""
    return summarize(v.times, base_times, comparisons=v.comparisons)


def _wins(v: Variant, base_times: list[float]) -> bool:
    """Timed, numerics within tolerance, faster than ``base_times``, and it changed a fusion: a variant whose
    fusions all ran their defaults runs the default's kernels, so any speed it shows is noise."""
    if v.error is not None or v.numerics is None or not v.numerics.ok or not v.times:
        return False
    if _changed_nothing(v):
        return False
    return _summary(v, base_times).verdict == "faster"


def _changed_nothing(v: Variant) -> bool:
    """Its first call reached fusions and every one of them ran its defaults."""
    return bool(v.fusions) and not v.changed


def _row(v: Variant, recommended: OptionSet, base: Variant | None) -> SearchRow:
    timed = v.error is None and bool(v.times) and v.stage != "default"
    ratio = _summary(v, v.default_times) if timed else None
    versus = _summary(v, v.base_times) if timed and v.base_times else None
    return SearchRow(v.label, v.options, v.stage, v.first_call_s, median(v.times) if v.times else None, ratio,
                     v.numerics, v.error, v.fusions, v.new_partitions, None if base is None else base.label, versus,
                     bool(recommended) and v.options == recommended and v.error is None, v.compiles)


def _notes(default: Variant, variants: list[Variant]) -> list[str]:
    notes = []
    n = default.numerics
    if n is not None and not n.ok:
        notes.append(f"the default is not repeatable: its second call differs from its first ({n.detail}); "
                     "numerics are compared with its first call, so differences below may be its own")
    if n is not None and n.nonfinite:
        notes.append(f"the default itself has NaN/Inf ({n.nonfinite}); variants are checked to have the same")
    idle = [v.label for v in variants if v.error is None and _changed_nothing(v)]
    if idle:
        notes.append(f"{', '.join(idle)}: every fusion {'it' if len(idle) == 1 else 'each'} reached ran its defaults "
                     "(the options cannot affect those fusions), so no timing can recommend "
                     f"{'it' if len(idle) == 1 else 'them'}")
    return notes
