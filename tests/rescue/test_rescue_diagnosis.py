"""What `nvscope.rescue` sees under nvFuser's defaults: fusions of the direct frontend (`nvscope.nvfuser`) whichever
order it was installed in, failures outside every fusion, and the defaults whatever scope the caller is in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rescue_probes import add_to
from thunder_double import ThunderDouble, chain_program, load_frontend, reset_nvscope

import nvscope
import nvscope.nvfuser
from nvscope import OptionSet


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake nvfuser_direct frontend, nvscope reset before and after."""
    reset_nvscope()
    yield load_frontend(monkeypatch, "nvfuser_direct")
    reset_nvscope()


def direct_step(fe: Any, fails: str, install: str) -> Callable[[], Any]:
    """A step executing one direct definition that goes wrong under its defaults (``fails``); the direct adapter
    installed ``"before"`` the rescue or by the step itself (``"inside"``)."""
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[1], dtype=fe.DataType.Float)
        fd.ops.slice(0)
        fd.define_scalar(fe.FAILS + fails)
    if install == "before":
        assert nvscope.nvfuser.install()

    def step() -> Any:
        if install == "inside":
            nvscope.nvfuser.install()
        return fd.execute([1.0])

    return step


@pytest.mark.parametrize("install", ["before", "inside"])
def test_a_direct_fusion_with_wrong_numbers_is_named_and_cured(direct: Any, install: str) -> None:
    step = direct_step(direct, "wrong::-resize_scheduler", install)
    result = nvscope.rescue(step, candidates=["-infer_contiguity", "-resize_scheduler"], progress=False)
    (rescued,) = result.rescues
    assert rescued.fusion.startswith("call/FusionDefinition@") and rescued.failure.kind == "numbers"
    # a candidate that changes nothing is no cure: the search validates the fusion under each
    assert [(a.options, a.cured) for a in rescued.attempts][:2] == [
        (OptionSet(disable=["infer_contiguity"]), False), (OptionSet(disable=["resize_scheduler"]), True)]
    assert result.exit_code() == 0 and result.proved is True


@pytest.mark.parametrize("install", ["before", "inside"])
def test_a_raising_direct_fusion_gets_its_repro_script(direct: Any, install: str) -> None:
    step = direct_step(direct, "raise::-resize_scheduler", install)
    result = nvscope.rescue(step, candidates=["-resize_scheduler"], progress=False)
    (rescued,) = result.rescues
    assert rescued.cure == OptionSet(disable=["resize_scheduler"]) and result.exit_code() == 0
    (script,) = rescued.repro_scripts
    assert "fails:raise::-resize_scheduler" in Path(script).read_text()


def test_with_both_adapters_thunders_fusions_are_not_counted_twice(installed: ThunderDouble) -> None:
    assert nvscope.nvfuser.install()
    wrappers = [installed.make_wrapper(f"nvFusion{i}", ops=("slice",)) for i in range(2)]

    def step() -> float:
        x = 1.0
        for w in wrappers:
            (x,) = w(x)
        return x

    result = nvscope.rescue(step, progress=False)
    assert result.healthy and result.fusions == ("forward/nvFusion0", "forward/nvFusion1")


def test_a_fault_after_every_fusion_finished_blames_no_fusion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = add_to(chain_program(tmp_path, monkeypatch, 3), "def crash():\n    step()\n    os.abort()\n")
    result = nvscope.rescue(f"{script}:crash", progress=False)
    assert result.rescues == () and result.unattributed is not None
    assert result.unattributed.fusion is None and result.unattributed.kind == "fault"
    assert "SIGABRT" in result.unattributed.line and result.exit_code() == 1
    assert "the process died outside every fusion" in result.report()
    assert "nothing to search" in result.report()


@pytest.mark.parametrize("options", [{"enable": ["fuse_matmul"]}, {"disable": ["resize_scheduler"]}])
def test_the_callers_scope_does_not_reach_the_diagnosis(installed: ThunderDouble, options: dict[str, Any]) -> None:
    # healthy under the defaults; broken under the caller's scope
    name = (options.get("enable") or ["-" + options["disable"][0]])[0]
    wrapper = installed.make_wrapper("nvFusion0", fails=f"raise:{name}:", ops=("linear", "slice"))
    with pytest.warns(nvscope.NoFusionWarning), nvscope.nv_options(**options):  # none ran under it: so it says
        result = nvscope.rescue(lambda: wrapper(1.0), progress=False)
    assert result.healthy and result.exit_code() == 0


def test_an_async_step_is_refused_up_front(installed: ThunderDouble) -> None:
    async def step() -> None:
        pass

    with pytest.raises(TypeError, match="async function"):
        nvscope.rescue(step, progress=False)
