"""Default sharing (``nv_options(share=True)``, issue 38): fusions running their own options compile once per distinct
definition, against the doubles. Observed: the fake nvFuser's compiles and executions, nvscope's audit, warnings."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fake_nvfuser_frontend import Tensor
from thunder_double import ThunderDouble, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
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


def test_share_false_inside_a_sharing_scope_reaches_its_backward_run_outside_it(double: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    models = [double.make_model()[0] for _ in range(3)]
    with audit() as log, nv_options(share=True):
        with nv_options(share=False):
            losses = [model(torch.ones(2, requires_grad=True)).sum() for model in models]
        for loss in losses:
            loss.backward()  # in the sharing scope: the backward still keeps its forward's share=False
    assert {r.fusion.split("#")[0]: r.route for r in log.records} == {"forward/nvFusion0": "default",
                                                                         "backward/nvFusion1": "default"}
    assert len(compiles(double)) == 6  # Thunder's own path: one compile per fusion, forward and backward


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
    for _ in range(2):  # the second pass is the call wrapper's cache hit
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
    tried = [r.shared_from for r in log.records if r.route != "fallback"]
    assert tried[0] is None and all(f is not None and f.startswith("forward/nvFusion0") for f in tried[1:])


def test_a_failure_of_the_shared_defaults_is_raised_and_not_remembered(double: ThunderDouble) -> None:
    """There are no defaults to fall back to from the defaults: the error is raised (no FallbackWarning), and it is
    not recorded for the definition, so a transient failure (out of memory) fails no later fusion."""
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


# --- a fusion's own options under sharing: never refused by another fusion's scoped failure --------------------------

def test_a_scoped_failure_does_not_refuse_another_fusions_defaults_at_those_options(double: ThunderDouble) -> None:
    """Fusion A fails once (out of memory) under a scope's fuse_matmul and falls back; fusion B prints A's definition
    and was jitted with fuse_matmul, its own option. Run shared, B compiles and runs its own options: A's failure was
    under a scope, and B's defaults have nothing to fall back to. Once B's compile completes, the failure is not
    the definition's: a later scoped fusion runs B's compiled definition with the option, compiling nothing."""
    scoped = double.make_wrapper("nvFusion0")
    tuned = double.make_wrapper("nvFusion1", enable=FM)  # thunder.jit(..., nv_enable_options=["fuse_matmul"])
    double.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
    with pytest.warns(nvscope.FallbackWarning), nv_options(enable=FM, on_error="fallback"):
        assert scoped(t()) == [t() * 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            with nv_options(share=True):
                assert tuned(t()) == [t() * 2]
    assert list(double.executions[-1].enable or ()) == FM
    compiled = len(compiles(double))
    later = double.make_wrapper("nvFusion2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: the definition compiles under fuse_matmul
        with nv_options(enable=FM, on_error="fallback", share=True):
            assert later(t()) == [t() * 2]
    assert list(double.executions[-1].enable or ()) == FM and double.executions[-1].fd is tuned.last_used
    assert len(compiles(double)) == compiled


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The nvfuser_direct double alone, with nvscope's direct adapter installed."""
    reset_nvscope()
    for name in ("NVSCOPE_SHARE", "NVSCOPE_DEV"):
        monkeypatch.delenv(name, raising=False)
    fe = load_frontend(monkeypatch, "nvfuser_direct")
    assert nvscope.nvfuser.install()
    yield fe
    reset_nvscope()


def linear(fe: Any) -> Any:
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        fd.ops.linear(0)
    return fd


def test_direct_defaults_passed_per_call_are_not_refused_by_a_scoped_failure(direct: Any) -> None:
    """The direct adapter's partition for fuse_matmul serves a scope's calls and calls that pass the option: a scoped
    call refused by the recorded failure leaves the partition as it was, and a call passing the option compiles."""
    first, second = linear(direct), linear(direct)
    x = direct.Tensor((1.0, 1.0))
    direct.FAIL_NEXT.append(RuntimeError("CUDA out of memory (transient)"))
    with pytest.warns(nvscope.FallbackWarning), nv_options(enable=FM, on_error="fallback"):
        first.execute([x])
    with nv_options(enable=FM, on_error="fallback"):  # the same definition under the scope: falls back, silently
        assert second.execute([x]) == [x * 2]
    assert not direct.EXECUTIONS[-1].enable
    with nv_options(share=True):
        assert second.execute([x], _enable_options=FM) == [x * 2]  # its own options: compiled and run
    assert direct.EXECUTIONS[-1].enable == FM and direct.EXECUTIONS[-1].fd is not second
    assert direct.COMPILES[-1].enable == tuple(FM)


