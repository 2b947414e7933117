"""Bisect: which options, on which fusions, make a step go wrong, with as few runs of it as possible.

    result = nvscope.bisect(step, enable=["fuse_matmul"], disable=["matmul_expr_eval"])
    print(result.report())           # the culprit, nv_options(enable=[...], fusions=[...]), the repro script

Per-fusion scopes make this a search over two sets: each probe runs the step once under
``nv_options(<some options>, fusions=[<some fusion ids>])``, so only those fusions compile and run with those
options (their own partitions) and every other fusion runs with its defaults. Coarse to fine:

1. the default runs first: its outputs and gradients are the reference, its fusions (ids, in first-execution order)
   the fusion list; the step must then go wrong under the given options on every fusion ("confirm");
2. a 1-minimal subset of the options, with every fusion ("options");
3. a 1-minimal set of fusions with those options ("fusions"); then each culprit option is taken away once more,
   on those fusions only, to check that none is needed only elsewhere;
4. the given options on every fusion except the culprits ("rest"): if the rest still goes wrong, another culprit
   is found among those fusions (fusions first, then options: "more"), until the rest runs clean.

Steps 2 and 3 are `nvscope._minimize.minimize`: a progressive binary search, ``k * (ceil(log2 n) + 1)`` probes
for ``k`` culprits among ``n`` (fewer than one probe per fusion as soon as n > 4). A probe that was already run is not
run again (a step is assumed deterministic). The program-level variant (each probe a fresh process, for failures
that kill it) is `nvscope._bisect_process`; both share `drive`.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import nvscope
from nvscope import OptionSet, _shared, nv_options
from nvscope._bisect_report import BisectResult, Culprit, Probe
from nvscope._minimize import minimize

__all__ = ["CHECKS", "Outcome", "bisect", "drive", "repro_paths"]

CHECKS = ("raises", "numerics", "slower")


class Outcome:
    """What one probe saw: whether the step went wrong, how (one line, or a few), and the repro scripts named."""

    __slots__ = ("bad", "detail", "repro")

    def __init__(self, bad: bool, detail: str = "", repro: tuple[str, ...] = ()) -> None:
        self.bad, self.detail, self.repro = bad, detail, repro


def repro_paths(error: BaseException) -> tuple[str, ...]:
    """The repro scripts that nvscope's failure notes on ``error`` (and the errors it chains) name."""
    from nvscope._repro import MARK, scripts_named_in

    paths: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        notes = getattr(current, "__notes__", None)
        for note in notes if isinstance(notes, list) else ():
            if not (isinstance(note, str) and note.startswith(MARK)):
                continue
            paths += scripts_named_in(note)
        current = current.__cause__ or current.__context__
    return tuple(dict.fromkeys(paths))


def _items(options: OptionSet) -> list[str]:
    return [*options.enable_list(), *(f"-{name}" for name in options.disable_list())]


def _options(items: Iterable[str]) -> OptionSet:
    items = list(items)
    return OptionSet([i for i in items if not i.startswith("-")], [i[1:] for i in items if i.startswith("-")])


