"""The bisect's search (``_bisect._minimize`` and ``_bisect._drive.drive``) against pure tests: exact probe counts,
1-minimality for any test, and the O(k log n) budget, over random culprits (Hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from nvscope import OptionSet
from nvscope._bisect._drive import Outcome, drive
from nvscope._bisect._minimize import minimize, probe_budget


def counting(bad_sets: list[frozenset[int]]) -> tuple[list[list[int]], object]:
    calls: list[list[int]] = []

    def bad(subset: list[int]) -> bool:
        calls.append(subset)
        return any(s <= set(subset) for s in bad_sets)

    return calls, bad


def test_one_culprit_among_64_takes_log2_plus_one_tests() -> None:
    calls, bad = counting([frozenset({37})])
    assert minimize(list(range(64)), bad) == [37]  # type: ignore[arg-type]
    assert len(calls) == 7  # 6 to binary-search 64 prefixes, 1 to see that 37 alone fails; no verification needed
    assert all(c == sorted(c) for c in calls)  # subsets come in the items' order


def test_a_pair_that_only_fails_together() -> None:
    calls, bad = counting([frozenset({3, 12})])
    assert minimize(list(range(16)), bad) == [3, 12]  # type: ignore[arg-type]
    assert len(calls) <= probe_budget(16, 2)


def test_a_test_that_is_not_monotone_still_gets_a_1_minimal_result() -> None:
    # Bad with {0, 1} or with {5} alone, but NOT with all of {0, 1, 5} (the options cancel out): not monotone.
    def bad(subset: list[int]) -> bool:
        s = set(subset)
        return s != {0, 1, 5} and ({0, 1} <= s or 5 in s)

    items = [0, 1, 2, 3, 4, 5, 6, 7]
    result = minimize(items, bad)
    assert bad(result)
    assert all(not bad([x for x in result if x != e]) for e in result)


@st.composite
def culprits(draw: st.DrawFn) -> tuple[int, list[frozenset[int]]]:
    n = draw(st.integers(1, 80))
    sets = draw(st.lists(st.frozensets(st.integers(0, n - 1), min_size=1, max_size=3), min_size=1, max_size=4))
    return n, sets


@given(culprits())
@settings(max_examples=300, deadline=None)
def test_minimize_is_1_minimal_within_the_budget(case: tuple[int, list[frozenset[int]]]) -> None:
    n, bad_sets = case
    calls, bad = counting(bad_sets)
    result = minimize(list(range(n)), bad)  # type: ignore[arg-type]
    used = len(calls)
    assert any(s <= set(result) for s in bad_sets)
    for e in result:
        assert not any(s <= set(result) - {e} for s in bad_sets), (result, e)
    assert used <= probe_budget(n, len(result))
    assert used <= len(result) * (math.ceil(math.log2(n)) + 2) if n > 1 else used <= 1


# --- drive: options x fusions -----------------------------------------------------------------------------------------

OPTIONS = ["fast_math", "fuse_matmul", "tma_pointwise", "ws_normalization", "-fma", "-matmul_expr_eval"]


def step_oracle(culprit_pairs: list[tuple[frozenset[str], str]]) -> tuple[list[tuple[OptionSet, tuple[str, ...]]],
                                                                          object]:
    """A step that fails when some fusion runs with all the options of one of its culprit sets."""
    probes: list[tuple[OptionSet, tuple[str, ...]]] = []

    def run(options: OptionSet, fusions: tuple[str, ...] | None) -> Outcome:
        assert fusions is not None
        probes.append((options, fusions))
        names = set(options.enable) | {f"-{d}" for d in options.disable}
        for needed, fusion in culprit_pairs:
            if fusion in fusions and needed <= names:
                return Outcome(True, f"RuntimeError: {fusion} broke")
        return Outcome(False)

    return probes, run


def test_drive_names_the_pair_that_breaks_one_backward_fusion() -> None:
    fusions = [f"forward/nvFusion{i}" for i in range(6)] + [f"backward/nvFusion{i}" for i in range(10)]
    given_options = OptionSet(["fuse_matmul", "fast_math"], ["matmul_expr_eval"])
    probes, run = step_oracle([(frozenset({"fuse_matmul", "-matmul_expr_eval"}), "backward/nvFusion3")])
    lines: list[str] = []
    result = drive(given_options, fusions, run, lines.append, "it raises")  # type: ignore[arg-type]
    assert result.reproduced
    assert result.options == OptionSet(["fuse_matmul"], ["matmul_expr_eval"])
    assert result.fusions == ("backward/nvFusion3",)
    assert result.others_clean is True
    assert result.line() == ("nv_options(enable=['fuse_matmul'], disable=['matmul_expr_eval'], "
                             "fusions=['backward/nvFusion3'])")
    assert result.probes == len(probes) == len(lines)  # one progress line per probe, no probe run twice
    assert len(set(probes)) == len(probes)
    assert result.probes < 3 * 16  # far fewer than options x fusions
    assert lines[0].startswith("probe 1 (confirm): ")
    assert result.log[-1].stage == "rest" and result.log[-1].fusions == tuple(f for f in fusions
                                                                              if f != "backward/nvFusion3")
    assert len(result.culprits) == 1


def test_drive_finds_each_fusion_that_fails_on_its_own() -> None:
    fusions = [f"forward/nvFusion{i}" for i in range(12)]
    probes, run = step_oracle([(frozenset({"fuse_matmul", "-matmul_expr_eval"}), "forward/nvFusion2"),
                               (frozenset({"fast_math"}), "forward/nvFusion9")])
    result = drive(OptionSet(["fuse_matmul", "fast_math"], ["matmul_expr_eval"]), fusions, run, lambda m: None,
                   "it raises")  # type: ignore[arg-type]
    assert [(c.options, c.fusions) for c in result.culprits] == [
        (OptionSet(["fast_math"]), ("forward/nvFusion9",)),  # the options first: fast_math alone breaks the step
        (OptionSet(["fuse_matmul"], ["matmul_expr_eval"]), ("forward/nvFusion2",))]
    assert result.others_clean is True and result.fusions == ("forward/nvFusion9",)
    assert "culprit 2 (among the other fusions): options fuse_matmul,-matmul_expr_eval" in result.report()
    assert len(probes) == result.probes < 3 * 12


def test_drive_reports_a_step_that_does_not_go_wrong() -> None:
    _, run = step_oracle([(frozenset({"fast_math"}), "forward/nvFusion0")])
    result = drive(OptionSet(["tma_pointwise"]), ["forward/nvFusion0"], run, lambda m: None, "it raises")  # type: ignore[arg-type]
    assert not result.reproduced and result.probes == 1 and result.fusions == () and result.options == OptionSet()
    assert "not reproduced" in result.report()


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_drive_is_1_minimal_in_options_and_fusions_within_o_k_log_n(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 48), label="fusions")
    fusions = [f"forward/nvFusion{i}" for i in range(n)]
    m = data.draw(st.integers(1, len(OPTIONS)), label="options")
    names = OPTIONS[:m]
    pairs = data.draw(st.lists(st.tuples(st.frozensets(st.sampled_from(names), min_size=1, max_size=2),
                                         st.sampled_from(fusions)), min_size=1, max_size=4), label="culprits")
    given_options = OptionSet([x for x in names if not x.startswith("-")], [x[1:] for x in names if x.startswith("-")])
    _, run = step_oracle(pairs)
    result = drive(given_options, fusions, run, lambda m: None, "it raises")  # type: ignore[arg-type]
    assert result.reproduced

    def bad(options: OptionSet, selected: tuple[str, ...]) -> bool:
        return run(options, selected).bad  # type: ignore[attr-defined,no-any-return]

    budget, k = 1, 0
    for culprit in result.culprits:
        chosen = culprit.options
        assert bad(chosen, culprit.fusions)
        items = [*chosen.enable_list(), *(f"-{d}" for d in chosen.disable_list())]
        for item in items:  # removing any one option makes the problem go away (on the culprit fusions)
            fewer = OptionSet([i for i in items if i != item and not i.startswith("-")],
                              [i[1:] for i in items if i != item and i.startswith("-")])
            assert not bad(fewer, culprit.fusions)
        for fusion in culprit.fusions:  # and so does removing any one fusion
            assert not bad(chosen, tuple(f for f in culprit.fusions if f != fusion))
        budget += probe_budget(m, len(items)) + probe_budget(n, len(culprit.fusions)) + len(items) + 2
        k += len(items) + len(culprit.fusions)
    # The culprits account for every pair: the given options on all the other fusions run clean.
    assert result.others_clean in (True, None)
    rest = tuple(f for f in fusions if all(f not in c.fusions for c in result.culprits))
    assert not rest or not bad(given_options, rest)
    assert len({f for c in result.culprits for f in c.fusions}) == sum(len(c.fusions) for c in result.culprits)
    assert result.probes <= budget
    assert result.probes <= 1 + k * (math.ceil(math.log2(max(n, m))) + 4)  # O(k log n), k = culprit options+fusions
