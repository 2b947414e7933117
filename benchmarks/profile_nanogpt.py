"""GPU: `nvscope.profile` of Thunder's nanoGPT training step under two performance options of the catalog.

    source .gpu/activate.sh && python benchmarks/profile_nanogpt.py --out "$NVSCOPE_RESULTS" [--options tma_pointwise]

The model: ``thunder.tests.nanogpt_model.GPT`` with 4 layers x 768 (12 heads), block size 512, GPT-2's vocabulary,
bf16, batch 8 x 512 tokens; the step is the loss (``GPT.forward(idx, targets)``) and its backward, jitted with
``thunder.jit(model)``. Each option set is profiled fusion by fusion against the defaults (`nvscope.profile`): GPU
time per fusion (CUDA events around each fusion execution, paired randomized rounds, median ratio with a 95%
interval), the schedulers nvFuser chose for each segment with and without the options (read off the kernel names;
``--schedulers nvfuser`` asks nvFuser's PythonProfiler, which crashed on this model with nvFuser 0.2.35), compile
time, and whether each fusion's outputs match the defaults'.

Writes ``profile_nanogpt_<options>.txt`` (the ranked table), ``.json`` and ``.png`` under --out, and prints
``== <options>: ...`` summary lines: fusions, how many the options changed (faster / slower / not reached /
failed), schedulers that changed, the whole step's ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import thunder
import torch
from thunder.tests.nanogpt_model import GPT, GPTConfig

import nvscope
from nvscope import ProfileResult, profile

OPTIONS = ["tma_pointwise", "ws_normalization"]  # pointwise and normalization fusions: what nanoGPT's are made of
LAYERS, EMBED, HEADS, BLOCK, BATCH, VOCAB = 4, 768, 12, 512, 8, 50304


def nanogpt() -> tuple[Any, torch.nn.Module, dict[str, Any]]:
    torch.manual_seed(0)
    config = GPTConfig(n_layer=LAYERS, n_head=HEADS, n_embd=EMBED, block_size=BLOCK, vocab_size=VOCAB, dropout=0.0)
    model = GPT(config).cuda().to(torch.bfloat16)
    idx = torch.randint(0, VOCAB, (BATCH, BLOCK), device="cuda")
    targets = torch.randint(0, VOCAB, (BATCH, BLOCK), device="cuda")
    jitted = thunder.jit(model)

    def loss() -> Any:
        return jitted(idx, targets)[1]

    setup = {"model": f"nanoGPT {LAYERS} layers x {EMBED} ({HEADS} heads), block {BLOCK}, vocab {VOCAB}, bf16",
             "input": f"batch {BATCH} x {BLOCK} tokens", "jit": "thunder.jit(model)", "step": "loss + backward"}
    return loss, model, setup


def environment() -> dict[str, Any]:
    found = nvscope.catalog().nvfuser
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "thunder": thunder.__version__,
            "nvfuser": None if found is None else str(found.version), "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d")}


def summary(spec: str, result: ProfileResult) -> None:
    statuses = [r.status for r in result.rows]
    changed = [r.fusion for r in result.rows if r.schedulers["default"] != r.schedulers["options"]]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    print(f"== {spec}: {len(result.rows)} fusions: {counts}")
    print(f"== {spec}: schedulers changed on {len(changed)} fusions"
          + (f" ({', '.join(changed[:6])}{' ...' if len(changed) > 6 else ''})" if changed else "")
          + f"; schedulers from {result.schedulers_from or 'nothing (no CUDA/nvFuser profiler)'}")
    best = result.ranked()[:3]
    print(f"== {spec}: most time saved: "
          + "; ".join(f"{r.fusion} {r.delta_ms:+.3f} ms ({r.status})" for r in best if r.delta_ms is not None))
    if result.step is not None:
        s = result.step
        print(f"== {spec}: whole step ratio {s.median:.3f} ({s.low:.3f}-{s.high:.3f}), {s.verdict}; "
              f"{result.elapsed_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("NVSCOPE_RESULTS", "benchmarks/results"),
                        help="directory for the results (default $NVSCOPE_RESULTS, else benchmarks/results)")
    parser.add_argument("--options", action="append",
                        help=f"an option set to profile, as nvscope search writes it (repeat; default {OPTIONS})")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from nvscope._candidates import parse_candidate

    began = time.perf_counter()
    loss, model, setup = nanogpt()
    print(f"== nanoGPT: {setup['model']}; {setup['input']}", flush=True)
    for spec in args.options or OPTIONS:
        options = parse_candidate(spec)
        result = profile(loss, enable=options.enable_list(), disable=options.disable_list(), backward=True,
                         module=model, rounds=args.rounds, steps_per_round=args.steps)
        table = result.table()
        print(table, flush=True)
        base = os.path.join(args.out, f"profile_nanogpt_{spec.replace(',', '_')}")
        with open(base + ".txt", "w", encoding="utf-8") as f:
            f.write(f"{setup['model']}; {setup['input']}; {setup['jit']}\n"
                    + " | ".join(f"{k} {v}" for k, v in environment().items()) + f"\n\n{table}\n")
        with open(base + ".json", "w", encoding="utf-8") as f:
            json.dump({"options": spec, "setup": setup, "environment": environment(), "result": result.as_dict()},
                      f, indent=2, allow_nan=False)
        try:
            result.plot(base + ".png", title=f"nvscope profile: nanoGPT {LAYERS}x{EMBED} fwd+bwd under {spec}")
        except ImportError as error:
            print(f"no chart: {error}", file=sys.stderr)
        summary(spec, result)
    print(f"total {time.perf_counter() - began:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
