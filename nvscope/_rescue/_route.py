"""What the rescue reads from its probes' observations: whether a fusion failed (`fails_at`), how often the defaults
fail it (`failure_rate`), and for the PyTorch route (``on_error="torch"``) which failures it passed, which the search
must take in turn, and whether a run with some fusions in PyTorch is clean and what they cost there."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nvscope._core import OptionSet
from nvscope._rescue._probe import Plan

__all__ = ["clean_run", "cost", "escaped_failures", "failed_there", "fails_at", "failure_rate", "failures_of",
           "first_line_of", "next_failure", "reached_in", "route_failure", "runs"]


Probe = Callable[[list[Plan]], list[dict[str, Any]]]


def fails_at(observation: dict[str, Any], fusion: str) -> bool:
    """Whether ``fusion`` failed in the probe (whatever other fusions did), never ran (no proof of a cure), or the
    step failed with no fusion named (turning an exception into wrong numbers cures nothing)."""
    failure = observation["failure"]
    return (not reached_in(observation, fusion) or failed_there(observation, fusion)
            or (failure is not None and failure["fusion"] is None))


def reached_in(observation: dict[str, Any], fusion: str) -> bool:
    return any(f["id"] == fusion for f in observation["fusions"])


def failed_there(observation: dict[str, Any], fusion: str) -> bool:
    return fusion in observation.get("failed", ()) or any(f["fusion"] == fusion for f in failures_of(observation))


def runs(probe: Probe, plans: list[Plan], jobs: int) -> list[dict[str, Any]]:
    """The plans' observations, ``jobs`` probes at a time (a target's probes start at once)."""
    return [o for i in range(0, len(plans), jobs) for o in probe(plans[i:i + jobs])]


def failure_rate(probe: Probe, plan: dict[str, OptionSet], fusion: str, validate: bool, first: int, most: int,
                 jobs: int, ran: dict[str, Any] | None = None) -> tuple[int, int]:
    """How often the step with the cures so far fails at ``fusion`` in fresh runs: (failures, runs that reached it),
    over ``first`` runs, or ``most`` once one of them did not fail there. Runs that stop before it count for neither."""
    failed = reached = done = 0
    planned = first
    made = [] if ran is None else [ran]  # a fresh run of the defaults made already (the route's proof): the first
    while done < planned:
        for seen in made or runs(probe, [Plan(plan, validate=validate)] * min(jobs, planned - done), jobs):
            done += 1
            reached += reached_in(seen, fusion)
            failed += reached_in(seen, fusion) and failed_there(seen, fusion)
        made = []
        if done == first and not failed == reached == done:
            planned = max(most, first)
    return failed, reached


def failures_of(observation: dict[str, Any]) -> list[dict[str, Any]]:
    """Every failure of a probe, in the order they came (a model's probe may give only the first)."""
    failure = observation["failure"]
    return list(observation.get("failures") or ([failure] if failure is not None else []))


def escaped_failures(observation: dict[str, Any], failure: dict[str, Any]) -> bool:
    """Whether ``failure`` is a fusion that raised and ran in PyTorch (``on_error="torch"``) in that probe."""
    return failure["kind"] == "raise" and failure["fusion"] in observation.get("escaped", ())


def next_failure(seen: dict[str, Any], plan: dict[str, OptionSet], routable: dict[str, dict[str, Any]]
                 ) -> dict[str, Any] | None:
    """The first failure the escape cannot get past, not yet cured; the fusions that raised and ran in PyTorch are
    added to ``routable`` on the way (a reference that differs while some ran there: the route's proof judges it)."""
    out = None
    for failure in failures_of(seen):
        fusion = failure["fusion"]
        if escaped_failures(seen, failure) and fusion not in plan:
            routable.setdefault(fusion, failure)
        elif failure["kind"] == "numbers" and fusion is None and seen.get("escaped"):
            continue
        elif out is None:
            out = failure
    return out


def clean_run(observation: dict[str, Any], routes: set[str]) -> bool:
    """Whether a run with the cures so far is clean: no failure but fusions of ``routes`` that ran in PyTorch, and
    the reference matched where one was given."""
    return observation.get("matched") is not False and all(
        escaped_failures(observation, f) and f["fusion"] in routes for f in failures_of(observation))


def route_failure(observation: dict[str, Any], routes: set[str]) -> str:
    """What kept a run from being clean (`clean_run`), in a line."""
    for failure in failures_of(observation):
        if not (escaped_failures(observation, failure) and failure["fusion"] in routes):
            return (f"{failure['fusion']}: " if failure["fusion"] else "") + first_line_of(failure["line"])
    return f"the step's result differs from its reference: {observation.get('numerics', '')}"


def cost(observation: dict[str, Any], fusion: str) -> str:
    """A routed fusion's cost, from the route's proof: its PyTorch time in one call (its first) against the step's."""
    ms, step = (observation.get("torch_ms") or {}).get(fusion), observation.get("step_ms")
    if ms is None or not step:
        return "not measured"
    return f"{ms:.2f} ms in PyTorch, {100 * ms / step:.0f}% of the step's {step:.1f} ms (one run, its first call)"


def first_line_of(line: str) -> str:
    """A failure's first line without the note nvscope adds under a scope."""
    return re.sub(r" \(nvscope: [^()]*(\([^()]*\)[^()]*)*\)$", "", line)

