"""torch.distributed on CPU (gloo, one process): real DTensor and AsyncCollectiveTensor inputs at the Thunder adapter.

Thunder runs fusions with DTensor inputs through nvFuser's execute_with_dtensors, which takes no options, so inside
a scope nvscope refuses them with a clear error instead of silently running without the options. The multi-GPU run
itself (examples/ddp_train.py under torchrun on 2 GPUs) needs hardware this suite does not have.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")  # the doubles build real autograd Functions

import torch.distributed as tdist
from thunder_double import ThunderDouble, reset_nvscope

import nvscope
import nvscope.thunder
from nvscope import UnsupportedError, nv_options

pytestmark = pytest.mark.skipif(not tdist.is_available(), reason="torch.distributed is not available")


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    tdist.destroy_process_group()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, process_group: None) -> Iterator[ThunderDouble]:
    reset_nvscope()
    double = ThunderDouble(monkeypatch)
    assert nvscope.thunder.install()
    yield double
    reset_nvscope()


def _dtensor(x: torch.Tensor) -> torch.Tensor:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    mesh = init_device_mesh("cpu", (1,))
    return DTensor.from_local(x, mesh, [Replicate()])


def test_dtensor_input_in_a_scope_is_refused_clearly(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    d = _dtensor(torch.ones(4))
    before = len(installed.executions)
    with nv_options(enable=["static_fusion_count"]), pytest.raises(UnsupportedError, match="execute_with_dtensors"):
        wrapper(d)
    assert len(installed.executions) == before  # nothing ran without the options it was asked to run with
    assert nvscope.current_options() == nvscope.OptionSet()


def test_dtensor_input_outside_a_scope_is_thunders_own_path(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper()
    wrapper(_dtensor(torch.ones(4)))
    assert installed.executions[-1].enable == []


def test_async_collective_tensors_are_waited_for(installed: ThunderDouble) -> None:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor, all_reduce

    wrapper = installed.make_wrapper()
    reduced = all_reduce(torch.ones(4), "sum", tdist.group.WORLD)
    with nv_options(enable=["static_fusion_count"]):
        wrapper(reduced)
    execution = installed.executions[-1]
    assert execution.enable == ["static_fusion_count"]
    assert not any(isinstance(a, AsyncCollectiveTensor) for a in execution.inputs)
