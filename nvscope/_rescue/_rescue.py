"""Rescue: when nvFuser fails under its defaults, find per fusion the options that make the step run and match.

A first run escapes failing fusions to PyTorch, naming each; failures the escape cannot pass are searched first,
then fusions that raise get a proven PyTorch route and an option search (docs/rescue.md)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from nvscope._bisect import timeout_seconds
from nvscope._core import OptionSet, catalog, cut
from nvscope._measure import Measure, _checks, measure_of, only_own, options_from, progress_printer, resolve
from nvscope._rescue._probe import Children, Plan, check_target, observe
from nvscope._rescue._report import Failure, FusionRescue, RescueResult, with_issue
from nvscope._rescue._route import (
    clean_run,
    cost,
    fails_at,
    failure_rate,
    failures_of,
    first_line_of,
    next_failure,
    route_failure,
    runs,
)
from nvscope._rescue._search import Attempt, candidates, expected_sets, how_sure, search
from nvscope._rescue._target import ASYNC_STEP
from nvscope._rescue._watch import NO_VALIDATE, loaded_versions, scripts_directory, tidy
from nvscope._rescue._workers import signals_interrupt

__all__ = ["Limits", "rescue"]

RESCUE = ("tolerance", "progress", "repeat", "timeout")  # its Measure keywords

Probe = Callable[[list[Plan]], list[dict[str, Any]]]
_ENV = ("NVFUSER_ENABLE", "NVFUSER_DISABLE")
_MOST_RUNS = 64  # the most runs a flaky failure's cure is given to prove itself; past that it is said not proven


def _target(step: str, reference: str | None, module: bool, args: list[str]) -> dict[str, Any]:
    # A file of that name is the script, colon or not (as `nvscope run` takes it); else the last colon names a function.
    split = ":" in step and not step.endswith(":") and (module or not os.path.isfile(step))
    where, _, function = step.rpartition(":") if split else (step, "", "")
    if not module and not os.path.isfile(where):
        raise FileNotFoundError(f"can't open file {cut(os.path.abspath(where), 200, repr)}: no such file")
    target = {"where": where, "function": function or None, "module": module, "args": list(args),
              "reference": reference}
    check_target(target)  # a syntax error, a missing module: refused before any child runs
    return target


def rescue(step: Callable[[], Any] | str, /, *, reference: Callable[[], Any] | str | None = None,
           max_set_size: int = 2, budget_s: float = 1800.0, jobs: int = 1, confirm: int = 1, sanitize: bool = False,
           sanitizer: str = "compute-sanitizer", module: bool = False, args: list[str] | tuple[str, ...] = (),
           candidates: Sequence[object] | None = None, validate: bool = True, fresh_probes: bool = False,
           alpha: float = 0.05, measure: Measure | None = None, **keywords: Any) -> RescueResult:
    """Find per fusion the nvFuser options that make ``step`` run (and match ``reference``) when it goes wrong under
    nvFuser's defaults (docs/rescue.md).

    ``step``: a callable taking no arguments (probed in this process), or a target ``"script.py:FUNCTION"``,
    ``"script.py"`` (with ``args``) or, with ``module=True``, ``"pkg.mod:FUNCTION"`` (probed in child processes).
    ``reference``: a callable, or a function's name beside a target. ``max_set_size``: the largest option set tried.
    ``budget_s``: the search's time budget. ``jobs``: probes at once. ``confirm``: clean reruns a cure needs.
    ``sanitize``/``sanitizer``: probes under memcheck. ``candidates``: the sets to try. ``validate``: check the numbers
    too. ``fresh_probes``: each probe in a fresh process. ``alpha``: the error a flaky cure may have.
    ``measure`` (or ``tolerance=``, ``progress=``, ``repeat=``, ``timeout=``): `nvscope.Measure` (``repeat``: 5)."""
    m = measure_of("rescue", measure, keywords, Measure(repeat=5), RESCUE)
    only_own(rescue, keywords, RESCUE)
    given = None if candidates is None else resolve(candidates)
    max_set_size = _checks.count("max_set_size", max_set_size, 1)
    jobs, confirm = _checks.count("jobs", jobs, 1), _checks.count("confirm", confirm, 0)
    budget_s = _checks.number("budget_s", budget_s, above=True)
    alpha = _checks.number("alpha", alpha, above=True)
    if alpha >= 1:
        raise ValueError(f"alpha must be a number between 0 and 1 (a false-cure rate, e.g. 0.05), got {alpha:g}")
    tolerance, timeout = m.tolerance, m.timeout
    say = progress_printer("rescue", m.progress)
    env = OptionSet.from_env()
    for name, flag in (("validate", validate), ("fresh_probes", fresh_probes)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}= takes True or False, not {type(flag).__name__}")
    children: Children | None = None  # a target's: closed at the end
    if isinstance(step, str):
        timeout = timeout_seconds("timeout", timeout)
        if reference is not None and not isinstance(reference, str):
            raise TypeError("reference= for a target is the name of a function in it, e.g. reference='eager_step'")
        target = _target(step, reference, module, list(args))
        if target["function"] is None and reference is not None:
            raise ValueError("reference= needs a function target (script.py:FUNCTION): a program has no result")
        if sanitize and shutil.which(sanitizer) is None:
            raise FileNotFoundError(f"{sanitizer}: not found on PATH (it comes with the CUDA toolkit); leave out "
                                    "sanitize to rescue without it")
        scripts = scripts_directory()
        children = Children(target, timeout=timeout, sanitizer=sanitizer if sanitize else None, scripts=scripts,
                            jobs=jobs, tolerance=tolerance, fresh=fresh_probes)
        probe: Probe = children.run
        mode, drops = "child processes", [v for v in _ENV if os.environ.get(v)]
    else:
        _checks.step_callable("rescue", step)
        if inspect.iscoroutinefunction(step):
            raise TypeError(ASYNC_STEP)
        if sanitize or module or args or fresh_probes:
            raise ValueError("sanitize=, module=, args= and fresh_probes= need a target run in child processes: "
                             "pass 'script.py:FUNCTION' instead of a callable")
        if reference is not None and not callable(reference):
            raise TypeError(f"reference= takes a callable for a callable step, not {type(reference).__name__}")
        scripts = scripts_directory()

        def in_process(plans: list[Plan]) -> list[dict[str, Any]]:
            return [observe(step, reference, {**plan.spec(), "scripts": scripts}, tolerance) for plan in plans]

        probe, mode, drops = in_process, "in-process", []
    checks = ("raises", *(("faults",) if mode != "in-process" else ()), *(("validate",) if validate else ()),
              *(("reference",) if reference else ()), *(("memcheck",) if sanitize else ()))
    result: RescueResult | None = None
    with signals_interrupt():
        try:
            limits = Limits(max_set_size, budget_s, jobs, confirm, given, alpha, m.repeat or 1)
            result = _drive(probe, say, mode, checks, env, drops, limits)
        finally:  # Ctrl-C, SIGTERM, SIGHUP too: no worker outlives the rescue, no fusion's pre-written script stays
            if children is not None:
                children.close()
            tidy(scripts, [] if result is None else [p for r in result.rescues for p in r.repro_scripts])
    assert result is not None  # the block raised otherwise
    return result


def _gate(ops: list[str] | None) -> Callable[[str, str], bool]:
    """``OptionSet.only``'s test: the catalog's gates for a fusion holding ``ops`` (None: unknown, all pass)."""
    known = catalog()
    return lambda kind, name: ops is None or known.can_affect(kind, name, ops)


class Limits(NamedTuple):
    """How far a rescue searches (`rescue`'s parameters of those names; ``given``: resolved candidates)."""

    max_set_size: int = 2
    budget_s: float = 1800.0
    jobs: int = 1
    confirm: int = 1
    given: list[OptionSet] | None = None
    alpha: float = 0.05
    repeat: int = 5


def _drive(probe: Probe, say: Callable[[str], None], mode: str, checks: tuple[str, ...], env: OptionSet,
           drops: list[str], limits: Limits) -> RescueResult:
    max_set_size, budget_s, jobs, confirm, given, alpha, repeat = limits
    began = time.monotonic()
    validate = "validate" in checks
    say("running the step under nvFuser's defaults (Thunder's own path)"
        + (", each fusion checked by nvFuser's validate" if validate else ""))
    plan: dict[str, OptionSet] = {}
    seen = probe([Plan(plan, validate=validate)])[0]
    doubts: list[str] = []  # why a cure is not proven: the proof is then not run
    notes = ["a rescue found for these inputs (shapes, dtypes) says nothing of others: run it again for them"]
    if "memcheck" in checks and seen["failure"] is None and repeat > 1:
        # A clean memcheck run of a flaky fault proves little: repeat it until one is not clean.
        say(f"memcheck found nothing: {repeat - 1} more runs")
        rerun = runs(probe, [Plan(plan, validate=validate)] * (repeat - 1), jobs)
        seen = next((o for o in rerun if o["failure"] is not None), seen)
        if seen["failure"] is None:
            notes.append(f"memcheck found no error in {repeat} runs of the defaults (repeat= for more; a fault that "
                         "appears only after several steps needs a FUNCTION that runs those steps)")
    clean = 0  # clean whole runs with the cures so far: the last re-run counts toward the proof
    fusions = [f["id"] for f in seen["fusions"]]
    info = {f["id"]: f for f in seen["fusions"]}
    rescues: list[FusionRescue] = []
    unattributed = None
    if env:
        notes.append(f"the environment sets {env.as_shell()}: those options apply to every fusion and cannot be "
                     "taken away per fusion" + ("" if drops else " (in-process probes cannot run without them)"))
    routable: dict[str, dict[str, Any]] = {}  # fusions that raised and ran in PyTorch: cured by options or routed

    def rescue_one(fusion: str, failure: dict[str, Any], seen: dict[str, Any],
                   ran: dict[str, Any] | None = None, expected: bool = False) -> FusionRescue:
        """The search for one failing fusion (the cures so far in ``plan``), its cure confirmed; ``ran``: a fresh
        run of the defaults made already. ``expected``: only `expected_sets` (after a proven PyTorch route)."""
        say(f"{fusion}: {failure['kind']}: {first_line_of(failure['line'])[:160]}")
        # The environment's options that cause it: without them it runs.
        causes = [v for v in drops if not fails_at(probe([Plan(plan, (v,), validate and [fusion])])[0], fusion)]
        fused = info.get(fusion) or {"ops": None, "own": {}}
        taken = options_from(fused.get("own") or {}) | env
        message = f"{failure['line']}\n{failure.get('detail', '')}"
        sets = (expected_sets if expected else candidates)(fused["ops"], taken, max_set_size, message) \
            if given is None else [o for o in given if len(o.enable) + len(o.disable) <= max_set_size
                                   and o.only(_gate(fused["ops"])) == o]
        repro: list[str] = list(failure.get("repro") or seen.get("repro", []))  # the defaults' failure first

        def cures(batch: list[OptionSet], fresh: bool = False) -> list[tuple[bool, str]]:
            seen_now = probe([Plan({**plan, fusion: options}, validate=validate and [fusion], fresh=fresh)
                              for options in batch])
            out = []
            for options, observed in zip(batch, seen_now, strict=True):
                bad = fails_at(observed, fusion)
                repro.extend(observed.get("repro", []))
                say(f"  {fusion} with {options.label()}: {'still fails' if bad else 'cured'}")
                stopped = "the step ended before the fusion ran"  # a program that exits early: no verdict on it
                out.append((not bad, (observed["failure"] or {"line": stopped})["line"][:200] if bad else ""))
            return out

        def searched(failed: int, reached: int) -> tuple[OptionSet | None, list[Attempt], bool, int | None, str]:
            """The search, its cure confirmed as often as the defaults' failures ask (module docstring)."""
            needed, rate = (None, "") if 0 < failed == reached else how_sure(failed, reached, alpha, len(sets))
            wanted = confirm if needed is None or needed - 1 > _MOST_RUNS else max(confirm, needed - 1)
            if rate:
                notes.append(f"{fusion} is {rate}")
                say(f"{fusion}: {rate}; " + (f"a cure must pass {needed} runs" if needed and wanted >= needed - 1
                                             else "no cure can be proven in as many runs as are tried"))
            say(f"{fusion}: trying {len(sets)} option sets, {jobs} at a time")
            remaining = budget_s - (time.monotonic() - began)
            # A cure must hold in a fresh process (wrong numbers and memory errors can depend on allocation history).
            return (*search(sets, cures, jobs=jobs, confirm=wanted, budget_s=max(remaining, 0),
                            again=functools.partial(cures, fresh=True)), needed, rate)

        failed, reached = failure_rate(probe, plan, fusion, validate, 1, repeat, jobs, ran)
        cure, attempts, out_of_budget, needed, rate = searched(failed, reached)
        last = attempts
        if 0 < failed == reached and any(a.detail.startswith("confirm") and not a.cured for a in attempts):
            # A set cured one run and failed the next: a deterministic failure does not do that, a flaky one does.
            extra = failure_rate(probe, plan, fusion, validate, repeat, repeat, jobs)
            failed, reached = failed + extra[0], reached + extra[1]
            if failed < reached:
                cure, last, out_of_budget, needed, rate = searched(failed, reached)
                attempts = attempts + last
        sure = ""
        if cure is not None and not 0 < failed == reached:
            clean = sum(a.cured for a in last if a.options == cure)
            over = f"over {len(sets)} candidate{'s' * (len(sets) != 1)}"
            sure = (f"proven at alpha={alpha:g} {over}: {clean} clean runs; {rate}"
                    if needed is not None and clean >= needed else
                    f"NOT statistically proven: {clean} clean runs; {rate}; "
                    + (f"a proof at alpha={alpha:g} {over} needs {needed}" if needed else
                       "no number of runs proves a cure of a failure that did not fail again"))
            if not sure.startswith("proven"):
                doubts.append(f"{fusion}: {sure}")
        return FusionRescue(fusion, Failure(fusion, failure["kind"], first_line_of(failure["line"]),
                                            failure.get("detail", "")), cure, tuple(attempts), tuple(causes),
                            out_of_budget, tuple(dict.fromkeys(repro))[:1], sure=sure)

    def run_again() -> dict[str, Any]:
        nonlocal clean
        seen = probe([Plan(plan, validate=validate)])[0]
        clean = 1 if clean_run(seen, set(routable)) else 0
        for f in seen["fusions"]:
            info.setdefault(f["id"], f)
            if f["id"] not in fusions:
                fusions.append(f["id"])
        return seen

    # 1. Failures the escape cannot get past (faults, hangs, wrong numbers, memory errors, the step outside its
    # fusions), one after another; a fusion that raised and ran in PyTorch is kept for after the route's proof.
    stopped = False
    while (failure := next_failure(seen, plan, routable)) is not None:
        fusion = failure["fusion"]
        if fusion in plan:  # a cure that does not hold in this run: said on that fusion
            again = f"it failed again with its cure, in the run with the cures so far: {failure['line'][:200]}"
            rescues = [dataclasses.replace(r, sure=again) if r.fusion == fusion else r for r in rescues]
            doubts.append(f"{fusion}: {again}")
            stopped = True
            break
        if fusion is None:  # nothing to search on: say so
            unattributed = Failure(fusion, failure["kind"], failure["line"], failure.get("detail", ""))
            stopped = True
            break
        rescue_ = rescue_one(fusion, failure, seen)
        rescues.append(rescue_)
        if rescue_.cure is None:
            say(f"{fusion}: no cure" + (" (time budget spent)" if rescue_.out_of_budget else ""))
            stopped = True
            break
        plan[fusion] = rescue_.cure
        say(f"{fusion}: cured by {rescue_.cure.label()}; running the step again with the cures so far")
        seen = run_again()
    routed: dict[str, str] = {}  # per fusion the route proved for, its cost
    if routable and not stopped:
        # 2. The route first, so that a usable line does not wait for the search: the whole step, fresh, with the
        # fusions that raise in PyTorch (and the option cures so far), against the reference if one is given.
        say(f"{', '.join(routable)}: raised and ran in PyTorch; proving that route (on_error='torch')")
        proof_run = run_again()
        if clean:
            routed = {f: cost(proof_run, f) for f in routable}
            say("usable now: " + RescueResult(tuple(fusions), tuple(
                [*rescues, *(FusionRescue(f, Failure(f, "raise", ""), None, route=True) for f in routable)])).line())
        else:
            say(f"the route fails: {route_failure(proof_run, set(routable))[:160]}")
        # 3. Option cures, within the budget: a fusion with one keeps nvFuser; one without is routed.
        found = [rescue_one(f, failure, {}, proof_run, expected=bool(routed)) for f, failure in list(routable.items())]
        plan.update((r.fusion, r.cure) for r in found if r.cure is not None)
        remaining = {r.fusion for r in found if r.cure is None}
        if len(remaining) < len(found):
            seen = probe([Plan(plan, validate=validate)])[0]  # the combined line: the proof's first run
            if not routed and remaining and clean_run(seen, remaining):  # the route holds once the others are cured
                routed = {f: cost(seen, f) for f in remaining}
            for failure in failures_of(seen):  # a cure that does not hold in this run: said on that fusion
                if failure["fusion"] in plan:
                    again = f"it failed again with its cure, in the run with the cures so far: {failure['line'][:200]}"
                    found = [dataclasses.replace(r, sure=again) if r.fusion == failure["fusion"] else r
                             for r in found]
                    doubts.append(f"{failure['fusion']}: {again}")
                    break
        else:
            seen = proof_run
        if remaining - set(routed):
            notes.append(f"the PyTorch route was not proven: {route_failure(seen, remaining)[:300]}")
        for r in found:
            if r.cure is not None:
                say(f"{r.fusion}: cured by {r.cure.label()}")
            elif r.fusion in routed:
                say(f"{r.fusion}: routed to PyTorch")
            else:
                say(f"{r.fusion}: no cure, and the route did not pass")
        rescues += [dataclasses.replace(r, route=True, cost=routed[r.fusion]) if r.cure is None and r.fusion in routed
                    else r for r in found]
        routable = {f: v for f, v in routable.items() if f in remaining and f in routed}
        clean = 1 if clean_run(seen, set(routable)) else 0
    order = {f: i for i, f in enumerate(fusions)}
    rescues.sort(key=lambda r: order.get(r.fusion, len(order)))
    proved, proof = None, ""
    if doubts:  # a run more proves nothing a statistical proof did not
        proved, proof = False, doubts[0]
    elif (plan or routed) and rescues and all(r.rescued for r in rescues) and unattributed is None:
        more = confirm + 1 - clean  # the clean re-run with every cure is the proof's first run
        say(f"proving the map: {more} more runs" if more else "proved by the run with every cure")
        finals = [seen] * clean + (probe([Plan(plan, validate=validate)] * more) if more else [])
        broken = [route_failure(o, set(routable)) for o in finals if not clean_run(o, set(routable))]
        proved = not broken
        proof = (f"{len(finals)} runs clean" + (", matching the reference" if "reference" in checks else "")
                 + (f" ({len(routable)} fusion{'s' * (len(routable) != 1)} in PyTorch)" if routable else "")
                 if proved else f"{len(broken)} of {len(finals)} runs failed: {broken[0][:200]}")
    # As the process that ran the step loaded them (a child may load another Thunder).
    versions = dict(seen.get("versions") or loaded_versions())
    rescues = [with_issue(r, versions) for r in rescues]
    if any(r.env_cause for r in rescues):
        notes.append("a fusion fails only with an NVFUSER_* variable of the environment: change it (its options "
                     "reach every fusion); the cure shown, if any, works with it set")
    if any(not r.rescued for r in rescues):
        notes.append("on_error='fallback' is no rescue here: it falls back to the defaults, which are what fails")
    if validate and seen.get("validate") == NO_VALIDATE:
        notes.append("the installed nvFuser frontend has no FusionDefinition.validate: wrong numbers are checked "
                     "for the whole step only (against its reference)")
    elif validate and seen.get("unvalidated"):
        skipped = seen["unvalidated"]
        notes.append(f"not validated per fusion ({len(skipped)}): " + "; ".join(
            f"{f}: {why}" for f, why in list(skipped.items())[:3]) + ("; ..." if len(skipped) > 3 else ""))
    result = RescueResult(tuple(fusions), tuple(rescues), unattributed, proved, proof, mode, checks,
                          time.monotonic() - began, tuple(notes), versions)
    say("done: " + ("nothing to rescue" if result.healthy else "rescued" if result.rescued else "not rescued"))
    return result

