"""torch.distributed on CPU (gloo): real AsyncCollectiveTensor inputs at the Thunder adapter (one process), and
examples/ddp_train.py under torchrun with two CPU ranks. DTensor inputs in a scope are tests/exec/test_dtensor.py's.

On CPU the example has no Thunder (torch DDP on the plain module): it checks scopes per rank and step, the broadcast,
gradient averaging and the exit path; fusions and kernels under torchrun are tests/gpu/test_distributed_gpu.py's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the doubles build real autograd Functions

import torch.distributed as tdist
from thunder_double import ThunderDouble

from nvscope import nv_options

pytestmark = pytest.mark.skipif(not tdist.is_available(), reason="torch.distributed is not available")


@pytest.mark.usefixtures("process_group")  # tests/exec/conftest.py: a one-rank gloo group
def test_async_collective_tensors_are_waited_for(installed: ThunderDouble) -> None:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor, all_reduce

    wrapper = installed.make_wrapper()
    reduced = all_reduce(torch.ones(4), "sum", tdist.group.WORLD)
    with nv_options(enable=["static_fusion_count"]):
        wrapper(reduced)
    execution = installed.executions[-1]
    assert execution.enable == ["static_fusion_count"]
    assert not any(isinstance(a, AsyncCollectiveTensor) for a in execution.inputs)


# examples/ddp_train.py under torchrun, forced onto the CPU.

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MARK = "nvscope-rank-result"
OPTION = "NVFUSER_ENABLE=static_fusion_count"


def _examples_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"nvscope_examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("local_rank", "local_world", "gpus", "expected"),
    [
        (1, 2, 2, ("nccl", "cuda:1")),  # one GPU per rank
        (0, 1, 1, ("nccl", "cuda:0")),
        (1, 2, 1, ("gloo", "cuda:0")),  # two ranks share the H200: NCCL refuses that
        (3, 4, 2, ("gloo", "cuda:1")),
        (1, 2, 0, ("gloo", "cpu")),
    ],
)
def test_example_places_ranks_by_what_the_machine_has(local_rank: int, local_world: int, gpus: int,
                                                      expected: tuple[str, str]) -> None:
    where = _examples_module("_distributed").placement(local_rank, local_world, gpus)
    assert (where.backend, where.device) == expected


def _torchrun_on_cpu(*args: str) -> tuple[int, dict[int, dict[str, Any]], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = str(EXAMPLES.parent)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(port), str(EXAMPLES / "ddp_train.py"), *args, "--deadline", "60"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    output = done.stdout + done.stderr
    decoder, ranks = json.JSONDecoder(), {}
    for line in output.splitlines():
        if (at := line.find(MARK)) >= 0:
            result, _ = decoder.raw_decode(line, at + len(MARK) + 1)
            ranks[result["rank"]] = result
    return done.returncode, ranks, output


def test_example_trains_on_two_cpu_ranks_with_gloo() -> None:
    returncode, ranks, output = _torchrun_on_cpu()
    assert returncode == 0 and sorted(ranks) == [0, 1], output[-3000:]
    for rank, result in ranks.items():
        assert result["ok"], result
        assert (result["backend"], result["device"], result["world"]) == ("gloo", "cpu", 2)
        assert result["thunder"] is None and result["audit"] is None  # no fusion can run here
        steps = result["steps"]
        assert result["seen"]["unscoped"] == [""] * steps
        assert result["seen"]["scoped"] == [OPTION] * steps
        assert result["seen"]["rank0_only"] == [OPTION if rank == 0 else ""] * steps
        losses = {k: torch.tensor(v) for k, v in result["losses"].items()}
        torch.testing.assert_close(losses["scoped"], losses["unscoped"])
        # Ranks start from different weights: only DDP's broadcast and gradient averaging make this match.
        torch.testing.assert_close(losses["unscoped"], losses["reference"], rtol=2e-4, atol=1e-5)
    assert ranks[0]["losses"] == ranks[1]["losses"]


def test_example_without_thunder_refuses_fsdp_clearly() -> None:
    returncode, ranks, output = _torchrun_on_cpu("--parallel", "fsdp")
    assert returncode != 0 and ranks, output[-3000:]
    for result in ranks.values():
        assert not result["ok"]
        assert "fsdp needs Thunder" in result["error"] and "no CUDA device" in result["error"], result
