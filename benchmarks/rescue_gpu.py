"""GPU: `nvscope rescue` on the four cases of its issue; raw logs and JSON under --out, summary lines on stdout.

    source .gpu/activate.sh && python benchmarks/rescue_gpu.py --out "$NVSCOPE_RESULTS" [--part llama_bf16,...]
    NVSCOPE_GPU_THUNDER=next NVSCOPE_GPU_NVFUSER=0.2.35 source .gpu/activate.sh && python benchmarks/rescue_gpu.py ...
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

Parts (each writes ``rescue_<part>.py`` (the step), ``rescue_<part>.json``, ``rescue_<part>.log`` (the command's
stderr, its progress lines, streamed into the file line by line with the seconds since the start, so a run cut by a
time limit still shows where it was; then its stdout) and prints ``== <part>: ...``):

* ``llama_bf16``: Thunder's Llama-2, 2 layers x 256, in bf16, forward + backward; reference: the same model eager
  in bf16 (loss and every gradient, rtol = atol = 5e-2 through ``--tolerance 5e-2``). The answer, its wall time,
  whether the rescued step runs and matches (the final proof), the repro written.
* ``linear_gelu_env``: the bf16 Linear-GELU-Linear (jitted with ``nv_enable_linear``/``nv_enable_matmul``) under
  ``NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=matmul_expr_eval`` for the whole process, as a user's shell sets them.
* ``nanogpt_sanitize``: nanoGPT 2 x 384, fp32, forward + backward, with ``--sanitize`` (compute-sanitizer memcheck,
  caching allocator off, every cure confirmed twice more): which options, if any, give 0 errors.
* ``llama_fp32_healthy``: Llama-2 fp32: "nothing to rescue", and its wall time against two plain steps in a fresh
  process (``two_steps_s`` in the summary).

Nothing is tuned to a model: the candidates are the catalog's; no cure is a finding (the repro is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_STEP = '''\
import sys
sys.path.insert(0, {gpu!r})
import copy, torch, thunder
import workloads

DTYPE = torch.{dtype}

def _build():
    {build}
    return model, jitted, loss_of

model, jitted, loss_of = _build()
eager_model = copy.deepcopy(model)

def _run(net, call):
    for p in net.parameters():
        p.grad = None
    loss = call()
    loss.backward()
    return [loss.detach().float()] + [p.grad.detach().float() for p in net.parameters()]

def step():
    return _run(model, lambda: loss_of(jitted))

def eager():
    return _run(eager_model, lambda: loss_of(eager_model))

if __name__ == "__main__":
    step()
    step()
'''

_LLAMA = ('model, tokens, targets = workloads.llama2_model(layers=2, dim=256)\n'
          '    model = model.to(DTYPE)\n    jitted = thunder.jit(model)\n'
          '    loss_of = lambda net: workloads.llama2_loss(net, tokens, targets)()')
_NANOGPT = ('jitted, idx, targets = workloads.nanogpt(layers=2, width=384)\n'
            '    model = jitted._model if hasattr(jitted, "_model") else thunder.compile_data(jitted).fn\n'
            '    loss_of = lambda net: net(idx, targets)[1]')
_LINEAR = ('jitted, x, model = workloads.linear_gelu()\n'
           '    loss_of = lambda net: net(x).float().square().mean()')

PARTS = {
    "llama_bf16": (_LLAMA, "bfloat16", ["--reference", "eager", "--tolerance", "5e-2"], {}),
    "linear_gelu_env": (_LINEAR, "bfloat16", ["--reference", "eager", "--tolerance", "5e-2"],
                        {"NVFUSER_ENABLE": "fuse_matmul", "NVFUSER_DISABLE": "matmul_expr_eval"}),
    "nanogpt_sanitize": (_NANOGPT, "float32", ["--sanitize", "--confirm", "2", "--timeout", "1200"], {}),
    "llama_fp32_healthy": (_LLAMA, "float32", ["--reference", "eager"], {}),
}


def _part(name: str, out: Path, jobs: int) -> dict[str, object]:
    build, dtype, flags, env_add = PARTS[name]
    script = out / f"rescue_{name}.py"
    script.write_text(_STEP.format(gpu=str(ROOT / "tests" / "gpu"), dtype=dtype, build=build))
    env = {**os.environ, **env_add, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "nvscope", "rescue", "--jobs", str(jobs), *flags,
               "--json", str(out / f"rescue_{name}.json"), f"{script}:step"]
    began = time.perf_counter()
    code = _streamed(command, env, out / f"rescue_{name}.log", out / f"rescue_{name}.stdout", env_add)
    wall = time.perf_counter() - began
    summary: dict[str, object] = {"part": name, "exit": code, "wall_s": round(wall, 1)}
    result_path = out / f"rescue_{name}.json"
    if result_path.exists():
        data = json.loads(result_path.read_text())
        summary.update(healthy=data["healthy"], rescued=data["rescued"], proved=data["proved"], line=data["line"],
                       failures=[(r["fusion"], r["failure"]["kind"], r["failure"]["location"], r["cure"],
                                  r["repro_scripts"]) for r in data["rescues"]], versions=data["versions"])
    if name == "llama_fp32_healthy":  # two plain steps in a fresh process, compiles included
        began = time.perf_counter()
        plain = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=False)
        summary["two_steps_s"] = round(time.perf_counter() - began, 1)
        summary["two_steps_exit"] = plain.returncode
    return summary


def _streamed(command: list[str], env: dict[str, str], log: Path, stdout: Path, env_add: dict[str, str]) -> int:
    """Run ``command``; its stderr (the progress lines) goes to ``log`` line by line as it arrives, each stamped with
    the seconds since the start, so a run cut by a time limit still shows where it was; stdout (the answer) to
    ``stdout``, and to the log at the end."""
    began = time.perf_counter()
    with log.open("w", encoding="utf-8") as sink, stdout.open("w+", encoding="utf-8") as answer:
        sink.write(f"$ {' '.join(command)}\n# env: {env_add}\n--- stderr, streamed\n")
        sink.flush()
        child = subprocess.Popen(command, stdout=answer, stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        assert child.stderr is not None
        for line in child.stderr:
            sink.write(f"[{time.perf_counter() - began:7.1f} s] {line}")
            sink.flush()
        code = child.wait()
        answer.seek(0)
        sink.write(f"--- stdout\n{answer.read()}\n# exit {code}, {time.perf_counter() - began:.1f} s\n")
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the results directory (created)")
    parser.add_argument("--part", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--jobs", type=int, default=4, help="probes at once (default 4)")
    ns = parser.parse_args()
    parts = [p for p in ns.part.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    summaries = []
    for name in parts:
        summary = _part(name, out, ns.jobs)
        summaries.append(summary)
        print(f"== {name}: {json.dumps(summary)}", flush=True)
    (out / "rescue_summary.json").write_text(json.dumps(summaries, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
