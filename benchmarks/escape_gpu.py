"""GPU: ``nv_options(on_error="torch")`` on the failures nvFuser has under its defaults, measured on one Thunder build.

    python benchmarks/escape_gpu.py --out DIR [--part llama_bf16,linear_gelu_env,llama_fp32_healthy] [--rounds 15]

Needs CUDA, torch, nvFuser and Thunder (tests/gpu/workloads.py builds the models). Each part prints one ``== part:``
line and writes ``escape_<part>.json`` under ``--out``:

* ``llama_bf16``: Thunder's Llama-2, 2 layers x 256, bf16, batch 2 x 256, forward + backward, plain ``thunder.jit``,
  one step inside ``nv_options(on_error="torch")``: which fusions escaped (the EscapeWarnings and the audit's "torch"
  records), the loss and every gradient against the same model eager in bf16 (``torch.allclose``, rtol = atol =
  5e-2). Then warm steps, in ``--rounds`` rounds of 3 steps each in a random order per round: the escaped step, the
  eager bf16 step, and the fp32 Llama-2 of the same shape under plain ``thunder.jit`` (nvFuser throughout). Ratios of
  per-round times, with the median and the sign test's 95% interval (`nvscope._measure._stats.summarize`).
* ``linear_gelu_env`` (run in a child process, as the environment must be set before nvFuser loads): the bf16
  Linear-GELU-Linear under ``NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=matmul_expr_eval`` for the whole process,
  one forward + backward step inside ``nv_options(on_error="torch")``.
* ``llama_fp32_healthy``: the fp32 Llama-2 step inside ``nv_options(on_error="torch")``: nothing may be routed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
TOLERANCE = 5e-2


def _llama(dtype: Any, layers: int = 2, dim: int = 256, batch: int = 2, seq: int = 256) -> tuple[Any, Any, Any]:
    from workloads import llama2_model

    model, tokens, targets = llama2_model(layers, dim, batch, seq)
    return model.to(dtype), tokens, targets


def _step(net: Any, run: Any, tokens: Any, targets: Any) -> list[Any]:
    from workloads import llama2_grads

    return llama2_grads(net, run, tokens, targets)


def _escaped_step(jitted: Any, model: Any, tokens: Any, targets: Any) -> tuple[list[Any], list[str], Any]:
    """One step in ``nv_options(on_error="torch")``: (loss and grads, the EscapeWarnings' fusion ids, the audit)."""
    import nvscope

    with warnings.catch_warnings(record=True) as caught, nvscope.audit() as log:
        warnings.simplefilter("always", nvscope.EscapeWarning)
        with nvscope.nv_options(on_error="torch"):
            out = _step(model, jitted, tokens, targets)
    escaped = [str(w.message).split()[2] for w in caught if issubclass(w.category, nvscope.EscapeWarning)]
    return out, escaped, log


def _compare(got: list[Any], want: list[Any]) -> dict[str, Any]:
    import torch

    worst = max(float(((g - w).abs() / (w.abs() + 1)).max()) for g, w in zip(got, want, strict=True))
    ok = all(torch.allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE) for g, w in zip(got, want, strict=True))
    return {"tensors": len(got), "all_close": ok, "max_rel_diff": worst}


