"""The first forward of a warm model inside a scope whose options cannot affect any of its fusions, against a warm
forward, from fresh processes (the per-fusion issue's proof 1, timed).

Thunder's nanoGPT (thunder/tests/nanogpt_model.py, 4 x 768, plain ``thunder.jit``) holds no matmul or linear in its
nvFuser fusions, so ``fuse_matmul``/``-matmul_expr_eval`` cannot change any of them: nvscope keeps them on their
default kernels. Before the catalog's gates, this first scoped forward recompiled all of them (measured 3.5-4.3 s
against 2.5 ms warm). For contrast, the same first forward under ``static_fusion_count``, which changes every fusion,
really recompiles. Each process: build and compile the model, time warm forwards, then the first forward in each
scope; ratios are per process (paired), summarized over processes with a median and a 95% interval.

    python benchmarks/first_forward.py [--processes 5] [--out DIR]      # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, statistics, sys, time, warnings
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import torch, nvscope
from workloads import CODEGEN, nanogpt
nvscope.set_development_mode(True)
warnings.simplefilter("ignore")
jitted, idx, targets = nanogpt()

def forward():
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        jitted(idx, targets)
    torch.cuda.synchronize()
    return time.perf_counter() - start

compile_s = forward()
warm = statistics.median(forward() for _ in range(7))
with nvscope.audit() as log, nvscope.nv_options(**CODEGEN):
    gated_first = forward()
gated_partitions = sum(r.route == "new" for r in log.records)
with nvscope.audit() as log, nvscope.nv_options(enable=["static_fusion_count"]):
    count_first = forward()
count_partitions = sum(r.route == "new" for r in log.records)
print("RESULT " + json.dumps(dict(compile_s=compile_s, warm_s=warm, gated_first_s=gated_first,
      gated_partitions=gated_partitions, count_first_s=count_first, count_partitions=count_partitions,
      fusions=len(log.fusions()))))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from nvscope._measure._stats import summarize

    results = []
    started = time.perf_counter()
    for i in range(args.processes):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVFUSER_")}
        done = subprocess.run([sys.executable, "-c", CHILD, str(root), str(root / "tests" / "gpu")], env=env,
                              capture_output=True, text=True, timeout=600)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
            return 1
        results.append(json.loads(line[len("RESULT "):]))
        r = results[-1]
        print(f"process {i}: {r['fusions']} fusions; warm {r['warm_s'] * 1e3:.2f} ms; first forward under "
              f"fuse_matmul,-matmul_expr_eval {r['gated_first_s'] * 1e3:.2f} ms ({r['gated_partitions']} partitions); "
              f"under static_fusion_count {r['count_first_s'] * 1e3:.1f} ms ({r['count_partitions']} partitions)",
              flush=True)
    warm = [r["warm_s"] for r in results]
    gated = summarize([r["gated_first_s"] for r in results], warm)
    count = summarize([r["count_first_s"] for r in results], warm)
    lines = [
        f"first forward / warm forward, nanoGPT 4x768, {len(results)} fresh processes "
        f"({time.perf_counter() - started:.0f} s):",
        f"  fuse_matmul,-matmul_expr_eval (gated: no fusion can change): {gated.median:.2f}x "
        f"[{gated.low:.2f}, {gated.high:.2f}], partitions built {sorted({r['gated_partitions'] for r in results})}",
        f"  static_fusion_count (changes every fusion): {count.median:.1f}x [{count.low:.1f}, {count.high:.1f}], "
        f"partitions built {sorted({r['count_partitions'] for r in results})}",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "first_forward.json").write_text(json.dumps({"processes": results, "summary": lines}, indent=1))
        (args.out / "first_forward.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
