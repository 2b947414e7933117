"""GPU: `nvscope.bisect` on two known problems; prints summary lines and writes each result under --out.

    source .gpu/activate.sh && python benchmarks/bisect_gpu.py --out "$NVSCOPE_RESULTS" [--part assert,numerics]
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

* ``assert``: nvFuser's INTERNAL ASSERT at csrc/scheduler/runtime_info.h:69, from the bf16 Linear-GELU-Linear
  training step jitted with ``nv_enable_linear=True, nv_enable_matmul=True`` under ``enable=["fuse_matmul"],
  disable=["matmul_expr_eval"]`` (forward + backward). The bisect names the option(s) and fusion(s); then the
  printed ``nv_options(...)`` line is run alone, in a fresh process, around the same step: it must reproduce the
  assert; and the result says whether the given options on every other fusion ran clean.
* ``numerics``: ``ws_normalization`` on the host-bound MLP of ``benchmarks/thunder_steps.py`` (fp32, forward +
  backward), which moved a parameter gradient past the float32 tolerance in the search on the H200
  (benchmarks/results/search_mlp-next-2026-12-03-257f82b.txt): the bisect with ``check="numerics"`` finds the
  fusion(s) that do it.
* ``subprocess`` (not in the default parts: one fresh process per probe, about a minute each): the ``assert``
  problem bisected from the command line, ``nvscope bisect --subprocess``, judged by the exit code; its runs share
  nvFuser's kernel_db. ``subprocess-nodb``: the same with ``--no-kernel-db`` (every run compiles everything): the
  ``== <part>: OK in N s`` lines of the two compare the wall time.

Each part writes ``bisect_<part>.json`` (the result, the setup, the environment) and ``bisect_<part>.txt`` (the
report) and prints ``== <part>: ...`` summary lines, among them the probes against options x fusions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

import thunder
import thunder_steps  # the MLP; importable because Python puts this script's directory on sys.path
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "gpu"))
from workloads import CODEGEN, LINEAR_GELU, LINEAR_GELU_SHAPES, bisect_linear_gelu_assert

import nvscope
from nvscope import BisectResult, bisect


def environment() -> dict[str, Any]:
    found = nvscope.catalog().nvfuser
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "thunder": thunder.__version__,
            "nvfuser": None if found is None else str(found.version), "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d")}


def save(out: str, part: str, result: BisectResult, setup: dict[str, Any], extra: dict[str, Any]) -> None:
    with open(os.path.join(out, f"bisect_{part}.txt"), "w", encoding="utf-8") as f:
        f.write(result.report() + "\n")
    document = {"part": part, "setup": setup, "environment": environment(), "result": result.as_dict(), **extra}
    with open(os.path.join(out, f"bisect_{part}.json"), "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2, allow_nan=False)


def summary(part: str, result: BisectResult) -> None:
    n_options = len(result.given.enable) + len(result.given.disable)
    if not result.reproduced:
        print(f"== {part}: NOT reproduced: {result.problem}")
    for i, culprit in enumerate(result.culprits, 1):
        print(f"== {part}: culprit {i}: {culprit.line()}")
    print(f"== {part}: {result.probes} probes for {n_options} options x {len(result.all_fusions)} fusions "
          f"({n_options * len(result.all_fusions)} pairs); {result.elapsed_s:.0f} s")
    if result.reproduced:
        print(f"== {part}: problem: {result.problem.splitlines()[0][:200]}")
        rest = {True: "clean", False: "NOT clean", None: "no other fusion"}[result.others_clean]
        print(f"== {part}: the given options on every fusion but the culprits': {rest}")
        for path in result.repro_scripts:
            print(f"== {part}: repro script: {path}")


def part_assert(out: str) -> bool:
    result, shape = bisect_linear_gelu_assert(lambda line: print(f"== assert: {line}; trying the next", flush=True))
    summary("assert", result)
    extra: dict[str, Any] = {}
    ok = result.reproduced and "runtime_info.h" in result.problem
    if result.reproduced:
        # The printed line alone, around the same step, in a fresh process with no NVFUSER_* variable.
        script = LINEAR_GELU.format(shape=shape) + textwrap.dedent(f"""\
            with {result.line()}:
                jitted(x).float().square().mean().backward()
            torch.cuda.synchronize()
            print("the step ran clean")
            """)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, dir=out, prefix="bisect_line_") as f:
            f.write(script)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVFUSER_")}
        done = subprocess.run([sys.executable, f.name], capture_output=True, text=True, timeout=600, env=env)
        output = done.stdout + done.stderr
        reproduced = done.returncode != 0 and "runtime_info.h" in output
        print(f"== assert: the printed line alone in a fresh process ({f.name}): exit {done.returncode}, "
              f"{'reproduces the assert' if reproduced else 'does NOT reproduce the assert'}")
        extra = {"fresh_process": {"script": f.name, "exit": done.returncode, "reproduced": reproduced,
                                   "tail": output[-1500:]}}
        ok = ok and reproduced and result.others_clean is not False
    save(out, "assert", result, {"model": f"bf16 Linear-GELU-Linear {shape}", "jit": "nv_enable_linear=True, "
                                 "nv_enable_matmul=True", "options": CODEGEN, "step": "forward + backward"}, extra)
    return ok


def part_numerics(out: str) -> bool:
    model, x = thunder_steps.make_mlp()
    jitted = thunder.jit(model)

    def loss() -> Any:
        return jitted(x).square().mean()

    result = bisect(loss, enable=["ws_normalization"], check="numerics", backward=True, module=model)
    summary("numerics", result)
    save(out, "numerics", result, {"model": f"thunder_steps MLP: {thunder_steps.BLOCKS} blocks x "
                                   f"{thunder_steps.HIDDEN}, batch {thunder_steps.BATCH}, fp32",
                                   "options": {"enable": ["ws_normalization"]}, "check": "numerics"}, {})
    return result.reproduced and 0 < len(result.fusions) < len(result.all_fusions)


def part_subprocess(out: str, kernel_db: bool = True) -> bool:
    name = "subprocess" if kernel_db else "subprocess-nodb"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, dir=out, prefix="bisect_program_") as f:
        f.write(LINEAR_GELU.format(shape=LINEAR_GELU_SHAPES[0]) + "jitted(x).float().square().mean().backward()\n"
                "torch.cuda.synchronize()\n")
    json_path = os.path.join(out, f"bisect_{name.replace('-', '_')}.json")
    command = [sys.executable, "-m", "nvscope", "bisect", "--subprocess", "--enable", "fuse_matmul", "--disable",
               "matmul_expr_eval", *([] if kernel_db else ["--no-kernel-db"]), "--json", json_path, f.name]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, timeout=1800)
    if not os.path.exists(json_path):
        print(f"== {name}: no result (exit {done.returncode})")
        return False
    with open(json_path, encoding="utf-8") as file:
        result = BisectResult.from_dict(json.load(file))
    summary(name, result)
    print(f"== {name}: {result.probes} probes in {result.elapsed_s:.0f} s "
          f"({result.elapsed_s / max(1, result.probes + 1):.1f} s per run); reproduce with: {result.command()}")
    return result.reproduced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("NVSCOPE_RESULTS", "benchmarks/results"),
                        help="directory for the results (default $NVSCOPE_RESULTS, else benchmarks/results)")
    parser.add_argument("--part", default="assert,numerics",
                        help="assert, numerics, subprocess, subprocess-nodb (comma-separated)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    nvscope.set_development_mode(True)
    began = time.perf_counter()
    parts = {"assert": part_assert, "numerics": part_numerics, "subprocess": part_subprocess,
             "subprocess-nodb": lambda out: part_subprocess(out, kernel_db=False)}
    failed = []
    for name in args.part.split(","):
        start = time.perf_counter()
        ok = parts[name.strip()](args.out)
        print(f"== {name}: {'OK' if ok else 'FAILED'} in {time.perf_counter() - start:.0f} s", flush=True)
        if not ok:
            failed.append(name)
    print(f"total {time.perf_counter() - began:.0f} s; results in {args.out}"
          + (f"; FAILED: {failed}" if failed else ""))
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
