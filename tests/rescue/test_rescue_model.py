"""The rescue's search against a tiny reference model (Hypothesis): random steps of fusions, each healthy or failing
(it raises, kills the process, or computes wrong numbers) and cured by random option sets, random candidate lists
and option costs. The rescue must find, per failing fusion, the first candidate (in the order given, within the set
size) that cures it and cures again (sets that cure only their first run are not cures; sets under which the step
stops before the fusion prove nothing); route to PyTorch a fusion that raises and has no option cure, and never one
that faults or computes wrong numbers (those stop the rescue at the first without a cure); leave every passing
fusion on its defaults; and start no probe once its time budget is spent. Only the search's own probes may run in a
long-lived worker: the diagnosis, its check, each confirmation and the proof ask for a fresh process. The catalog's
candidates: sizes never decrease, every option passes the fusion's ops gate and none is already in effect, the
options the message names and then the escape hatches come first."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nvscope import OptionSet
from nvscope._core import catalog
from nvscope._rescue._probe import Plan
from nvscope._rescue._rescue import Limits, _drive
from nvscope._rescue._search import ESCAPE_HATCHES, candidates, search

ITEMS = ["-resize_scheduler", "-infer_contiguity", "-greedy_scheduler", "fast_math", "id_model"]


def options(items: frozenset[str]) -> OptionSet:
    return OptionSet([i for i in items if not i.startswith("-")], [i[1:] for i in items if i.startswith("-")])


def items_of(o: OptionSet) -> frozenset[str]:
    return frozenset([*o.enable, *(f"-{n}" for n in o.disable)])


item_sets = st.frozensets(st.sampled_from(ITEMS), min_size=1, max_size=3)
HOWS = ("raise", "fault", "numbers")
# A fusion: healthy (None), or how it goes wrong under its defaults and the sets that cure it.
failing = st.tuples(st.sampled_from(HOWS), st.lists(item_sets, min_size=0, max_size=2))
steps = st.lists(st.one_of(st.none(), failing), min_size=1, max_size=5)


def model_probe(fusions: list[tuple[str, list[frozenset[str]]] | None], log: list[Plan] | None = None,
                once: frozenset[frozenset[str]] = frozenset(), stops: frozenset[frozenset[str]] = frozenset()) -> Any:
    """The step: fusions in order; one with cures fails unless its options hold one of them. How: "raise" (under
    ``on_error="torch"``, as every probe runs, it runs in PyTorch and the step goes on),
    "fault" (the process dies: the step stops), "numbers" (wrong numbers: the step goes on). A set of ``once`` on a
    failing fusion cures its first run only (then fails: confirmation matters); with a set of ``stops`` on it the
    step ends cleanly before the fusion runs (the probe never reached it). ``log`` gets every plan run."""
    runs: Counter[tuple[str, frozenset[str]]] = Counter()

    def run(plans: list[Plan]) -> list[dict[str, Any]]:
        out = []
        for plan in plans:
            if log is not None:
                log.append(plan)
            ran: list[dict[str, Any]] = []
            failures: list[dict[str, Any]] = []
            escaped: list[str] = []
            for i, fusion in enumerate(fusions):
                fid = f"forward/f{i}"
                given_items = items_of(plan.options.get(fid, OptionSet()))
                cure = None if fusion is None else fusion[1]
                if cure is not None and given_items in stops and not any(c <= given_items for c in cure):
                    break
                ran.append({"id": fid, "ops": None, "own": {}})
                runs[fid, given_items] += 1
                if fusion is not None and not any(c <= given_items for c in fusion[1]) and not (
                        given_items in once and runs[fid, given_items] == 1):
                    how = fusion[0]
                    failures.append({"fusion": fid, "kind": how, "line": f"RuntimeError: {how}", "detail": ""})
                    if how == "raise":
                        escaped.append(fid)
                    elif how != "numbers":
                        break
            out.append({"fusions": ran, "failure": failures[0] if failures else None, "failures": failures,
                        "escaped": escaped, "repro": []})
        return out
    return run


@settings(max_examples=60, deadline=None)
@given(fusions=steps, order=st.lists(item_sets, min_size=1, max_size=8, unique=True), max_size=st.integers(1, 3),
       jobs=st.integers(1, 3), once=st.frozensets(item_sets, max_size=4), stops=st.frozensets(item_sets, max_size=3))
def test_rescue_matches_the_reference_model(fusions: list[tuple[str, list[frozenset[str]]] | None],
                                            order: list[frozenset[str]], max_size: int, jobs: int,
                                            once: frozenset[frozenset[str]], stops: frozenset[frozenset[str]]) -> None:
    sets = [options(s) for s in order]
    log: list[Plan] = []
    result = _drive(model_probe(fusions, log, once, stops), lambda m: None, "model", ("raises",), OptionSet(), [],
                    Limits(max_size, 1e9, jobs, 1, sets))
    usable = [s for s in order if len(s) <= max_size]

    def first_cure(cure: list[frozenset[str]]) -> OptionSet | None:
        # Only a set that cures the fusion every time is a cure (a set in `once` cures one run, one in `stops`
        # none: the step ends before the fusion).
        first = next((s for s in usable if any(c <= s for c in cure)), None)
        return None if first is None else options(first)

    # The reference: the failures the escape cannot get past (faults, wrong numbers) one after another, stopping at
    # the first without an option cure; then every fusion that raises gets its first option cure, or the route.
    # None that passes is routed.
    expected: list[tuple[str, OptionSet | None, bool]] = []
    stopped = False
    for i, fusion in enumerate(fusions):
        if fusion is not None and fusion[0] != "raise":
            expected.append((f"forward/f{i}", first_cure(fusion[1]), False))
            if expected[-1][1] is None:
                stopped = True
                break
    if not stopped:
        expected = [(f"forward/f{i}", first_cure(f[1]), f[0] == "raise" and first_cure(f[1]) is None)
                    if f[0] == "raise" else next(e for e in expected if e[0] == f"forward/f{i}")
                    for i, f in enumerate(fusions) if f is not None]
    assert [(r.fusion, r.cure, r.route) for r in result.rescues] == expected
    cured = [(f, o) for f, o, _ in expected if o is not None]
    routed = [f for f, _, route in expected if route]
    # The selector map: each cure on exactly the fusions it cures; every other fusion keeps its defaults.
    assert sorted((f, o) for o, fs in result.groups() for f in fs) == sorted(cured)
    assert list(result.routes) == routed
    assert ('on_error="torch"' in result.line()) is bool(routed)
    assert result.exit_code() == (0 if not stopped else 1)
    assert result.proved is (True if expected and not stopped else None)
    for r in result.rescues:  # minimality: nothing tried before the cure, in the order given, cured and held
        tried = [a for a in r.attempts if not a.detail.startswith("confirm")]
        before = tried if r.cure is None else tried[:[a.options for a in tried].index(r.cure)]
        failed_again = {a.options for a in r.attempts if a.detail.startswith("confirm") and not a.cured}
        assert all(a.options in failed_again for a in before if a.cured)
    # Where each probe may run: the search's tries (the searched fusion added last to the cures so far) in workers;
    # the diagnosis, each confirmation, each re-run with the cures so far and the proof in fresh processes. Every
    # probe runs under on_error="torch".
    searched = {r.fusion: [a.options for a in r.attempts if not a.detail.startswith("confirm")]
                for r in result.rescues}
    confirmed = [a for r in result.rescues for a in r.attempts if a.detail.startswith("confirm")]
    assert log[0].fresh and not log[0].options
    tries: dict[str, list[OptionSet]] = {}
    for p in log:
        if not p.fresh:
            tries.setdefault(list(p.options)[-1], []).append(list(p.options.values())[-1])
    assert tries == {f: tried for f, tried in searched.items() if tried}
    # The diagnosis; per failing fusion one more run of the defaults with the cures so far (it fails again: the
    # model's failures are deterministic; for those that raise, the route's proof is that run), and 5 (repeat=5)
    # where a set cured once and failed its confirmation (a flaky failure would do that); each confirmation; a re-
    # run after each cure of a fault or wrong numbers; the route's proof (where a fusion raised), a run of the
    # combined line (where such a fusion has an option cure); the proof.
    doubted = sum(any(a.detail.startswith("confirm") and not a.cured for a in r.attempts) for r in result.rescues)
    how = {f"forward/f{i}": f[0] for i, f in enumerate(fusions) if f is not None}
    raising = [e for e in expected if how[e[0]] == "raise"]
    in_order = sum(1 for f, o, _ in expected if o is not None and (f, o, False) not in raising)
    assert sum(p.fresh for p in log) == (1 + len(expected) - len(raising) + 5 * doubted + len(confirmed) + in_order
                                         + bool(raising) + any(o is not None for _, o, _ in raising)
                                         + (result.proved is not None))


@settings(max_examples=80, deadline=None)
@given(order=st.lists(item_sets, min_size=1, max_size=10, unique=True), cure=st.lists(item_sets, max_size=2),
       once=st.frozensets(item_sets, max_size=4), costs=st.dictionaries(st.sampled_from(ITEMS), st.floats(0.1, 5.0)),
       budget=st.floats(0.5, 30.0), jobs=st.integers(1, 4), confirm=st.integers(0, 3))
def test_search_takes_the_first_cure_and_starts_nothing_past_its_budget(
        order: list[frozenset[str]], cure: list[frozenset[str]], once: frozenset[frozenset[str]],
        costs: dict[str, float], budget: float, jobs: int, confirm: int) -> None:
    now, started = [0.0], []
    runs: Counter[frozenset[str]] = Counter()

    def cures(batch: list[OptionSet]) -> list[tuple[bool, str]]:
        started.append(now[0])
        now[0] += max(sum(costs.get(i, 1.0) for i in items_of(o)) for o in batch)  # a batch runs at once
        out = []
        for o in batch:
            runs[items_of(o)] += 1
            out.append((any(c <= items_of(o) for c in cure) or (items_of(o) in once and runs[items_of(o)] == 1), ""))
        return out

    sets = [options(s) for s in order]
    found, attempts, out_of_budget = search(sets, cures, jobs=jobs, confirm=confirm, budget_s=budget,
                                            clock=lambda: now[0])
    tried = [a.options for a in attempts if not a.detail.startswith("confirm")]
    assert tried == sets[:len(tried)]  # in order, none skipped
    assert all(t < budget for t in started)  # no batch, of tries or of confirmations, starts past the budget
    # A set cures when it passes its try and `confirm` more runs: one of `once` passes its first run only.
    real = next((o for o in sets if any(c <= items_of(o) for c in cure)
                 or (items_of(o) in once and confirm == 0)), None)
    if found is not None:
        assert found == real and not out_of_budget
        confirmed = [a for a in attempts if a.detail.startswith("confirm") and a.options == found]
        assert len(confirmed) == confirm and all(a.cured for a in confirmed)
    else:
        assert real is None or real not in tried or out_of_budget  # a cure tried is taken unless time ran out
        # The budget spent before a cure, with sets or a cure's confirmations left: said; else every set was tried.
        if now[0] >= budget and (len(tried) < len(sets) or real in tried):
            assert out_of_budget
        if out_of_budget:
            assert now[0] >= budget
        else:
            assert tried == sets


CATALOG_OPS = ["slice", "cat", "pad", "linear", "matmul", "sum", "welford", "topk", "scatter", "gather", "add"]


@settings(max_examples=25, deadline=None)
@given(ops=st.one_of(st.none(), st.frozensets(st.sampled_from(CATALOG_OPS), max_size=4)), data=st.data(),
       max_size=st.integers(1, 2))
def test_the_catalogs_candidates(ops: frozenset[str] | None, data: st.DataObject, max_size: int) -> None:
    known = catalog()
    usable = sorted((o.kind, o.name) for o in known.options if o.effect == "codegen" and not o.requires_args)
    taken_items = data.draw(st.frozensets(st.sampled_from(usable), max_size=4))
    taken = OptionSet([n for k, n in taken_items if k == "enable"], [n for k, n in taken_items if k == "disable"])
    named = data.draw(st.lists(st.sampled_from(usable), max_size=2, unique=True))
    message = " ".join(f"Use NVFUSER_{k.upper()}={n} to simplify" for k, n in named)
    sets = candidates(ops, taken, max_set_size=max_size, message=message)
    sizes = [len(o.enable) + len(o.disable) for o in sets]
    assert sizes == sorted(sizes) and set(sizes) <= set(range(1, max_size + 1))  # smallest first
    assert len(set(sets)) == len(sets)
    for o in sets:
        for kind, names in (("enable", o.enable), ("disable", o.disable)):
            for name in names:
                assert (kind, name) in usable
                assert ops is None or known.can_affect(kind, name, ops)  # the ops gate
                assert name not in (taken.enable if kind == "enable" else taken.disable)  # not in effect already
        assert not set(o.enable) & set(o.disable)
    singles = [(("enable", min(o.enable)) if o.enable else ("disable", min(o.disable))) for o in sets
               if len(o.enable) + len(o.disable) == 1]
    offered = [i for i in dict.fromkeys([*named, *ESCAPE_HATCHES]) if i in singles]
    assert singles[:len(offered)] == offered  # the message's options, then the escape hatches, first
    everything = {(k, n) for k, n in usable if (ops is None or known.can_affect(k, n, ops))
                  and n not in (taken.enable if k == "enable" else taken.disable)}
    assert set(singles) == everything  # every usable single is offered
