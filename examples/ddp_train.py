"""Scoped nvFuser options under torch.distributed: data-parallel training with Thunder, one process per rank.

    torchrun --nproc-per-node 2 examples/ddp_train.py                       # thunder.distributed.ddp(thunder.jit(m))
    torchrun --nproc-per-node 2 examples/ddp_train.py --parallel torch-ddp  # torch DDP around thunder.jit(m)
    torchrun --nproc-per-node 2 examples/ddp_train.py --parallel fsdp       # thunder.distributed.fsdp(thunder.jit(m))

Backend and devices follow the machine (examples/_distributed.py): NCCL with one GPU per rank, gloo with CUDA tensors
when ranks share a GPU (two ranks on one H200), gloo on the CPU without CUDA (then no Thunder: torch DDP, plumbing
only). Each rank checks, and prints as one JSON line (``nvscope-rank-result {...}``, or an error line):
1. a decorated step (@with_nv_options(enable=["static_fusion_count"])) runs every forward and backward nvFuser fusion
   under the options (audit records, and kernel names: nvfuser_<n> under that option);
2. an unscoped step runs none under them, and a step scoped on rank 0 only is scoped on rank 0 only;
3. the losses of the scoped run match the unscoped run, and both match eager PyTorch trained on the global batch
   (every rank starts from different weights: only the wrapper's broadcast from rank 0 makes that match);
4. nothing deadlocks: every rank reaches the final barrier before printing, within --deadline seconds.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch
import torch.distributed as tdist
from _distributed import Placement, deadline, emit, error_report, init
from _env import gpu_stack

import nvscope
import nvscope.thunder
from nvscope import current_options, with_nv_options

ENABLE = ["static_fusion_count"]  # renames every nvFuser kernel nvfuser_<n>: visible, harmless
EXPECTED = nvscope.OptionSet(enable=ENABLE)
LR = 0.1
NUMBERED = re.compile(r"nvfuser_\d+$")  # nvFuser kernel names under static_fusion_count: nvf::nvfuser_<n>
Step = Callable[[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, list[nvscope.OptionSet]], torch.Tensor]


class UsageError(Exception):
    pass


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(64, 128)
        self.l2 = torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(self.l2(torch.nn.functional.gelu(self.l1(x))) + x, (64,))


def wrap(model: torch.nn.Module, parallel: str, device: torch.device, thunder_ok: bool,
         broadcast_with_grad: bool) -> tuple[torch.nn.Module, str]:
    """The data-parallel model, and what it is in words."""
    cuda_ids = [device] if device.type == "cuda" else None
    if not thunder_ok:
        if parallel == "fsdp":
            raise UsageError("--parallel fsdp needs Thunder's nvFuser executor on CUDA; here: " + str(gpu_stack()))
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=cuda_ids), "torch DDP (no Thunder)"
    import thunder
    import thunder.distributed

    jitted = thunder.jit(model)
    if parallel == "torch-ddp":
        # torch's DDP broadcasts detached parameters and hooks the gradient accumulators of the ThunderModule's
        # parameters (the user module's own), which Thunder's backward feeds.
        return torch.nn.parallel.DistributedDataParallel(jitted, device_ids=cuda_ids), "torch DDP(thunder.jit)"
    if parallel == "fsdp":
        # fsdp's default device is cuda:LOCAL_RANK, which does not exist when ranks share a GPU: pass ours. It
        # broadcasts under torch.no_grad (thunder/distributed/transforms/fsdp_v2.py), so gloo with CUDA works.
        return (thunder.distributed.fsdp(jitted, device=device, broadcast_from=0),
                "thunder.distributed.fsdp(thunder.jit)")
    if broadcast_with_grad:  # Thunder's ddp as a plain call makes it: fails over gloo with CUDA tensors (see below)
        return thunder.distributed.ddp(jitted), "thunder.distributed.ddp(thunder.jit), broadcast with grad mode on"
    # thunder.distributed.ddp broadcasts rank 0's parameters into the leaf parameters (requires_grad) with grad mode
    # on (DDPTransform.transform_module, thunder/distributed/transforms/ddp_v2.py), at this call. NCCL writes them in
    # place. gloo with CUDA tensors receives into pinned host memory and copies back with Tensor.copy_ on its worker
    # thread, under the caller's thread-local state (ProcessGroupGloo AsyncWork::execute): with grad mode on, that
    # copy_ into a leaf that requires grad raises "a leaf Variable that requires grad is being used in an in-place
    # operation". Under no_grad it is allowed. Grad mode at this call changes nothing else: Thunder reads it per call.
    with torch.no_grad():
        return thunder.distributed.ddp(jitted), "thunder.distributed.ddp(thunder.jit)"


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
         seen: list[nvscope.OptionSet]) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), x.flip(1))
    loss.backward()
    optimizer.step()
    seen.append(current_options())
    return loss.detach()


@with_nv_options(enable=ENABLE)
def scoped_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                seen: list[nvscope.OptionSet]) -> torch.Tensor:
    return step(model, optimizer, x, seen)


def batches(rank: int, steps: int, device: torch.device) -> list[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(1234 + rank)
    return [torch.randn(16, 64, device=device, generator=generator) for _ in range(steps)]


def reference_losses(world: int, steps: int, device: torch.device) -> list[float]:
    """Eager PyTorch, one process, on every rank's batch at once, from rank 0's initial weights."""
    torch.manual_seed(0)
    model = MLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    per_rank = [batches(r, steps, device) for r in range(world)]
    return [step(model, optimizer, torch.cat([b[t] for b in per_rank]), []).item() for t in range(steps)]


def audit_facts(log: nvscope.AuditLog) -> dict[str, Any]:
    records = log.records
    return {"executions": len(records), "phases": dict(Counter(r.phase for r in records)),
            "partitions": sorted({r.route for r in records}),
            "options": sorted({r.options.as_shell() for r in records}),
            "threads": sorted({r.thread for r in records})}


def close(a: list[float], b: list[float], rtol: float, atol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= atol + rtol * abs(y) for x, y in zip(a, b, strict=True))


def run(args: argparse.Namespace, where: Placement, rank: int, world: int) -> dict[str, Any]:
    device = torch.device(where.device)
    missing = gpu_stack()
    thunder_ok = missing is None and device.type == "cuda"
    nvscope.set_development_mode(True)
    if thunder_ok:  # a scope installs the adapter on entry; the unscoped run comes first and must be audited too.
        if not nvscope.thunder.install():
            raise RuntimeError("nvscope could not patch Thunder's nvFuser executor")

    torch.manual_seed(rank)  # different weights on every rank: the wrapper must broadcast rank 0's
    model, wrapper = wrap(MLP().to(device), args.parallel, device, thunder_ok, args.broadcast_with_grad)
    initial = [p.detach().clone() for p in model.parameters()]  # this rank's (shard of the) broadcast weights
    local = batches(rank, args.steps, device)

    def train(run_step: Step) -> tuple[list[float], list[str], nvscope.AuditLog]:
        with torch.no_grad():  # every run starts from the same weights; the compiled model is reused
            for p, value in zip(model.parameters(), initial, strict=True):
                p.copy_(value)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        seen: list[nvscope.OptionSet] = []
        losses = []
        with nvscope.audit() as log:
            for x in local:
                loss = run_step(model, optimizer, x, seen)
                tdist.all_reduce(loss)
                losses.append(loss.item() / world)
        return losses, [s.as_shell() for s in seen], log

    rank0_only_step = scoped_step if rank == 0 else step  # the other ranks run outside any scope
    base_losses, base_seen, base_log = train(step)
    scoped_losses, scoped_seen, scoped_log = train(scoped_step)
    _, mixed_seen, mixed_log = train(rank0_only_step)
    reference = reference_losses(world, args.steps, device)

    want = EXPECTED.as_shell()
    failed = []
    if base_seen != [""] * args.steps or scoped_seen != [want] * args.steps:
        failed.append("current_options() per step")
    if mixed_seen != [want if rank == 0 else ""] * args.steps:
        failed.append("rank-0-only scope per rank")
    if not close(scoped_losses, base_losses, rtol=1e-4, atol=1e-6):
        failed.append("scoped losses == unscoped losses")
    if not close(base_losses, reference, rtol=2e-4, atol=1e-5):
        failed.append("losses == eager reference on the global batch")

    result: dict[str, Any] = {
        "backend": where.backend, "device": where.device, "placement": where.why, "wrapper": wrapper,
        "thunder": None, "fusions_impossible": missing, "steps": args.steps,
        "losses": {"unscoped": base_losses, "scoped": scoped_losses, "reference": reference},
        "seen": {"unscoped": base_seen, "scoped": scoped_seen, "rank0_only": mixed_seen},
        "audit": None, "kernels": None,
    }
    if thunder_ok:
        import thunder

        from nvscope import kernel_names  # the same name cutting as the library and the GPU tests

        def nvfuser_kernels(run_step: Step) -> list[str]:
            optimizer = torch.optim.SGD(model.parameters(), lr=LR)
            names, _ = kernel_names(lambda: run_step(model, optimizer, local[0], []))  # compiled already
            return sorted({n for n in names if "nvfuser" in n})

        scoped_kernels, plain_kernels = nvfuser_kernels(scoped_step), nvfuser_kernels(step)
        audits = {"unscoped": audit_facts(base_log), "scoped": audit_facts(scoped_log),
                  "rank0_only": audit_facts(mixed_log)}
        result.update(thunder=thunder.__version__, audit=audits,
                      kernels={"scoped": scoped_kernels, "unscoped": plain_kernels})
        base, scoped, mixed = audits["unscoped"], audits["scoped"], audits["rank0_only"]
        if not (base["executions"] and base["partitions"] == ["default"] and base["options"] == [""]):
            failed.append("unscoped run: fusions ran, none under the options")
        if not (set(scoped["phases"]) == {"forward", "backward"} and scoped["options"] == [want]
                and set(scoped["partitions"]) <= {"new", "reused"} and scoped["executions"] == base["executions"]):
            failed.append("decorated run: every forward and backward fusion under the options")
        mine = (mixed["options"] == [want] and set(mixed["partitions"]) <= {"new", "reused"}) if rank == 0 else (
            mixed["options"] == [""] and mixed["partitions"] == ["default"])
        if not (mine and mixed["executions"] == base["executions"]):
            failed.append("rank-0-only run: under the options on rank 0 only")
        if not (scoped_kernels and all(NUMBERED.search(k) for k in scoped_kernels)):
            failed.append("kernels of a decorated step: all nvfuser_<n>")
        if not plain_kernels or any(NUMBERED.search(k) for k in plain_kernels):
            failed.append("kernels of an unscoped step: none nvfuser_<n>")

    tdist.barrier()  # every rank got here: no deadlock
    result.update(failed=failed, ok=not failed)
    return result


def describe(rank: int, world: int, r: dict[str, Any]) -> str:
    lines = [f"rank {rank}/{world}: {r['wrapper']}, {r['backend']} on {r['device']} ({r['placement']})",
             f"  losses unscoped {[round(v, 5) for v in r['losses']['unscoped']]}",
             f"  losses scoped   {[round(v, 5) for v in r['losses']['scoped']]}",
             f"  eager reference {[round(v, 5) for v in r['losses']['reference']]}"]
    if r["audit"] is None:
        lines.append(f"  no nvFuser fusion can run here ({r['fusions_impossible']}): checked scopes, DDP, losses")
    else:
        a = r["audit"]
        lines += [f"  fusions: unscoped run {a['unscoped']['executions']} {a['unscoped']['partitions']}, "
                  f"decorated run {a['scoped']['phases']} {a['scoped']['partitions']} {a['scoped']['options']}, "
                  f"rank-0-only run {a['rank0_only']['partitions']}",
                  f"  nvFuser kernels, decorated step: {r['kernels']['scoped']}",
                  f"  nvFuser kernels, unscoped step:  {r['kernels']['unscoped']}"]
    lines.append(f"  checks: {'all passed' if r['ok'] else 'FAILED: ' + '; '.join(r['failed'])}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallel", choices=["ddp", "torch-ddp", "fsdp"], default="ddp")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds, for each collective")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds, for the whole process")
    parser.add_argument("--broadcast-with-grad", action="store_true",
                        help="build Thunder's ddp with grad mode on (a plain call): shows the failure that "
                             "docs/distributed.md explains")
    args = parser.parse_args()
    # One process per rank, each told its rank by its launcher: started with plain `python`, none is set, and
    # torch.distributed would fail with a traceback about an environment variable.
    unset = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if unset:
        parser.error(f"launch it with torchrun, one process per rank: torchrun --standalone --nproc-per-node 2 "
                     f"{sys.argv[0]} (not set here: {', '.join(unset)})")

    start = time.monotonic()
    where, rank, world = init(args.timeout)
    header = {"rank": rank, "world": world, "parallel": args.parallel, "backend": where.backend,
              "device": where.device}
    timer = deadline(args.deadline, header)
    try:
        result = run(args, where, rank, world)
    except Exception as error:
        traceback.print_exc()
        emit({**header, **error_report(error)})
        sys.stderr.flush()
        # torchrun stops the other ranks. os._exit: a normal exit would wait for collectives still queued in the
        # process group, which may never complete now.
        os._exit(2 if isinstance(error, UsageError) else 1)
    for r in range(world):  # in rank order
        if r == rank:
            print(describe(rank, world, result), flush=True)
            emit({**header, **result, "seconds": round(time.monotonic() - start, 1)})
        tdist.barrier()
    timer.cancel()
    tdist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    code = main()
    # nvFuser 0.2.35's multidevice Communicator aborts in its destructor at interpreter teardown after a process
    # group (seen on the H200, both ranks after "ok"): every result has been printed by now, so leave without
    # running module teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
