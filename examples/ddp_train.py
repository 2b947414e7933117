"""Scoped nvFuser options under torch.distributed: data-parallel training with Thunder, one process per rank.

    torchrun --nproc-per-node 2 examples/ddp_train.py     # 2 GPUs: NCCL, thunder.distributed.ddp(thunder.jit(model))
    torchrun --nproc-per-node 2 examples/ddp_train.py     # no CUDA/Thunder: gloo on CPU, torch DDP (plumbing only)

Each rank checks, and prints:
1. a decorated step (@with_nv_options(enable=["static_fusion_count"])) runs every forward and backward nvFuser fusion
   under the options (audit records, and kernel names from torch.profiler: nvfuser_<n> under that option);
2. an unscoped step runs none under them, and a step scoped on rank 0 only is scoped on rank 0 only;
3. the loss of a scoped run matches an unscoped run from the same initialisation (the option only renames kernels);
4. nothing deadlocks: every rank reaches the final barrier.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch
import torch.distributed as tdist
from _env import gpu_stack

import nvscope
from nvscope import current_options, nv_options

OPTIONS = {"enable": ["static_fusion_count"]}
NUMBERED = re.compile(r"nvfuser_\d+$")
STEPS = 5


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(64, 128)
        self.l2 = torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(self.l2(torch.nn.functional.gelu(self.l1(x))) + x, (64,))


def main() -> None:
    cuda = torch.cuda.is_available()
    tdist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=5))
    rank, world = tdist.get_rank(), tdist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    missing = gpu_stack()
    use_thunder = missing is None
    nvscope.set_development_mode(True)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)  # the same initial weights on every rank and for every run
        model = MLP().to(device)
        if use_thunder:
            import thunder
            import thunder.distributed

            return thunder.distributed.ddp(thunder.jit(model))
        return torch.nn.parallel.DistributedDataParallel(model)

    generator = torch.Generator(device=device)

    def batch() -> torch.Tensor:
        return torch.randn(16, 64, device=device, generator=generator)

    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, seen: list[object]) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        x = batch()
        loss = torch.nn.functional.mse_loss(model(x), x.flip(1))
        loss.backward()
        optimizer.step()
        seen.append(current_options())
        return loss.detach()

    def train(scope: nv_options | None) -> tuple[list[float], list[object], nvscope.AuditLog]:
        generator.manual_seed(1234 + rank)
        model = build()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        seen: list[object] = []
        losses = []
        with nvscope.audit() as log:
            for _ in range(STEPS):
                if scope is None:
                    loss = step(model, optimizer, seen)
                else:
                    loss = scope(step)(model, optimizer, seen)  # an nv_options object is also a decorator
                tdist.all_reduce(loss, op=tdist.ReduceOp.SUM)
                losses.append(loss.item() / world)
        return losses, seen, log

    scoped_everywhere = nv_options(**OPTIONS)
    base_losses, base_seen, base_log = train(None)
    scoped_losses, scoped_seen, scoped_log = train(scoped_everywhere)
    rank0_only = nv_options(**OPTIONS) if rank == 0 else nv_options()
    _, mixed_seen, mixed_log = train(rank0_only)

    expected = nvscope.OptionSet(**OPTIONS)
    assert all(s == nvscope.OptionSet() for s in base_seen), base_seen
    assert all(s == expected for s in scoped_seen), scoped_seen
    assert all(s == (expected if rank == 0 else nvscope.OptionSet()) for s in mixed_seen), mixed_seen
    torch.testing.assert_close(torch.tensor(scoped_losses), torch.tensor(base_losses), rtol=1e-4, atol=1e-5)
    lines = [f"rank {rank}/{world} ({'Thunder + nvFuser' if use_thunder else 'CPU, no Thunder: ' + str(missing)})",
             f"  losses unscoped {[round(v, 5) for v in base_losses]}",
             f"  losses scoped   {[round(v, 5) for v in scoped_losses]}  (match: yes)"]

    if use_thunder:
        assert base_log.records and all(r.partition == "default" for r in base_log.records)
        assert {r.phase for r in scoped_log.records} == {"forward", "backward"}, scoped_log.summary()
        assert all(r.options == expected for r in scoped_log.records), scoped_log.summary()
        mixed_partitions = {r.partition for r in mixed_log.records}
        assert (mixed_partitions <= {"new", "reused"}) if rank == 0 else (mixed_partitions == {"default"})
        from torch.profiler import ProfilerActivity, profile

        def kernels(scope: nv_options) -> list[str]:
            model = build()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scope(step)(model, optimizer, [])  # compile outside the profiler
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                scope(step)(model, optimizer, [])
                torch.cuda.synchronize()
            return sorted({e.name.split("(")[0] for e in prof.events()
                           if e.device_type.name == "CUDA" and "nvfuser" in e.name})

        scoped_kernels, plain_kernels = kernels(scoped_everywhere), kernels(nv_options())
        assert scoped_kernels and all(NUMBERED.search(k) for k in scoped_kernels), scoped_kernels
        assert plain_kernels and not any(NUMBERED.search(k) for k in plain_kernels), plain_kernels
        lines += [f"  fusion executions: scoped run {len(scoped_log)} (forward+backward, all under the options), "
                  f"rank-0-only run: {sorted(mixed_partitions)} on this rank",
                  f"  nvFuser kernels, scoped step:   {scoped_kernels}",
                  f"  nvFuser kernels, unscoped step: {plain_kernels}"]
    else:
        lines.append("  no fusion can run here: this checked the scope per rank and step, and DDP, only")

    tdist.barrier()
    for r in range(world):  # print in rank order
        if r == rank:
            print("\n".join(lines), flush=True)
        tdist.barrier()
    if rank == 0:
        print(f"all {world} ranks done: no deadlock, options scoped per rank and step")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