def drive(given: OptionSet, fusions: Sequence[str], run: Callable[[OptionSet, tuple[str, ...] | None], Outcome],
          say: Callable[[str], None], check: str, mode: str = "in-process", program: tuple[str, ...] = (),
          max_culprits: int = 4) -> BisectResult:
    """The bisect's stages (module docstring) over ``run(options, fusions) -> Outcome``; ``fusions``: the ids."""
    began, compiled = time.perf_counter(), _shared.compiling()[0]

    def compile_s() -> float | None:  # the probes' children compile in subprocess mode: not seen here
        return _shared.compiling()[0] - compiled if mode == "in-process" else None

    all_fusions = tuple(fusions)
    items = _items(given)
    log: list[Probe] = []
    seen: dict[tuple[OptionSet, tuple[str, ...] | None], Outcome] = {}
    last_bad: list[tuple[OptionSet, tuple[str, ...] | None, Outcome]] = []
    stage = ["confirm"]

    def probe(options: OptionSet, selected: tuple[str, ...] | None) -> bool:
        key = (options, selected)
        outcome = seen.get(key)
        if outcome is None:
            from nvscope._candidates import spec

            where = "every fusion" if selected is None else ", ".join(selected) if len(selected) <= 3 else \
                f"{len(selected)} fusions ({selected[0]} ... {selected[-1]})"
            start = time.perf_counter()
            outcome = run(options, selected)
            seconds = time.perf_counter() - start
            seen[key] = outcome
            log.append(Probe(len(log) + 1, stage[0], options, selected, outcome.bad, outcome.detail, seconds))
            first = outcome.detail.splitlines()[0][:160] if outcome.detail else ""
            say(f"probe {len(log)} ({stage[0]}): {spec(options)} on {where}: "
                f"{'BAD' if outcome.bad else 'ok'} in {seconds:.1f} s{f' ({first})' if first else ''}")
        if outcome.bad:
            last_bad.append((options, selected, outcome))
        return outcome.bad

    def fewest_options(pool: tuple[str, ...]) -> OptionSet:
        return _options(minimize(items, lambda sub: probe(_options(sub), pool))) if len(items) > 1 else given

    def fewest_fusions(options: OptionSet, pool: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(minimize(pool, lambda sub: probe(options, tuple(sub)))) if len(pool) > 1 else pool

    def settle(options: OptionSet, found: tuple[str, ...]) -> tuple[Culprit, str | None]:
        stage[0] = "final"
        probe(options, found)  # usually run already (then free): the problem and repro scripts of this culprit
        final = seen[(options, found)]
        if final.bad:
            return Culprit(options, found, final.detail, final.repro), None
        # It went wrong under a probe and not under the same options again: keep the last evidence.
        options, selected, final = last_bad[-1]
        return Culprit(options, all_fusions if selected is None else selected, final.detail, final.repro), (
            "the step did not go wrong again under a culprit it found: it may be flaky, so that culprit is the last "
            "probe that went wrong")

    if not probe(given, all_fusions):
        outcome = seen[(given, all_fusions)]
        return BisectResult(given, (), all_fusions, tuple(log), check, None, mode, program,
                            time.perf_counter() - began, (), outcome.detail or "it ran clean", compile_s())
    # The first culprit, coarse to fine: the options on every fusion, then the fusions with those options; then each
    # option once more on those fusions only, so that none is kept that only other fusions needed.
    stage[0] = "options"
    chosen = fewest_options(all_fusions)
    stage[0] = "fusions"
    found = fewest_fusions(chosen, all_fusions)
    reduced = True
    while reduced and len(_items(chosen)) > 1:
        reduced = False
        for item in _items(chosen):
            fewer = _options(i for i in _items(chosen) if i != item)
            if probe(fewer, found):
                chosen, reduced = fewer, True
                break
    culprit, flaky = settle(chosen, found)
    culprits, notes = [culprit], [flaky] if flaky else []
    # More culprits among the other fusions, until the given options on all the rest run clean.
    others_clean = None
    while True:
        taken = {f for c in culprits for f in c.fusions}
        rest = tuple(f for f in all_fusions if f not in taken)
        if not rest:  # every fusion is a culprit: there is no other fusion to run clean
            others_clean = None
            break
        stage[0] = "rest"
        others_clean = not probe(given, rest)
        if others_clean or len(culprits) >= max_culprits:
            break
        stage[0] = "more"
        found = fewest_fusions(given, rest)
        chosen = fewest_options(found)
        culprit, flaky = settle(chosen, found)
        if set(culprit.fusions) <= taken:  # flaky: nothing new can be told apart
            break
        culprits.append(culprit)
        notes += [flaky] if flaky else []
    return BisectResult(given, tuple(culprits), all_fusions, tuple(log), check, others_clean, mode, program,
                        time.perf_counter() - began, tuple(dict.fromkeys(notes)), compile_s=compile_s())


def _check_arg(check: object) -> tuple[str, ...] | Callable[[Any], bool]:
    if callable(check):
        return check
    names = (check,) if isinstance(check, str) else tuple(check) if isinstance(check, Iterable) else ()
    bad = [c for c in names if c not in CHECKS]
    if bad or not names:
        raise ValueError(f"check= takes {', '.join(map(repr, CHECKS))} (or several in a list), or a callable that "
                         f"returns True for a bad result; got {check!r}")
    return tuple(str(c) for c in names)


def bisect(fn: Callable[..., Any], /, *args: Any, enable: Iterable[str] | str = (), disable: Iterable[str] | str = (),
           check: object = ("raises", "numerics"), tolerance: float | None = None, slower_by: float = 0.05,
           rounds: int = 10, steps_per_round: int = 3, backward: bool = False, module: Any = None, seed: int = 0,
           progress: bool = True, **kwargs: Any) -> BisectResult:
    """Find the options and fusions that make ``fn(*args, **kwargs)`` go wrong under ``enable``/``disable``.

    ``check``: what "wrong" is: ``"raises"`` (an exception), ``"numerics"`` (an output or gradient leaves
    ``tolerance`` against the default's: see `nvscope.search`), ``"slower"`` (slower than the default by more than
    ``slower_by``, i.e. the 95% interval of the paired time ratio lies above ``1 + slower_by``, timed in ``rounds``
    randomized rounds of at least ``steps_per_round`` calls, calibrated as the search does), several of them in a
    list, or a callable taking the step's return value and returning True when it is bad (an exception is then bad
    too). ``backward``/``module``: as for
    `nvscope.search`. Runs in development mode, outside any scope of the caller's (the default is the defaults);
    every probe leaves no scope, warning filter or patch behind.
    """
    from nvscope._bisect_probe import InProcess

    if not callable(fn):
        raise TypeError(f"bisect() needs a callable, not {type(fn).__name__}: {fn!r}")
    checks = _check_arg(check)
    given = nv_options(enable, disable).options  # validated against the catalog before anything runs
    if not given:
        raise ValueError("bisect() needs the options under which the step goes wrong: enable=[...] and/or "
                         "disable=[...]")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                      and tolerance >= 0):
        raise ValueError(f"tolerance must be a finite number >= 0 or None, got {tolerance!r}")
    if not (isinstance(slower_by, (int, float)) and math.isfinite(slower_by) and slower_by >= 0):
        raise ValueError(f"slower_by must be a finite number >= 0, got {slower_by!r}")

    def say(message: str) -> None:
        if progress:
            print(f"nvscope bisect: {message}", file=sys.stderr, flush=True)

    from nvscope._scope import enter_frame, reset

    previous = nvscope.set_development_mode(True)
    outside = enter_frame(None)  # the caller's scopes do not apply: the default is the defaults, a probe is its options
    try:
        with warnings.catch_warnings():
            for quiet in (nvscope.NoFusionWarning, nvscope.NoEffectWarning):  # probes that change nothing: expected
                warnings.simplefilter("ignore", quiet)
            oracle = InProcess(fn, args, kwargs, checks, tolerance, slower_by, rounds, steps_per_round, backward,
                               module, seed)
            fusions = oracle.baseline()
            say(f"the default ran {len(fusions)} fusions; bisecting {len(_items(given))} options over them")
            description = ("a callable's verdict on the result, or an exception" if callable(checks) else
                           " or ".join({"raises": "it raises", "numerics": "outputs/gradients over tolerance",
                                        "slower": f"slower than the default by more than {slower_by:.0%}"}[c]
                                       for c in checks))
            result = drive(given, fusions, oracle.run, say, description)
    finally:
        reset(outside)
        nvscope.set_development_mode(previous)
    say(f"done: {result.line() if result.reproduced else 'not reproduced'} ({result.probes} probes)")
    return result