def llama_bf16(rounds: int) -> dict[str, Any]:
    import thunder
    import torch

    import nvscope
    from nvscope._measure._stats import summarize

    nvscope.set_development_mode(True)
    model, tokens, targets = _llama(torch.bfloat16)
    eager = copy.deepcopy(model)
    jitted = thunder.jit(model)
    started = time.perf_counter()
    got, escaped, log = _escaped_step(jitted, model, tokens, targets)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    want = _step(eager, eager, tokens, targets)
    routed = sorted({r.fusion for r in log.records if r.route == "torch"})
    result: dict[str, Any] = {
        "first_step_s": round(first_s, 2), "fusions": len(log.fusions()), "escaped": escaped,
        "routed": routed, "numerics": _compare(got, want),
    }
    _, escaped_again, log_again = _escaped_step(jitted, model, tokens, targets)
    result["second_step_escape_warnings"] = len(escaped_again)
    result["second_step_routed"] = sorted({r.fusion for r in log_again.records if r.route == "torch"})
    # Warm steps: escaped bf16, eager bf16, plain fp32 nvFuser.
    fp32, tokens32, targets32 = _llama(torch.float32)
    jitted32 = thunder.jit(fp32)
    scope = nvscope.nv_options(on_error="torch")

    def escaped_step() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nvscope.EscapeWarning)
            with scope:
                _step(model, jitted, tokens, targets)

    variants = {"escaped bf16": escaped_step,
                "eager bf16": lambda: _step(eager, eager, tokens, targets),
                "nvFuser fp32": lambda: _step(fp32, jitted32, tokens32, targets32)}
    for run in variants.values():
        run()
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(3):
                variants[name]()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / 3 * 1e3)
    result["warm_ms_median"] = {name: round(sorted(v)[len(v) // 2], 3) for name, v in times.items()}
    for other in ("eager bf16", "nvFuser fp32"):
        s = summarize(times["escaped bf16"], times[other])
        result[f"escaped / {other}"] = {"median": round(s.median, 3), "low": round(s.low, 3),
                                        "high": round(s.high, 3), "rounds": s.rounds}
    return result


_LINEAR_GELU_CHILD = """
import sys, warnings
sys.path.insert(0, {gpu!r})
import torch, nvscope, workloads
jitted, x, model = workloads.linear_gelu()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", nvscope.EscapeWarning)
    with nvscope.nv_options(on_error="torch"):
        out = jitted(x)
        out.float().sum().backward()
torch.cuda.synchronize()
ids = [str(w.message).split()[2] for w in caught if issubclass(w.category, nvscope.EscapeWarning)]
print("RESULT", {{"completed": True, "escaped": ids, "grad_finite": bool(torch.isfinite(x.grad).all())}})
"""


def linear_gelu_env(rounds: int) -> dict[str, Any]:
    env = dict(os.environ, NVFUSER_ENABLE="fuse_matmul", NVFUSER_DISABLE="matmul_expr_eval")
    child = subprocess.run([sys.executable, "-c", _LINEAR_GELU_CHILD.format(gpu=str(ROOT / "tests" / "gpu"))],
                           env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    if child.returncode != 0 or not lines:
        return {"completed": False, "returncode": child.returncode, "stderr_tail": child.stderr[-2000:]}
    return dict(eval(lines[-1][len("RESULT "):]), returncode=0)


def llama_fp32_healthy(rounds: int) -> dict[str, Any]:
    import thunder
    import torch

    import nvscope

    nvscope.set_development_mode(True)
    model, tokens, targets = _llama(torch.float32)
    jitted = thunder.jit(model)
    _, escaped, log = _escaped_step(jitted, model, tokens, targets)
    routes = sorted({r.route for r in log.records})
    return {"fusions": len(log.fusions()), "escaped": escaped, "routes": routes,
            "routed": sum(1 for r in log.records if r.route == "torch")}


PARTS = {"llama_bf16": llama_bf16, "linear_gelu_env": linear_gelu_env, "llama_fp32_healthy": llama_fp32_healthy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--part", default=",".join(PARTS))
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for part in args.part.split(","):
        started = time.perf_counter()
        try:
            result = PARTS[part](args.rounds)
        except Exception as error:  # a part's failure is its result; the others still run
            result = {"error": f"{type(error).__name__}: {str(error)[:2000]}"}
        result["wall_s"] = round(time.perf_counter() - started, 1)
        (out / f"escape_{part}.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"== {part}: {json.dumps(result, default=str)}", flush=True)


if __name__ == "__main__":
    main()
