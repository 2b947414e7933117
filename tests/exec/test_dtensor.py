"""DTensor inputs at the Thunder adapter, with real DTensors on a one-rank gloo group (CPU).

Thunder runs a fusion with DTensor inputs through nvFuser's ``execute_with_dtensors(fd, dtensors)``, which executes
the local tensors with no options (the double's frontend does the same). In a scope the partition's definition
goes there with its options; outside, Thunder's own path is untouched. The kernels it launches are proven on the
H200 by tests/gpu/test_failures_gpu.py (one-rank NCCL mesh).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
tdist = pytest.importorskip("torch.distributed")
if not tdist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from thunder_double import ThunderDouble

import nvscope
import nvscope.thunder
from nvscope import OptionSet, audit, nv_options

pytestmark = pytest.mark.usefixtures("process_group")  # tests/exec/conftest.py: a one-rank gloo group

SFC = ["static_fusion_count"]


def sharded(*values: float) -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    return distribute_tensor(torch.tensor(values), init_device_mesh("cpu", (1,)), [Shard(0)])


def test_dtensor_inputs_run_under_the_scopes_options(installed: ThunderDouble) -> None:
    from torch.distributed.tensor import DTensor

    wrapper = installed.make_wrapper()
    x, y = sharded(1.0, 2.0), sharded(3.0, 4.0)
    with audit() as log, nv_options(enable=SFC):
        out = wrapper(x, y)
    scoped = installed.executions[-1]
    assert (scoped.enable, scoped.disable) == (SFC, [])
    assert all(type(i) is torch.Tensor for i in scoped.inputs)  # nvFuser got the local tensors
    assert [type(o) for o in out] == [DTensor, DTensor]  # and its outputs were wrapped as DTensors again
    assert torch.equal(out[0].to_local(), torch.tensor([2.0, 4.0])) and out[0].placements == x.placements
    assert [(r.route, r.options) for r in log.records] == [("new", OptionSet(SFC))]
    assert installed.ranges == ["nvFusion0 [+static_fusion_count]"]
    assert wrapper.last_used is scoped.fd  # Thunder's tools see the definition that ran

    wrapper(x, y)  # after the scope: Thunder's own definition, no options
    default = installed.executions[-1]
    assert not default.enable and default.fd is not scoped.fd
    with nv_options(enable=SFC):
        wrapper(x, y)
    assert installed.executions[-1].fd is scoped.fd and installed.executions[-1].enable == SFC


def test_dtensor_inputs_outside_a_scope_are_thunders_own_path(installed: ThunderDouble) -> None:
    wrapper = installed.make_wrapper(enable=["kernel_profile"])
    wrapper(sharded(1.0))
    execution = installed.executions[-1]
    assert not execution.enable and execution.fd is wrapper.last_used  # execute_with_dtensors passes none
    assert nvscope.thunder.partitions(wrapper) is None
