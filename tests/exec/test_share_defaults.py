"""Default sharing (``nv_options(share=True)``, issue 38): fusions running their own options compile once per distinct
definition, against the doubles. Observed: the fake nvFuser's compiles and executions, nvscope's audit, warnings."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import audit, nv_options, with_nv_options

FM = ["fuse_matmul"]


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThunderDouble]:
    reset_nvscope()
    for name in ("NVSCOPE_SHARE", "NVSCOPE_MAX_SHARED", "NVSCOPE_MAX_PARTITIONS", "NVSCOPE_DEV", "NVSCOPE_STRICT"):
        monkeypatch.delenv(name, raising=False)
    made = ThunderDouble(monkeypatch, "direct")
    yield made
    reset_nvscope()


def t(n: int = 2) -> Tensor:
    return Tensor((1.0,) * n)


def compiles(double: ThunderDouble) -> list[tuple[str, tuple[str, ...]]]:
    return [(c.definition, c.enable) for c in double.fe.COMPILES]


def test_a_sharing_scope_compiles_each_distinct_definition_once(double: ThunderDouble) -> None:
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(6)]
    other = double.make_wrapper("nvFusion9", ops=("matmul",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no development-mode warning: sharing changes no option
        with nv_options(share=True):
            for fusion in [*layers, other]:
                assert fusion(t()) == [t() * 2]
    assert len(compiles(double)) == 2  # two distinct definitions, seven fusions
    assert all(e.enable in (None, [], ()) for e in double.executions)  # their own options: none


def test_without_asking_thunder_path_is_untouched(double: ThunderDouble) -> None:
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(4)]
    for fusion in layers:
        fusion(t())
    assert len(compiles(double)) == 4  # one per fusion, as Thunder compiles them


def test_compile_time_options_are_kept_and_share_by_option_set(double: ThunderDouble) -> None:
    plain = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    tuned = [double.make_wrapper(f"nvFusion{i + 3}", enable=FM) for i in range(3)]
    with nv_options(share=True):
        for fusion in [*plain, *tuned]:
            fusion(t())
    assert sorted(e for _, e in compiles(double)) == [(), tuple(FM)]
    assert [list(e.enable or ()) for e in double.executions] == [[]] * 3 + [FM] * 3


def test_share_false_inside_ends_it_and_scoped_options_still_apply(double: ThunderDouble) -> None:
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    with nv_options(share=True), nv_options(share=False):
        for fusion in layers:
            fusion(t())
    assert len(compiles(double)) == 3
    with nv_options(share=True), nv_options(enable=FM, fusions=["forward/nvFusion0*"]):
        for fusion in layers:
            fusion(t())
    # nvFusion0 under fuse_matmul (one compile), the two others share one default definition.
    assert len(compiles(double)) == 3 + 2


def test_the_decorator_shares_forward_and_backward_of_its_body(double: ThunderDouble) -> None:
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(4)]

    @with_nv_options(share=True)
    def step(x: Any) -> Any:
        for fusion in layers:
            (x,) = fusion(x)
        return x

    step(t())
    step(t())
    assert len(compiles(double)) == 1


def test_the_audit_says_which_fusion_ran_another_ones_definition(double: ThunderDouble) -> None:
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    with audit() as log, nv_options(share=True):
        for fusion in layers:
            fusion(t())
    shared = [(r.fusion.split("@")[0], r.shared_from and r.shared_from.split("@")[0]) for r in log.records]
    assert shared == [("forward/nvFusion0", None), ("forward/nvFusion1", "forward/nvFusion0"),
                      ("forward/nvFusion2", "forward/nvFusion0")]


def test_share_takes_a_bool(double: ThunderDouble) -> None:
    with pytest.raises(TypeError, match="share= takes True, False or None"):
        nv_options(share="yes")  # type: ignore[arg-type]
    assert nvscope.current_options() == nvscope.OptionSet()


def test_a_scope_whose_options_reach_no_fusion_still_says_so_under_sharing(double: ThunderDouble,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_DEV", "1")
    pointwise = [double.make_wrapper(f"nvFusion{i}", ops=("add",)) for i in range(2)]
    for _ in range(2):  # the second pass takes the lane's steady state
        with nv_options(share=True), pytest.warns(nvscope.NoEffectWarning), nv_options(enable=FM):
            for fusion in pointwise:  # fuse_matmul cannot affect an add: gated out, the fusion runs its own options
                fusion(t())
    assert len(compiles(double)) == 1 and all(not e.enable for e in double.executions)


def test_a_fallback_in_a_sharing_scope_runs_the_shared_defaults(double: ThunderDouble) -> None:
    """Six fusions of one definition that breaks under fuse_matmul: one failed compile under it, and the fallback runs
    the shared default definition, compiled once (Thunder's own path would compile it per fusion)."""
    layers = [double.make_wrapper(f"nvFusion{i}", breaks_with="fuse_matmul") for i in range(6)]
    with nv_options(share=True):
        for fusion in layers:
            fusion(t())
    with audit() as log, pytest.warns(nvscope.FallbackWarning), \
            nv_options(enable=FM, on_error="fallback", share=True):
        for fusion in layers:
            assert fusion(t()) == [t() * 2]
    assert sorted(e for _, e in compiles(double)) == [(), tuple(FM)]
    # The audit says which fusion's failure the others shared: no compile of their own.
    tried = [r.shared_from for r in log.records if r.partition != "fallback"]
    assert tried[0] is None and all(f is not None and f.startswith("forward/nvFusion0") for f in tried[1:])


def test_a_failure_of_the_shared_defaults_is_raised_and_not_remembered(double: ThunderDouble) -> None:
    """There are no defaults to fall back to from the defaults: the error is raised (no FallbackWarning), and it is
    not remembered for the definition, so a transient failure (out of memory) fails no later fusion."""
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="out of memory"), nv_options(share=True, on_error="fallback"):
            layers[0](t())
        with nv_options(share=True):
            assert [fusion(t()) for fusion in layers] == [[t() * 2]] * 3


def test_share_true_under_share_0_says_once_that_it_shares_nothing(double: ThunderDouble,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_SHARE", "0")
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    with pytest.warns(nvscope.ConfigWarning, match="NVSCOPE_SHARE=0 turns sharing off"):
        scope = nv_options(share=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process (until uninstall)
        nv_options(share=True)
        with scope:
            for fusion in layers:
                fusion(t())
    assert len(compiles(double)) == 3
