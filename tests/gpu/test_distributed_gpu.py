"""torchrun on this machine's GPU(s): options scoped per rank and step under Thunder's ddp and fsdp and torch's DDP.

examples/ddp_train.py is launched as a user would (``torchrun --nproc-per-node N``), all launches at once (each spends
Thunder's compile time in every process), and each rank's JSON line is checked here from its raw facts. Backend
and devices follow the machine: with one GPU, two ranks share it over gloo (NCCL refuses that); with two, NCCL.
``NVSCOPE_DISTRIBUTED_LOGS=<dir>`` keeps every launch's output there (default: a pytest temporary directory).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import NVFUSER_NUMBERED, subprocess_env

torch = pytest.importorskip("torch")
pytest.importorskip("thunder")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
MARK = "nvscope-rank-result"  # examples/_distributed.py: one JSON object per rank after it
OPTION = "NVFUSER_ENABLE=static_fusion_count"
DEADLINE_S = 170  # the example's own: past it a rank prints where it is stuck and exits
TIMEOUT_S = 210  # the launch's, a backstop: the process group is killed

LAUNCHES = {  # name: (ranks, example arguments)
    "ddp": (2, ["--parallel", "ddp"]),
    "torch-ddp": (2, ["--parallel", "torch-ddp"]),
    "fsdp": (2, ["--parallel", "fsdp"]),
    "ddp-1-rank": (1, ["--parallel", "ddp"]),  # one GPU per rank even here: the NCCL path
    "ddp-broadcast-with-grad": (2, ["--parallel", "ddp", "--broadcast-with-grad"]),
}
TRAINING = ["ddp", "torch-ddp", "fsdp", "ddp-1-rank"]


@dataclass
class Launch:
    name: str
    nproc: int
    log: Path
    returncode: int | None = None  # None: killed at TIMEOUT_S
    output: str = ""
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)

    def show(self) -> str:
        lines = [f"torchrun {self.name}: exit {self.returncode}, ranks reported {sorted(self.ranks)}, log {self.log}"]
        for rank, result in sorted(self.ranks.items()):
            if result.get("ok"):
                lines.append(f"  rank {rank}: ok")
            else:
                lines.append(f"  rank {rank}: {result.get('error') or result.get('failed')} at {result.get('where')}")
        return "\n".join([*lines, "--- output (tail) ---", self.output[-4000:]])


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:  # all bound at once: n distinct ports
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _rank_results(output: str) -> dict[int, dict[str, Any]]:
    """Each rank's JSON line; other processes' output may share the line before or after it."""
    decoder, results = json.JSONDecoder(), {}
    for line in output.splitlines():
        at = line.find(MARK)
        if at >= 0:
            result, _ = decoder.raw_decode(line, at + len(MARK) + 1)
            results[result["rank"]] = result
    return results


def _launch_all(logs: Path) -> dict[str, Launch]:
    env = dict(subprocess_env(), NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1")
    running = {}
    for (name, (nproc, args)), port in zip(LAUNCHES.items(), _free_ports(len(LAUNCHES)), strict=True):
        launch = Launch(name, nproc, logs / f"{name}.log")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                   "--master-addr", "127.0.0.1", "--master-port", str(port),
                   str(EXAMPLE), *args, "--deadline", str(DEADLINE_S)]
        with launch.log.open("w") as out:  # a file, not a pipe: nothing blocks on a full pipe
            out.write(" ".join(command) + "\n")
            out.flush()
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)  # its own process group, to kill it whole
        running[name] = (launch, process)
    end = time.monotonic() + TIMEOUT_S
    for _, process in running.values():
        try:
            process.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    late = [process for _, process in running.values() if process.poll() is None]
    for process in late:  # torchrun puts each rank in a session of its own; on SIGTERM it stops them itself
        process.send_signal(signal.SIGTERM)
    grace = time.monotonic() + 15
    for process in late:
        try:
            process.wait(timeout=max(0.1, grace - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the process group this test started
            process.wait()
    for launch, process in running.values():
        launch.returncode = None if process in late else process.returncode
        launch.output = launch.log.read_text(errors="replace")
        launch.ranks = _rank_results(launch.output)
    return {launch.name: launch for launch, _ in running.values()}


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Launch]:
    logs = Path(os.environ.get("NVSCOPE_DISTRIBUTED_LOGS") or tmp_path_factory.mktemp("torchrun"))
    logs.mkdir(parents=True, exist_ok=True)
    return _launch_all(logs)


def _placement(nproc: int, rank: int) -> tuple[str, str]:
    gpus = torch.cuda.device_count()
    return ("nccl", f"cuda:{rank}") if gpus >= nproc else ("gloo", f"cuda:{rank % gpus}")


def _trained(launches: dict[str, Launch], name: str) -> tuple[Launch, list[dict[str, Any]]]:
    """Every rank of the launch finished (after the final barrier: no deadlock) and ran fusions through Thunder."""
    launch = launches[name]
    assert launch.returncode == 0, launch.show()
    assert sorted(launch.ranks) == list(range(launch.nproc)), launch.show()
    results = [launch.ranks[r] for r in range(launch.nproc)]
    assert all(r.get("thunder") and r.get("audit") and r.get("kernels") for r in results), launch.show()
    return launch, results


@pytest.mark.parametrize("name", TRAINING)
def test_every_rank_finishes_where_the_machine_places_it(launches: dict[str, Launch], name: str) -> None:
    launch, results = _trained(launches, name)
    for rank, result in enumerate(results):
        assert (result["backend"], result["device"]) == _placement(launch.nproc, rank), launch.show()
        assert result["world"] == launch.nproc
        assert result["ok"], launch.show()  # the example's own checks; the tests below re-derive them


@pytest.mark.parametrize("name", TRAINING)
def test_decorated_step_runs_every_fusion_under_the_options(launches: dict[str, Launch], name: str) -> None:
    launch, results = _trained(launches, name)
    for result in results:
        scoped, unscoped = result["audit"]["scoped"], result["audit"]["unscoped"]
        assert set(scoped["phases"]) == {"forward", "backward"}, launch.show()
        assert scoped["options"] == [OPTION] and set(scoped["partitions"]) <= {"new", "reused"}, scoped
        assert scoped["executions"] == unscoped["executions"] > 0, (scoped, unscoped)  # the same fusions, all scoped
        assert result["seen"]["scoped"] == [OPTION] * result["steps"]
        kernels = result["kernels"]["scoped"]
        assert kernels and all(NVFUSER_NUMBERED.search(k) for k in kernels), kernels


@pytest.mark.parametrize("name", TRAINING)
def test_unscoped_steps_and_ranks_outside_the_scope_run_none_under_them(
        launches: dict[str, Launch], name: str) -> None:
    launch, results = _trained(launches, name)
    for rank, result in enumerate(results):
        unscoped, mixed = result["audit"]["unscoped"], result["audit"]["rank0_only"]
        where = f"rank {rank}, log {launch.log}"
        assert unscoped["partitions"] == ["default"] and unscoped["options"] == [""], (unscoped, where)
        assert result["seen"]["unscoped"] == [""] * result["steps"], where
        kernels = result["kernels"]["unscoped"]
        assert kernels and not any(NVFUSER_NUMBERED.search(k) for k in kernels), (kernels, where)  # scheduler-named
        if rank == 0:  # the step is scoped on rank 0 only
            assert mixed["options"] == [OPTION] and set(mixed["partitions"]) <= {"new", "reused"}, (mixed, where)
        else:
            assert mixed["options"] == [""] and mixed["partitions"] == ["default"], (mixed, where)
        assert mixed["executions"] == unscoped["executions"], where
        assert result["seen"]["rank0_only"] == [OPTION if rank == 0 else ""] * result["steps"], where


@pytest.mark.parametrize("name", TRAINING)
def test_losses_match_the_unscoped_run_and_eager_pytorch(launches: dict[str, Launch], name: str) -> None:
    """Ranks start from different weights; matching eager on the global batch needs the broadcast and the gradient
    averaging to have happened, and the options (which only rename kernels) to change nothing."""
    launch, results = _trained(launches, name)
    for rank, result in enumerate(results):
        losses = {k: torch.tensor(v) for k, v in result["losses"].items()}
        where = f"rank {rank}, log {launch.log}: {result['losses']}"
        torch.testing.assert_close(losses["scoped"], losses["unscoped"], rtol=1e-4, atol=1e-6, msg=where)
        torch.testing.assert_close(losses["unscoped"], losses["reference"], rtol=2e-4, atol=1e-5, msg=where)
        torch.testing.assert_close(losses["unscoped"], torch.tensor(results[0]["losses"]["unscoped"]), msg=where)


def test_thunder_ddp_broadcast_with_grad_mode_on_fails_only_over_gloo_with_cuda(launches: dict[str, Launch]) -> None:
    """Why the example builds thunder.distributed.ddp under torch.no_grad (issue 12): without it, gloo's copy of the
    received parameters back into CUDA leaves that require grad fails. NCCL writes in place and needs nothing."""
    launch = launches["ddp-broadcast-with-grad"]
    if _placement(launch.nproc, 0)[0] == "nccl":
        _trained(launches, launch.name)
        return
    assert launch.returncode not in (0, None), launch.show()
    errors = [r.get("error") or "" for r in launch.ranks.values()]
    assert errors, launch.show()
    hint = "if Thunder's ddp now broadcasts under no_grad itself, the example's torch.no_grad() is no longer needed"
    assert all("a leaf Variable that requires grad is being used in an in-place operation" in e for e in errors), (
        f"{hint}\n{launch.show()}")