# --- DTensor inputs: the defaults of a fusion with compile-time options run as Thunder runs them ---------------------

@pytest.mark.usefixtures("process_group")  # tests/exec/conftest.py: a one-rank gloo group (skips without torch)
def test_dtensor_inputs_run_shared_defaults_with_what_thunder_passes(double: ThunderDouble) -> None:
    """Thunder runs DTensor inputs through nvFuser's ``execute_with_dtensors(fd, args)``, which passes no compile-time
    option (Thunder 0.2.6 and 0.2.7.dev): asked to share, the fusion runs with exactly that. A scoped fusion with the
    same definition and the option still runs it with the option, on a definition compiled with it."""
    torch = pytest.importorskip("torch")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    x = distribute_tensor(torch.tensor([1.0, 2.0]), init_device_mesh("cpu", (1,)), [Shard(0)])
    sfc = ["static_fusion_count"]
    tuned = double.make_wrapper("nvFusion0", enable=sfc)
    tuned(x)
    own = double.executions[-1]
    with nv_options(share=True):
        tuned(x)
        tuned(x)
    assert [list(e.enable or ()) for e in double.executions[-2:]] == [list(own.enable or ())] * 2
    scoped = double.make_wrapper("nvFusion1")
    with nv_options(enable=sfc, share=True):
        scoped(x)
    assert list(double.executions[-1].enable or ()) == sfc
    assert double.fe.COMPILES[-1].enable == tuple(sfc)  # its own compile: no definition compiled without the option


# --- both adapters installed: a Thunder fusion goes through one partition --------------------------------------------

def test_with_the_direct_adapter_installed_too_a_thunder_fusion_runs_one_partition(double: ThunderDouble) -> None:
    """Both adapters installed by hand (as ``nvscope run`` does for a program that imports nvFuser before Thunder):
    the definition a Thunder partition built runs as Thunder's adapter asks, not rebuilt into a partition of the
    direct adapter's. The audit names Thunder's fusions only; the definitions that ran are those Thunder's tools see."""
    assert nvscope.nvfuser.install() and nvscope.thunder.install()
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    for scope in (nv_options(share=True), nv_options(enable=FM)):
        with audit() as log, scope:
            for fusion in layers:
                fusion(t())
        assert [r.fusion.split("@")[0] for r in log.records] == [f"forward/nvFusion{i}" for i in range(3)]
        assert [e.fd for e in double.executions[-3:]] == [fusion.last_used for fusion in layers]
    assert sorted(e for _, e in compiles(double)) == [(), tuple(FM)]


def test_a_fallback_that_builds_the_shared_defaults_puts_their_first_run_on_the_compile_clock(
        double: ThunderDouble) -> None:
    """The tools' compile seconds (`nvscope._exec._shared.compiling`, reported as ``compile_s``) cover the first run of
    every partition built: also the own-options partition a fallback in a sharing scope builds, where the shared
    defaults compile."""
    from nvscope._exec._shared import compiling

    layers = [double.make_wrapper(f"nvFusion{i}", breaks_with="fuse_matmul") for i in range(3)]
    before = compiling()[1]
    with pytest.warns(nvscope.FallbackWarning), nv_options(enable=FM, on_error="fallback", share=True):
        for fusion in layers:
            fusion(t())
    assert sorted(e for _, e in compiles(double)) == [(), tuple(FM)]
    assert compiling()[1] - before == 2 * len(layers)  # each fusion's fuse_matmul partition and its defaults'


def test_with_both_adapters_a_fusion_the_scope_leaves_alone_runs_its_own_options(double: ThunderDouble) -> None:
    """Both adapters installed (``nvscope.install()`` then ``nvscope.nvfuser.install()``): a Thunder fusion that a
    selector leaves out runs Thunder's own call, and its definition's execute is Thunder's, not a direct fusion of the
    direct adapter's: no options reach it, and an audit lists each fusion once."""
    assert nvscope.thunder.install() and nvscope.nvfuser.install()
    layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
    with audit() as log:
        for fusion in layers:
            fusion(t())
    assert len(log.fusions()) == 3 and all(r.fusion.startswith("forward/") for r in log.records)
    with nv_options(enable=FM, fusions=lambda info: info.name != "nvFusion1"):
        for fusion in layers:
            fusion(t())
    assert [list(e.enable or ()) for e in double.executions[-3:]] == [FM, [], FM]
    with pytest.warns(nvscope.NoEffectWarning), nv_options(enable=FM, fusions=~nvscope.phase("forward")):
        for fusion in layers:
            fusion(t())
    assert [list(e.enable or ()) for e in double.executions[-3:]] == [[], [], []]
