"""GPU: the first scoped training step compiles each distinct fusion definition once (issue 26), measured.

    source .gpu/activate.sh && python benchmarks/compile_once.py --out "$NVSCOPE_RESULTS" [--workloads llama2x2,...]
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

Workloads (Thunder's own test models, fp32, forward + backward, ``thunder.jit(model)`` with no other option):
``llama2x2`` and ``llama2x8`` (``thunder/tests/llama2_model.py``: dim 256, 8 heads, 2 or 8 layers, vocabulary 32000,
batch 4 x 256 tokens; the loss is the cross entropy of its logits) and ``nanogpt`` (``thunder/tests/nanogpt_model.py``
4 x 768, batch 4 x 256, tests/gpu/workloads.py's).

For each workload and each mode, one fresh process (the compiles are what is measured: nothing may be cached):

1. the first step of a fresh ``thunder.jit``, no scope (Thunder compiles every fusion): ``fresh jit s``;
2. a second step, warm; then the definitions Thunder ran are read off its fusions (``last_used``): how many fusions,
   how many distinct printed definitions (the oracle, independent of nvscope's cache);
3. the first step inside ``nv_options(enable=["static_fusion_count"])``, audited: ``scoped s``, the partitions it
   built and how many of them compiled (``new`` partitions without ``shared_from``), the outputs (loss) and every
   parameter's gradient saved.

Modes: ``shared`` (nvscope's default) and ``private`` (``NVSCOPE_SHARE=0``: every fusion's partition compiles its
own, as nvscope did before issue 26). Printed: one row per workload and mode, the ratio shared/private and
scoped/fresh-jit, and whether the shared step's loss and gradients equal the private step's bit for bit
(``torch.equal``). Written: ``compile_once.json`` and ``compile_once.txt`` under --out. About 6 fresh processes;
budget ~8 minutes on an H200 (``--timeout`` per process, default 240 s).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

OPTIONS = {"enable": ["static_fusion_count"]}
CALL: list[str | None] = [None]  # how the Llama is called (build)
WORKLOADS = ("llama2x2", "llama2x8", "nanogpt")
HERE = os.path.dirname(os.path.abspath(__file__))


def build(workload: str) -> tuple[Any, Any]:
    """(the CUDA module, step(jitted) -> (loss, grads)): seeded, fp32."""
    import torch

    sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "gpu"))
    from workloads import fwd_bwd, llama2_model, nanogpt_model  # tests/gpu/workloads.py: seeded models

    if workload.startswith("llama2x"):
        model, tokens, targets = llama2_model(int(workload[len("llama2x"):]), 256)

        def loss_of(jitted: Any) -> Any:
            # forward(tokens, targets) returns every position's logits (and sets model.last_loss, which a jitted
            # module may refuse); forward(tokens) only the last position's. The first that works is kept (CALL).
            if CALL[0] != "tokens":
                try:
                    logits = jitted(tokens, targets)
                    CALL[0] = "tokens, targets"
                    return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                except Exception as error:
                    if CALL[0] is not None:
                        raise
                    print(f"llama2: forward(tokens, targets) failed ({type(error).__name__}: {error}); using "
                          "forward(tokens)", file=sys.stderr)
                    CALL[0] = "tokens"
            logits = jitted(tokens)
            return torch.nn.functional.cross_entropy(logits[:, -1, :], targets[:, -1])
    elif workload == "nanogpt":
        model, idx, targets = nanogpt_model(4, 256, 4, 768)

        def loss_of(jitted: Any) -> Any:
            return jitted(idx, targets)[1]
    else:
        raise SystemExit(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")

    def step(jitted: Any) -> tuple[Any, list[Any]]:
        return fwd_bwd(lambda: loss_of(jitted), model)

    return model, step


def definitions() -> tuple[int, int]:
    """(fusions Thunder ran, distinct printed definitions among them), from every live FusionDefinitionWrapper."""
    import thunder.executors.nvfuserex_impl as impl

    # type(), not isinstance(): the collector also holds dead weak proxies, which raise ReferenceError when asked.
    wrappers = [o for o in gc.get_objects() if type(o) is impl.FusionDefinitionWrapper]
    ran = [w.last_used for w in wrappers if w.last_used is not None]
    return len(ran), len({repr(fd) for fd in ran})


def child(workload: str, mode: str, out: str) -> None:
    if mode == "private":
        os.environ["NVSCOPE_SHARE"] = "0"
    import thunder
    import torch

    import nvscope
    import nvscope.thunder

    nvscope.set_development_mode(True)
    model, step = build(workload)
    jitted = thunder.jit(model)
    start = time.perf_counter()
    step(jitted)
    fresh = time.perf_counter() - start
    step(jitted)
    fusions, distinct = definitions()
    nvscope.thunder.install()
    with nvscope.audit() as log, nvscope.nv_options(**OPTIONS):
        start = time.perf_counter()
        loss, grads = step(jitted)
        scoped = time.perf_counter() - start
    new = [r for r in log.records if r.route == "new"]
    compiled = sum(r.shared_from is None for r in new)
    start = time.perf_counter()
    with nvscope.nv_options(**OPTIONS):
        step(jitted)
    warm = time.perf_counter() - start
    torch.save({"loss": loss.cpu(), "grads": [g.cpu() for g in grads]}, os.path.join(out, f"{workload}-{mode}.pt"))
    print("RESULT " + json.dumps({
        "workload": workload, "mode": mode, "fresh_jit_s": fresh, "scoped_s": scoped, "scoped_warm_s": warm,
        "fusions": fusions, "distinct_definitions": distinct, "partitions": len(new), "compiled": compiled,
        "shared": len(new) - compiled, "thunder": thunder.__version__, "llama_call": CALL[0],
    }), flush=True)


def equal(out: str, workload: str) -> bool | None:
    import torch

    paths = [os.path.join(out, f"{workload}-{mode}.pt") for mode in ("shared", "private")]
    if not all(os.path.exists(p) for p in paths):
        return None
    shared, private = (torch.load(p) for p in paths)
    return bool(torch.equal(shared["loss"], private["loss"]) and len(shared["grads"]) == len(private["grads"])
                and all(torch.equal(a, b) for a, b in zip(shared["grads"], private["grads"], strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=".", help="where compile_once.json/.txt and the saved tensors go")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="comma-separated; WORKLOAD:MODE runs one mode of it (e.g. llama2x8:shared)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per fresh process (default 240)")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        child(*args.child, args.out)
        return
    root = os.path.abspath(os.path.join(HERE, os.pardir))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.pop("NVSCOPE_SHARE", None)
    rows: list[dict[str, Any]] = []
    plan = [(spec.partition(":")[0], spec.partition(":")[2]) for spec in args.workloads.split(",")]
    workloads = [workload for workload, _ in plan]
    for workload, only in plan:
        for mode in ("shared", "private") if not only else (only,):
            started = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, __file__, "--child", workload, mode, "--out", args.out],
                                      capture_output=True, text=True, env=env, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                rows.append({"workload": workload, "mode": mode, "error": f"timed out after {args.timeout:.0f} s"})
                print(f"== {workload} {mode}: timed out", flush=True)
                continue
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not lines:
                tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
                rows.append({"workload": workload, "mode": mode, "error": "\n".join(tail)})
                print(f"== {workload} {mode}: failed (exit {done.returncode})\n" + "\n".join(tail), flush=True)
                continue
            row = json.loads(lines[-1][len("RESULT "):])
            row["process_s"] = time.perf_counter() - started
            rows.append(row)
            print(f"== {workload} {mode}: scoped first step {row['scoped_s']:.1f} s, fresh jit first step "
                  f"{row['fresh_jit_s']:.1f} s; {row['partitions']} partitions, {row['compiled']} compiled, "
                  f"{row['distinct_definitions']} distinct definitions among {row['fusions']} fusions", flush=True)
    table = ["workload   mode     fusions  distinct  partitions  compiled  scoped s  fresh jit s  scoped/jit  "
             "warm scoped ms"]
    summary: dict[str, Any] = {}
    for workload in workloads:
        by_mode = {r["mode"]: r for r in rows if r["workload"] == workload and "error" not in r}
        for mode, r in by_mode.items():
            table.append(f"{workload:<10} {mode:<8} {r['fusions']:>7}  {r['distinct_definitions']:>8}  "
                         f"{r['partitions']:>10}  {r['compiled']:>8}  {r['scoped_s']:>8.1f}  {r['fresh_jit_s']:>11.1f}"
                         f"  {r['scoped_s'] / r['fresh_jit_s']:>10.2f}  {r['scoped_warm_s'] * 1e3:>14.1f}")
        same = equal(args.out, workload)
        entry: dict[str, Any] = {"bit_equal_shared_vs_private": same}
        if {"shared", "private"} <= by_mode.keys():
            entry["shared_over_private"] = by_mode["shared"]["scoped_s"] / by_mode["private"]["scoped_s"]
        if "shared" in by_mode:
            shared = by_mode["shared"]
            entry["compiled_equals_distinct"] = shared["compiled"] == shared["distinct_definitions"]
        summary[workload] = entry
        if "shared_over_private" in entry:
            table.append(f"  {workload}: shared/private scoped first step {entry['shared_over_private']:.2f}; loss and "
                         f"gradients bit-equal: {same}; shared compiles == distinct definitions: "
                         f"{entry.get('compiled_equals_distinct')}")
        elif "compiled_equals_distinct" in entry:  # one mode ran: nothing to compare it with
            table.append(f"  {workload}: shared only; shared compiles == distinct definitions: "
                         f"{entry['compiled_equals_distinct']}")
        else:
            table.append(f"  {workload}: no shared row (not asked for, or it failed): nothing to compare")
    deep = [r for r in rows if r["mode"] == "shared" and "error" not in r and r["workload"].startswith("llama2x")]
    if {r["workload"] for r in deep} >= {"llama2x2", "llama2x8"}:
        two, eight = (next(r for r in deep if r["workload"] == w) for w in ("llama2x2", "llama2x8"))
        summary["llama2x8_over_llama2x2_shared"] = eight["scoped_s"] / two["scoped_s"]
        table.append(f"  llama2x8 / llama2x2 shared scoped first step: {eight['scoped_s']:.1f} / "
                     f"{two['scoped_s']:.1f} s = {summary['llama2x8_over_llama2x2_shared']:.2f}")
    text = "\n".join(table)
    print(text)
    with open(os.path.join(args.out, "compile_once.txt"), "w", encoding="utf-8") as file:
        file.write(text + "\n")
    with open(os.path.join(args.out, "compile_once.json"), "w", encoding="utf-8") as file:
        json.dump({"options": OPTIONS, "rows": rows, "summary": summary}, file, indent=2)


if __name__ == "__main__":
    main()
