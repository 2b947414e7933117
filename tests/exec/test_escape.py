"""``on_error="torch"``: a Thunder fusion that nvFuser fails runs its region in PyTorch, and the step goes on.

Against the doubles: the Thunder double's fusions keep a region in ``get_fd``'s closure as Thunder's do (each input
doubled by a bound symbol), and the frontend double fails a definition under its defaults (``fails="raise::"``) or
under an option (``breaks_with``). nvFuser computes ``2 * x``; a region of kind "wrong" computes ``3 * x``, so a test
can tell which of the two ran.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_nvfuser_frontend import DEFAULTS_ASSERT, Tensor
from thunder_double import ThunderDouble

import nvscope
from nvscope import EscapeWarning, FallbackWarning, nv_options

X = Tensor((1.0, 2.0))


@pytest.fixture(autouse=True)
def _repros(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path / "repros"))
    for name in ("NVFUSER_ENABLE", "NVFUSER_DISABLE", "NVSCOPE_REPRO"):
        monkeypatch.delenv(name, raising=False)


def _runs(double: ThunderDouble, fusion: object) -> int:
    """How many times nvFuser executed a definition of ``fusion`` (any partition)."""
    return sum(1 for e in double.executions if e.fd in set(double.built))


def test_defaults_that_fail_run_in_pytorch_once_warned_then_routed(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion3", fails="raise::", eager="wrong")
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
        fusion(X)  # unscoped: nvFuser's error, as ever
    with nv_options(on_error="torch"):
        with pytest.warns(EscapeWarning) as caught:
            assert fusion(X) == [X * 3]  # the region ran
        tried = len(installed.executions)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fusion(X) == [X * 3]  # routed: no warning, nvFuser not tried again
        assert len(installed.executions) == tried
    [warning] = caught
    text = str(warning.message)
    assert "forward/nvFusion3" in text and DEFAULTS_ASSERT.partition(",")[0] in text
    repro = text.split("repro script: ")[1].split()[0]
    assert Path(repro).is_file() and Path(repro).suffix == ".py"
    assert isinstance(warning.message, FallbackWarning)  # one filter silences fallbacks of both kinds
    assert warning.filename == __file__  # it points at the line that called the fusion
    assert installed.region_runs == [(X,), (X,)]


def test_a_healthy_fusion_is_never_routed(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion0", eager="wrong")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with nv_options(on_error="torch"):
            for _ in range(3):
                assert fusion(X) == [X * 2]
        with nv_options(enable=["fuse_matmul"], on_error="torch"):
            assert fusion(X) == [X * 2]
    assert installed.region_runs == []
    assert installed.executions[-1].enable == ["fuse_matmul"]


def test_the_route_is_kept_per_option_set_and_inputs(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion1", breaks_with="fuse_matmul", eager="wrong")
    broken = nv_options(enable=["fuse_matmul"], on_error="torch")
    with broken, pytest.warns(EscapeWarning):
        assert fusion(X) == [X * 3]
    with broken:
        assert fusion(X) == [X * 3]  # same options, same inputs: straight to PyTorch
        other = Tensor((1.0, 2.0, 3.0))
        built = len(installed.built)
        assert fusion(other) == [other * 3]  # other inputs: nvFuser is tried (a new definition), fails, escapes
        assert len(installed.built) == built + 1
        assert fusion(other) == [other * 3] and len(installed.built) == built + 1
    with nv_options(enable=["fast_math"], on_error="torch"):
        assert fusion(X) == [X * 2]  # other options: nvFuser again, and it runs
    with nv_options(on_error="torch"):
        assert fusion(X) == [X * 2]


def test_the_warning_is_said_once_per_fusion(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion1", breaks_with="fuse_matmul", eager="wrong")
    with nv_options(enable=["fuse_matmul"], on_error="torch"), pytest.warns(EscapeWarning) as caught:
        fusion(X)
        fusion(Tensor((1.0, 2.0, 3.0)))  # a second route of the same fusion
    assert len(caught) == 1


def test_the_audit_records_the_route(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion2", fails="raise::", eager="wrong")
    with nvscope.audit() as log, nv_options(on_error="torch"):
        with pytest.warns(EscapeWarning):
            fusion(X)
        fusion(X)
    # nvFuser's attempt (the defaults), its escape, then the routed call
    assert [r.route for r in log.records] == ["default", "torch", "torch"]
    assert {r.fusion for r in log.records} == {"forward/nvFusion2"}


def test_nesting_raise_inside_torch_raises_and_torch_inside_raise_escapes(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion4", fails="raise::", eager="wrong")
    with nv_options(on_error="torch"):
        with nv_options(on_error="raise"), pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
            fusion(X)
        with nv_options(enable=["fast_math"]), pytest.warns(EscapeWarning):  # inherits "torch"
            assert fusion(X) == [X * 3]
    with nv_options(on_error="raise"), nv_options(on_error="torch"):
        assert fusion(X) == [X * 3]  # the route of the defaults, kept


def test_fallback_is_unchanged_by_the_new_choice(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion1", breaks_with="fuse_matmul", eager="wrong")
    with nv_options(enable=["fuse_matmul"], on_error="fallback"), pytest.warns(FallbackWarning) as caught:
        assert fusion(X) == [X * 2]  # the defaults, in nvFuser
    assert not any(isinstance(w.message, EscapeWarning) for w in caught)
    assert installed.region_runs == []


def test_selectors_limit_the_options_not_the_escape(installed: ThunderDouble) -> None:
    first = installed.make_wrapper("nvFusion0", breaks_with="fuse_matmul", eager="wrong")
    second = installed.make_wrapper("nvFusion1", breaks_with="fuse_matmul", eager="wrong")
    with nv_options(enable=["fuse_matmul"], fusions="forward/nvFusion0", on_error="torch"):
        with pytest.warns(EscapeWarning):
            assert first(X) == [X * 3]
        assert second(X) == [X * 2]  # not selected: its defaults, which run


def test_backward_fusions_escape_under_their_forwards_scope(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model(breaks_with="fuse_matmul")
    x = torch.ones(2, requires_grad=True)
    with nv_options(enable=["fuse_matmul"], on_error="torch"):
        y = model(x)
    with pytest.warns(EscapeWarning, match="backward/nvFusion1"):
        y.sum().backward()  # outside the scope: the forward's scope carries on_error="torch"
    assert x.grad is not None and installed.region_runs


def test_backward_on_another_thread_escapes_too(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model(breaks_with="fuse_matmul")
    x = torch.ones(2, requires_grad=True)
    with nv_options(enable=["fuse_matmul"], on_error="torch"):
        y = model(x)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EscapeWarning)
                y.sum().backward()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == [] and x.grad is not None


def test_out_of_memory_is_not_escaped(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion0", eager="wrong")
    installed.fe.FAIL_NEXT.append(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    with nv_options(on_error="torch"), pytest.raises(RuntimeError, match="out of memory") as raised:
        fusion(X)
    assert any("could not run forward/nvFusion0 in PyTorch: CUDA out of memory" in n for n in raised.value.__notes__)
    assert installed.region_runs == []


def test_a_region_pytorch_cannot_run_raises_nvfusers_error_with_one_line(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion0", fails="raise::", eager="unsupported")
    with nv_options(on_error="torch"), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        fusion(X)
    [line] = [n for n in raised.value.__notes__ if "on_error='torch'" in n]
    assert "Thunder's PyTorch executor cannot run its region" in line and "\n" not in line


def test_a_region_that_fails_its_first_pytorch_run_raises_nvfusers_error(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion0", fails="raise::", eager="nvfuser_only")
    for _ in range(2):  # the second time without trying the region again
        with nv_options(on_error="torch"), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
            fusion(X)
        [line] = [n for n in raised.value.__notes__ if "on_error='torch'" in n]
        assert "its region does not run in PyTorch (TypeError: _scaled_dot_product" in line
    assert len(installed.region_runs) == 1


def test_a_thunder_without_regions_is_found_at_install_and_its_scopes_still_work(make_double: Any) -> None:
    import nvscope.thunder

    double = make_double(drop=("region",))
    assert nvscope.thunder.install()  # no traceback, no refusal: only the escape is off
    fusion = double.make_wrapper("nvFusion0", fails="raise::")
    with nv_options(on_error="torch"), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        fusion(X)
    [line] = [n for n in raised.value.__notes__ if "on_error='torch'" in n]
    assert "builds no get_fd over the region" in line and "\n" not in line
    healthy = double.make_wrapper("nvFusion1")
    with nv_options(enable=["fuse_matmul"], on_error="torch"):
        assert healthy(X) == [X * 2]
    assert double.executions[-1].enable == ["fuse_matmul"]


def test_a_direct_fusion_acts_as_raise(fusion_definition_failing: Any) -> None:
    fd = fusion_definition_failing
    with nv_options(on_error="torch"), pytest.raises(RuntimeError, match="INTERNAL ASSERT") as raised:
        fd.execute([1.0])
    assert any("direct nvFuser FusionDefinition has no Thunder region" in n for n in raised.value.__notes__)


@pytest.fixture
def fusion_definition_failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pytest.importorskip("torch")
    from thunder_double import load_frontend, reset_nvscope

    import nvscope.nvfuser

    reset_nvscope()
    frontend = load_frontend(monkeypatch, "nvfuser_direct")
    with frontend.FusionDefinition() as fd:
        fd.define_tensor(shape=[1], dtype=frontend.DataType.Float)
        fd.ops.linear(0)
        fd.define_scalar(frontend.FAILS + "raise::")
    assert nvscope.nvfuser.install()
    yield fd
    reset_nvscope()


def test_a_fusion_jitted_before_install_escapes(double: ThunderDouble) -> None:
    import nvscope.thunder

    fusion = double.make_wrapper("nvFusion5", fails="raise::", eager="wrong")
    assert nvscope.thunder.install()
    with nv_options(on_error="torch"), pytest.warns(EscapeWarning):
        assert fusion(X) == [X * 3]


def test_on_error_torch_alone_installs_the_adapter(double: ThunderDouble) -> None:
    fusion = double.make_wrapper("nvFusion6", fails="raise::", eager="wrong")
    with nv_options(on_error="torch"), pytest.warns(EscapeWarning):
        assert fusion(X) == [X * 3]


# --- run="torch": an explicit route, from the first call ------------------------------------------------------------

def test_run_torch_sends_the_selected_fusions_to_pytorch_from_their_first_call(installed: ThunderDouble) -> None:
    first = installed.make_wrapper("nvFusion0", eager="wrong")
    second = installed.make_wrapper("nvFusion1", eager="wrong")
    with nvscope.audit() as log, nv_options(fusions="forward/nvFusion0", run="torch"):
        assert first(X) == [X * 3] and second(X) == [X * 2]  # the first in PyTorch, the second in nvFuser
        assert first(X) == [X * 3]
    assert [(r.fusion, r.route) for r in log.records] == [
        ("forward/nvFusion0", "torch"), ("forward/nvFusion1", "default"), ("forward/nvFusion0", "torch")]
    assert len(installed.executions) == 1  # nvFuser ran the second fusion only
    assert first(X) == [X * 2]  # outside the scope: nvFuser again


def test_run_nvfuser_inside_run_torch_and_inherit_false_send_it_back(installed: ThunderDouble) -> None:
    fusion = installed.make_wrapper("nvFusion0", eager="wrong")
    with nv_options(run="torch"):
        assert fusion(X) == [X * 3]
        with nv_options(run="nvfuser"):
            assert fusion(X) == [X * 2]
        with nv_options(enable=["fuse_matmul"], inherit=False):
            assert fusion(X) == [X * 2]
        with nv_options(enable=["fuse_matmul"], fusions="forward/*", inherit=False):
            assert fusion(X) == [X * 2]  # a selective inherit=False: for the fusions it selects only
        with nv_options(fusions="backward/*", inherit=False):
            assert fusion(X) == [X * 3]
        with pytest.warns(nvscope.NoEffectWarning), nv_options(enable=["fuse_matmul"]):
            assert fusion(X) == [X * 3]  # options do not undo the route: they changed nothing


def test_run_torch_reaches_backward_fusions(installed: ThunderDouble) -> None:
    torch = pytest.importorskip("torch")
    model, _, _ = installed.make_model()
    x = torch.ones(2, requires_grad=True)
    with nvscope.audit() as log:
        with nv_options(fusions=nvscope.phase("backward"), run="torch"):
            y = model(x)
        y.sum().backward()
    assert [(r.fusion.split("@")[0], r.route) for r in log.records] == [("forward/nvFusion0", "default"),
                                                                       ("backward/nvFusion1", "torch")]


def test_run_torch_without_a_pytorch_form_says_so_in_one_line(fusion_definition_failing: Any) -> None:
    with nv_options(run="torch"), pytest.raises(nvscope.NvscopeError) as raised:
        fusion_definition_failing.execute([1.0])
    assert str(raised.value) == ("nv_options(run='torch') cannot run call/FusionDefinition@"
                                 f"{str(raised.value).split('@')[1].split()[0]} in PyTorch: a direct nvFuser "
                                 "FusionDefinition has no Thunder region to run in PyTorch")


def test_run_is_validated() -> None:
    with pytest.raises(ValueError, match="run= takes 'torch'"):
        nv_options(run="eager")
