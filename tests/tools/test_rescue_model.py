"""The rescue's search against a tiny reference model (Hypothesis): random steps of fusions, each healthy or cured
by random option sets, random candidate lists and option costs. The rescue must find, per failing fusion in the
order the step meets them, the first candidate (in the order given, within the set size) that cures it; leave every
passing fusion on its defaults; stop at the first fusion without a cure; and stay inside its time budget. Only the
search's own probes may run in a long-lived worker: the diagnosis, each confirmation and the proof ask for a fresh
process."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nvscope import OptionSet
from nvscope._tools._rescue import _drive
from nvscope._tools._rescue_probe import Plan
from nvscope._tools._rescue_search import search

ITEMS = ["-resize_scheduler", "-infer_contiguity", "-greedy_scheduler", "fast_math", "id_model"]


def options(items: frozenset[str]) -> OptionSet:
    return OptionSet([i for i in items if not i.startswith("-")], [i[1:] for i in items if i.startswith("-")])


def items_of(o: OptionSet) -> frozenset[str]:
    return frozenset([*o.enable, *(f"-{n}" for n in o.disable)])


item_sets = st.frozensets(st.sampled_from(ITEMS), min_size=1, max_size=3)
steps = st.lists(st.one_of(st.none(), st.lists(item_sets, min_size=0, max_size=2)), min_size=1, max_size=5)


def model_probe(cures: list[list[frozenset[str]] | None], log: list[Plan] | None = None) -> Any:
    """The step: fusions in order; one with cures fails unless its options hold one of them; the step stops there.
    ``log`` gets every plan run."""
    def run(plans: list[Plan]) -> list[dict[str, Any]]:
        out = []
        for plan in plans:
            if log is not None:
                log.append(plan)
            ran: list[dict[str, Any]] = []
            failure = None
            for i, cure in enumerate(cures):
                fid = f"forward/f{i}"
                ran.append({"id": fid, "ops": None, "own": {}})
                given_items = items_of(plan.options.get(fid, OptionSet()))
                if cure is not None and not any(c <= given_items for c in cure):
                    failure = {"fusion": fid, "kind": "raise", "line": "RuntimeError: boom", "detail": ""}
                    break
            out.append({"fusions": ran, "failure": failure, "repro": []})
        return out
    return run


@settings(max_examples=60, deadline=None)
@given(cures=steps, order=st.lists(item_sets, min_size=1, max_size=8, unique=True), max_size=st.integers(1, 3),
       jobs=st.integers(1, 3))
def test_rescue_matches_the_reference_model(cures: list[list[frozenset[str]] | None],
                                            order: list[frozenset[str]], max_size: int, jobs: int) -> None:
    candidates = [options(s) for s in order]
    log: list[Plan] = []
    result = _drive(model_probe(cures, log), lambda m: None, "model", ("raises",), OptionSet(), [], max_size, 1e9, jobs,
                    1, candidates)
    usable = [s for s in order if len(s) <= max_size]
    expected: list[tuple[str, OptionSet | None]] = []
    for i, cure in enumerate(cures):
        if cure is None:
            continue
        first = next((s for s in usable if any(c <= s for c in cure)), None)
        expected.append((f"forward/f{i}", None if first is None else options(first)))
        if first is None:
            break
    assert [(r.fusion, r.cure) for r in result.rescues] == expected
    cured = [(f, o) for f, o in expected if o is not None]
    # The selector map: each cure on exactly the fusions it cures; every other fusion keeps its defaults.
    assert sorted((f, o) for o, fs in result.groups() for f in fs) == sorted(cured)
    assert result.exit_code() == (0 if all(o is not None for _, o in expected) else 1)
    assert result.proved is (True if cured and len(cured) == len(expected) else None)
    for r in result.rescues:  # minimality: nothing tried before the cure, in the order given, cured
        tried = [a for a in r.attempts if not a.detail.startswith("confirm")]
        before = tried if r.cure is None else tried[:[a.options for a in tried].index(r.cure)]
        assert not any(a.cured for a in before)
    # Where each probe may run: the search's tries (the searched fusion added last to the cures so far) in workers;
    # the diagnosis, each confirmation, each re-run with the cures so far and the proof in fresh processes.
    searched = [(r.fusion, a.options) for r in result.rescues for a in r.attempts if not a.detail.startswith("confirm")]
    confirmed = [a for r in result.rescues for a in r.attempts if a.detail.startswith("confirm")]
    assert log[0].fresh and not log[0].options
    assert [(list(p.options)[-1], list(p.options.values())[-1]) for p in log if not p.fresh] == searched
    assert sum(p.fresh for p in log) == 1 + len(confirmed) + len(cured) + (result.proved is not None)


@settings(max_examples=80, deadline=None)
@given(order=st.lists(item_sets, min_size=1, max_size=10, unique=True), cure=st.lists(item_sets, max_size=2),
       costs=st.dictionaries(st.sampled_from(ITEMS), st.floats(0.1, 5.0)), budget=st.floats(0.5, 30.0),
       jobs=st.integers(1, 4))
def test_search_takes_the_first_cure_within_its_budget(order: list[frozenset[str]], cure: list[frozenset[str]],
                                                       costs: dict[str, float], budget: float, jobs: int) -> None:
    now = [0.0]

    def cures(batch: list[OptionSet]) -> list[tuple[bool, str]]:
        now[0] += max(sum(costs.get(i, 1.0) for i in items_of(o)) for o in batch)  # a batch runs at once
        return [(any(c <= items_of(o) for c in cure), "") for o in batch]

    sets = [options(s) for s in order]
    found, attempts, out_of_budget = search(sets, cures, jobs=jobs, confirm=1, budget_s=budget, clock=lambda: now[0])
    tried = [a.options for a in attempts if a.detail != "confirm"]
    assert tried == sets[:len(tried)]  # in order, none skipped
    first = next((o for o in sets if any(c <= items_of(o) for c in cure)), None)
    if found is not None:
        assert found == first and not out_of_budget
    elif first is not None and first in tried:
        raise AssertionError("a cure was tried and not taken")
    if out_of_budget:
        assert len(tried) < len(sets)
        # It started no batch once the budget was spent.
        assert now[0] - max(sum(costs.get(i, 1.0) for i in items_of(o)) for o in tried[-jobs:]) < budget
