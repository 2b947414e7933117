"""GPU: `nvscope.profile` of Thunder's nanoGPT training step under two performance options of the catalog.

    source .gpu/activate.sh && python benchmarks/profile_nanogpt.py --out "$NVSCOPE_RESULTS" [--options tma_pointwise]
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

The model: ``thunder.tests.nanogpt_model.GPT`` with 4 layers x 768 (12 heads), GPT-2's vocabulary, by default float32,
batch 4 x 256 tokens (tests/gpu/workloads.py's nanoGPT); ``--dtype bfloat16 --batch 8 --seq 512`` is not the default
because that step aborts on the H200 with a CUDA illegal memory access (then ``cublasCreate`` fails) under plain
``thunder.jit`` with nvscope not imported (nvFuser 0.2.35, torch 2.11, Thunder 0.2.7.dev). The step is the loss
(``GPT.forward(idx, targets)``) and its backward, jitted with ``thunder.jit(model)``. Each option set is profiled
fusion by fusion against the defaults (`nvscope.profile`): GPU time per fusion (CUDA events around each fusion
execution, paired randomized rounds, median ratio with a 95% interval), the schedulers nvFuser chose for each segment
with and without the options (read off the kernel names; ``--schedulers nvfuser`` asks nvFuser's PythonProfiler
instead), compile time, and whether each fusion's outputs match the defaults'.

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

import nvscope
from nvscope import ProfileResult, profile

GPU_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "gpu")
OPTIONS = ["tma_pointwise", "ws_normalization"]  # pointwise and normalization fusions: what nanoGPT's are made of
LAYERS, EMBED, HEADS = 4, 768, 12


def nanogpt(batch: int, seq: int, dtype: str) -> tuple[Any, Any, dict[str, Any]]:
    import thunder  # here, not at the top: --render runs where Thunder does not import
    import torch

    sys.path.insert(0, GPU_TESTS)
    from workloads import nanogpt_model  # tests/gpu/workloads.py: the nanoGPT the GPU tests use

    model, idx, targets = nanogpt_model(batch, seq, LAYERS, EMBED, getattr(torch, dtype))
    jitted = thunder.jit(model)

    def loss() -> Any:
        return jitted(idx, targets)[1]

    setup = {"model": f"nanoGPT {LAYERS} layers x {EMBED} ({HEADS} heads), block {seq}, vocab "
                      f"{model.config.vocab_size}, {dtype}",
             "input": f"batch {batch} x {seq} tokens", "jit": "thunder.jit(model)", "step": "loss + backward"}
    return loss, model, setup


def environment() -> dict[str, Any]:
    import thunder
    import torch

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


def write(base: str, document: dict[str, Any], result: ProfileResult) -> None:
    """``base``.txt (the table under the setup and environment lines) and ``base``.png (the chart)."""
    setup, table = document["setup"], result.table()
    print(table, flush=True)
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(f"{setup['model']}; {setup['input']}; {setup['jit']}\n"
                + " | ".join(f"{k} {v}" for k, v in document["environment"].items()) + f"\n\n{table}\n")
    try:
        result.plot(base + ".png", title=f"nvscope profile: {setup['model']}, fwd+bwd, under {document['options']}")
    except ImportError as error:
        print(f"no chart: {error}", file=sys.stderr)


def render(paths: list[str]) -> None:
    """Write the table and chart again from saved JSON (no GPU, no Thunder): after a change to how they are drawn."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
        result = ProfileResult.from_dict(document["result"])
        write(path.removesuffix(".json"), document, result)
        summary(document["options"], result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("NVSCOPE_RESULTS", "benchmarks/results"),
                        help="directory for the results (default $NVSCOPE_RESULTS, else benchmarks/results)")
    parser.add_argument("--options", action="append",
                        help=f"an option set to profile, as nvscope search writes it (repeat; default {OPTIONS})")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    parser.add_argument("--schedulers", default="kernels", choices=("kernels", "nvfuser"),
                        help="where the schedulers come from (nvscope.profile's schedulers=)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (the model's block size)")
    parser.add_argument("--dtype", default="float32", help="the model's dtype (a torch dtype name)")
    parser.add_argument("--render", nargs="+", metavar="JSON",
                        help="only write the .txt table and .png chart again from these saved results")
    args = parser.parse_args()
    if args.render:
        render(args.render)
        return
    os.makedirs(args.out, exist_ok=True)
    from nvscope._measure._candidates import parse_candidate

    began = time.perf_counter()
    loss, model, setup = nanogpt(args.batch, args.seq, args.dtype)
    print(f"== nanoGPT: {setup['model']}; {setup['input']}", flush=True)
    for spec in args.options or OPTIONS:
        options = parse_candidate(spec)
        result = profile(loss, enable=options.enable_list(), disable=options.disable_list(), backward=True,
                         module=model, rounds=args.rounds, steps_per_round=args.steps,
                         schedulers=args.schedulers)
        document = {"options": spec, "setup": setup, "environment": environment(), "result": result.as_dict()}
        base = os.path.join(args.out, f"profile_nanogpt_{spec.replace(',', '_')}")
        with open(base + ".json", "w", encoding="utf-8") as f:
            json.dump(document, f, indent=2, allow_nan=False)
        write(base, document, result)
        summary(spec, result)
    print(f"total {time.perf_counter() - began:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
