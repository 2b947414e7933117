"""GPU: `nvscope.search` on two real workloads; prints each ranked table and writes its JSON and PNG chart.

    source .gpu/activate.sh && python benchmarks/search_workloads.py --out "$OUT" [--quick] [--workload mlp|block]
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

Workloads, each a training step (forward + backward) searched with ``backward=True`` and its parameters' gradients
compared against the default's:

* ``mlp``: the host-bound MLP of ``benchmarks/thunder_steps.py`` (6 blocks of Linear, GELU, residual, LayerNorm;
  hidden 256, batch 8, fp32): a dozen small fusions per step, where options can only change host-side costs and
  the small kernels.
* ``block``: a bf16 transformer-style MLP block, large enough to be GPU-bound (LayerNorm, Linear to 4 x hidden,
  GELU, Linear back, residual; 2 blocks; batch 8 x sequence 1024 x hidden 2048). Jitted with
  ``nv_enable_linear=True`` so that the linears reach nvFuser (by default Thunder gives them to cuBLAS directly and
  ``fuse_matmul`` could change nothing); falls back to plain ``thunder.jit`` if that configuration cannot run here.

Each candidate compiles the step's fusions anew (seconds each, tens of seconds for the MLP's dozen fusions), so the
candidate lists are short and chosen for what each workload's fusions contain; ``--quick`` halves them and the rounds.
Writes ``search_<workload>.txt`` (the table), ``.json`` (the result and the setup) and ``.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import thunder
import thunder_steps  # the MLP workload; importable because Python puts this script's directory on sys.path
import torch

import nvscope
from nvscope import SearchResult, search

CANDIDATES = {
    "mlp": (["fast_math", "tma_pointwise", "ws_normalization"],
            ["tma_reduction", "tma_inner_persistent", "-welford_vectorization"]),
    "block": (["fuse_matmul,-matmul_expr_eval", "fast_math", "ws_normalization"],
              ["tma_pointwise", "tma_inner_persistent", "-welford_vectorization"]),
}
# (rounds, calls per round): a step of the MLP takes ~4 ms, one of the block ~10 ms.
TIMING = {"mlp": ((30, 10), (12, 10)), "block": ((30, 4), (12, 4))}
BATCH, SEQUENCE, HIDDEN, DEPTH = 8, 1024, 2048, 2


class MLPBlock(torch.nn.Module):
    """Pre-norm transformer MLP sub-block: x + fc2(gelu(fc1(norm(x))))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def mlp() -> tuple[Callable[[], Any], torch.nn.Module, dict[str, Any]]:
    model, x = thunder_steps.make_mlp()
    jitted = thunder.jit(model)

    def loss() -> Any:
        return jitted(x).square().mean()

    setup = {"model": f"thunder_steps MLP: {thunder_steps.BLOCKS} blocks x {thunder_steps.HIDDEN}, batch "
                      f"{thunder_steps.BATCH}, fp32", "jit": "thunder.jit(model)"}
    return loss, model, setup


def block() -> tuple[Callable[[], Any], torch.nn.Module, dict[str, Any]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[MLPBlock(HIDDEN) for _ in range(DEPTH)]).cuda().to(torch.bfloat16)
    x = torch.randn(BATCH, SEQUENCE, HIDDEN, device="cuda", dtype=torch.bfloat16)
    setup = {"model": f"{DEPTH} x (LayerNorm, Linear {HIDDEN}->{4 * HIDDEN}, GELU, Linear {4 * HIDDEN}->{HIDDEN}, "
                      f"residual), bf16, input {BATCH} x {SEQUENCE} x {HIDDEN}"}
    for jit_kwargs in ({"nv_enable_linear": True}, {}):
        jitted = thunder.jit(model, **jit_kwargs)

        def loss(jitted: Any = jitted) -> Any:
            return jitted(x).float().square().mean()

        try:
            # The default must work in this configuration, or the search has no baseline. Probed on a jit of its
            # own, so that the search's first call of the default is a real compile, like every candidate's.
            probe = thunder.jit(model, **jit_kwargs)
            probe(x).float().square().mean().backward()
            torch.cuda.synchronize()
            del probe
            model.zero_grad(set_to_none=True)
        except Exception as error:
            print(f"block: thunder.jit(model, {jit_kwargs}) fails here ({type(error).__name__}: "
                  f"{str(error).splitlines()[0][:200]}); trying plain thunder.jit", file=sys.stderr)
            continue
        setup["jit"] = f"thunder.jit(model{''.join(f', {k}={v}' for k, v in jit_kwargs.items())})"
        return loss, model, setup
    raise SystemExit("block: no thunder.jit configuration runs the default step")


def environment() -> dict[str, Any]:
    found = nvscope.catalog().nvfuser
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "thunder": thunder.__version__,
            "nvfuser": None if found is None else str(found.version), "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d")}


def run(name: str, out: str, quick: bool, candidates: list[str] | None, seed: int) -> SearchResult:
    began = time.perf_counter()
    loss, model, setup = {"mlp": mlp, "block": block}[name]()
    full, extra = CANDIDATES[name]
    chosen = candidates or (full if quick else full + extra)
    rounds, steps = TIMING[name][1 if quick else 0]
    print(f"== {name}: {setup['model']}; {setup['jit']}; {len(chosen)} candidates, {rounds} rounds x {steps} steps",
          flush=True)
    result = search(loss, candidates=chosen, rounds=rounds, steps_per_round=steps, backward=True, module=model,
                    seed=seed)
    header = (f"{name}: {setup['model']}; {setup['jit']}; forward + backward, parameter gradients compared\n"
              + " | ".join(f"{k} {v}" for k, v in environment().items()))
    table = f"{header}\n\n{result.table()}\n"
    print(table, flush=True)
    base = os.path.join(out, f"search_{name}")
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(table)
    document = {"workload": name, "setup": setup, "environment": environment(), "quick": quick,
                "command": " ".join(["python", "benchmarks/search_workloads.py", *sys.argv[1:]]),
                "result": result.as_dict()}
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2, allow_nan=False)
    try:
        result.plot(base + ".png", title=f"nvscope search: {name} ({setup['jit']}) -> {result.recommendation()}")
    except ImportError as error:
        print(f"{name}: no chart: {error}", file=sys.stderr)
    print(f"== {name}: {time.perf_counter() - began:.0f} s; wrote {base}.txt/.json/.png", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for the outputs (default $OUT)")
    parser.add_argument("--workload", choices=("mlp", "block", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="3 candidates per workload and 12 rounds")
    parser.add_argument("--candidates", action="append", help="override the candidate list (repeat)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    began = time.perf_counter()
    for name in ("mlp", "block") if args.workload == "all" else (args.workload,):
        run(name, args.out, args.quick, args.candidates, args.seed)
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
