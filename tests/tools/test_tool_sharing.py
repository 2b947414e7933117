"""The tools run the step's defaults shared (issue 38): search, profile, bisect, compare and search_fusions call the
step in ``nv_options(share=True)``, so a step whose fusions repeat compiles once per distinct definition for its
defaults, and each report says, per variant, how many fusions ran, how many definitions were compiled and the seconds
spent compiling. Observed: the fake nvFuser's compiles (``COMPILES``), the results, their text and JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
from nvscope import OptionSet, audit
from nvscope._bisect import BisectResult, bisect
from nvscope._measure import Compiles
from nvscope._profile import ProfileResult, profile
from nvscope._search import SearchResult, search
from nvscope._tools import compare

QUICK = {"rounds": 5, "steps_per_round": 1, "warmup": 1, "progress": False}
DELAY = 0.002  # seconds each fake compile sleeps: a lower bound on what the reports count


class Step:
    """Six layers that print one definition (a linear), one matmul and one add: three distinct definitions for eight
    fusions. fuse_matmul reaches the linears and the matmul, not the add (the catalog's gates)."""

    def __init__(self, double: ThunderDouble) -> None:
        self.double = double
        self.fusions = [double.make_wrapper(f"nvFusion{i}") for i in range(6)]
        self.fusions += [double.make_wrapper("nvFusion6", ops=("matmul",)), double.make_wrapper("nvFusion7",
                                                                                                  ops=("add",))]

    def __call__(self) -> Any:
        x = Tensor((1.0, 2.0))
        for fusion in self.fusions:
            (x,) = fusion(x)
        return x

    def compiles(self) -> list[tuple[str, ...]]:
        """What the fake nvFuser compiled so far: the enable options of each compile."""
        return [c.enable for c in self.double.fe.COMPILES]


@pytest.fixture
def step(monkeypatch: pytest.MonkeyPatch) -> Iterator[Step]:
    reset_nvscope()
    for name in ("NVSCOPE_SHARE", "NVSCOPE_MAX_SHARED", "NVSCOPE_MAX_PARTITIONS", "NVSCOPE_DEV", "NVSCOPE_STRICT"):
        monkeypatch.delenv(name, raising=False)
    double = ThunderDouble(monkeypatch, "direct")
    monkeypatch.setattr(double.fe, "COMPILE_DELAY", DELAY)
    yield Step(double)
    reset_nvscope()


def counted(counts: Compiles | None, fusions: int, definitions: int, unshared: int = 0) -> None:
    assert counts is not None
    assert (counts.fusions, counts.definitions, counts.unshared) == (fusions, definitions, unshared)
    assert counts.seconds >= DELAY * definitions  # each compile sleeps DELAY at least


def test_search_compiles_the_defaults_once_per_distinct_definition(step: Step) -> None:
    result = search(step, candidates=["fuse_matmul"], **QUICK)
    default, candidate = result.default, result["fuse_matmul"]
    counted(default.compiles, 8, 3)
    counted(candidate.compiles, 8, 2)  # the add is not reached: it runs the default's definition, compiled already
    compiled = step.compiles()
    assert sorted(compiled) == [(), (), (), ("fuse_matmul",), ("fuse_matmul",)]  # 3 + 2, for 16 first executions
    assert candidate.status != "failed" and not any("ran its defaults" in n for n in result.notes)
    table = result.table()
    assert "\n  default: 8 fusions, 3 definitions compiled, " in table
    assert "\n  fuse_matmul: 8 fusions, 2 definitions compiled, " in table
    again = SearchResult.from_json(result.to_json())
    assert again == result and again.default.compiles == default.compiles


def test_share_defaults_false_is_thunders_own_path(step: Step) -> None:
    result = search(step, candidates=["fuse_matmul"], share_defaults=False, **QUICK)
    counted(result.default.compiles, 8, 0, unshared=8)
    assert step.compiles()[:8] == [()] * 8  # one compile per fusion, as Thunder compiles them
    assert "8 fusions, 0 definitions compiled, " in result.table()
    assert "(8 on their own path, whose compiles are not counted)" in result.table()
    with pytest.raises(TypeError, match="share_defaults= takes True or False"):
        search(step, candidates=["fuse_matmul"], share_defaults="no", **QUICK)  # type: ignore[arg-type]


def test_profile_reports_both_first_calls_and_what_the_options_reached(step: Step) -> None:
    result = profile(step, enable=["fuse_matmul"], **QUICK)
    counted(result.default_compiles, 8, 3)
    counted(result.options_compiles, 8, 2)
    assert [r.reached for r in result.rows] == [True] * 7 + [False]  # the add ran its own options, shared
    assert sorted(step.compiles()) == [(), (), (), ("fuse_matmul",), ("fuse_matmul",)]
    assert "\n  defaults: 8 fusions, 3 definitions compiled, " in result.table()
    assert "\n  fuse_matmul: 8 fusions, 2 definitions compiled, " in result.table()
    assert ProfileResult.from_json(result.to_json()) == result


def test_bisect_in_process_shares_the_defaults_of_the_fusions_a_probe_leaves_alone(
        step: Step, monkeypatch: pytest.MonkeyPatch) -> None:
    step.fusions[3] = step.double.make_wrapper("nvFusion3", breaks_with="fuse_matmul")  # a fourth definition
    result = bisect(step, enable=["fuse_matmul"], progress=False)
    assert result.fusions == ("forward/nvFusion3",)
    counted(result.default_compiles, 8, 4)
    assert step.compiles()[:4] == [()] * 4  # the default's: one per distinct definition
    assert all(p.compiles is not None and p.compiles.fusions >= 4 for p in result.log)
    # Every compile after the default's is under the options: the fusions a probe does not select run the
    # definitions the default compiled.
    assert all(enable == ("fuse_matmul",) for enable in step.compiles()[4:])
    report = result.report()
    assert "\n  defaults: 8 fusions, 4 definitions compiled, " in report
    assert all(f"\n  probe {p.number}: " in report for p in result.log)
    assert BisectResult.from_json(result.to_json()) == result


def test_compare_says_what_each_variant_compiled(step: Step) -> None:
    result = compare(step, variants={"defaults": {}, "fm": {"enable": ["fuse_matmul"]}}, repeat=2, warmup=1,
                     show=False, kernels=False)
    counted(result["defaults"].compiles, 8, 3)
    counted(result["fm"].compiles, 8, 2)
    assert "\n  fm: 8 fusions, 2 definitions compiled, " in result.table()


def test_no_scope_and_no_sharing_stay_behind(step: Step) -> None:
    search(step, candidates=["fuse_matmul"], **QUICK)
    assert nvscope.current_options() == OptionSet()
    before = len(step.compiles())
    with audit() as log:
        step()
    assert {r.route for r in log.records} == {"default"}  # Thunder's own path again, outside the tools
    assert len(step.compiles()) == before + 8
