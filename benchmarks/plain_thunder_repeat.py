"""Do plain Thunder + nvFuser warm steps repeat their bits? No nvscope anywhere: a repro for upstream (GPU).

``--model nanogpt`` (default): Thunder's nanoGPT (``thunder/tests/nanogpt_model.py``), 2 layers x 384, batch 4 x 128;
``--model llama2``: Thunder's Llama-2 (``thunder/tests/llama2_model.py``), 2 layers x 256, batch 4 x 256; both fp32
and built by tests/gpu/workloads.py, as the GPU tests build them. ``thunder.jit`` (with no option unless
``--options``), fwd+bwd; only torch and Thunder are imported (nvscope is not, so nothing of it can be in the call
path). Two compile steps, then ``--steps`` warm steps, each compared with the first warm step (loss and every
gradient, ``torch.equal``). Each step's outcome is printed as it ends, so a CUDA fault names its step; with
``CUDA_LAUNCH_BLOCKING=1`` the traceback also names the fusion whose kernel faulted.
``--options NAME ...`` passes nvFuser enable options the way Thunder does (``thunder.jit(nv_enable_options=...)``).

    python benchmarks/plain_thunder_repeat.py [--model nanogpt|llama2] [--steps 20] [--options static_fusion_count]

On the H200 (2026-12-04) nanoGPT's fifth step (warm step 2 here) died with an illegal address on both nvFuser
builds, and ``compute-sanitizer --tool memcheck`` showed its first forward fusion writing past the end of its iota
output (benchmarks/results/repeatability-2026-12-04/; earlier forms of this script).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--options", nargs="*", default=[])
    parser.add_argument("--model", choices=["nanogpt", "llama2"], default="nanogpt")
    args = parser.parse_args()

    import thunder
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "gpu"))
    from workloads import fwd_bwd, llama2_loss, llama2_model, nanogpt_model  # torch and Thunder only

    assert not any(name.split(".")[0] == "nvscope" for name in sys.modules), "nvscope must not be imported"
    if args.model == "nanogpt":
        model, idx, targets = nanogpt_model(4, 128, 2, 384)
    else:
        model, idx, targets = llama2_model(2, 256)
    jitted = thunder.jit(model, nv_enable_options=args.options) if args.options else thunder.jit(model)
    if args.model == "nanogpt":
        def loss_of() -> torch.Tensor:  # nanoGPT's forward(idx, targets) returns (logits, loss)
            return jitted(idx, targets)[1]
    else:
        loss_of = llama2_loss(jitted, idx, targets)
    names = ["loss"] + [name for name, _ in model.named_parameters()]

    def step(label: str) -> list[torch.Tensor]:
        """One fwd+bwd step; a failure is reported with ``label`` (which step of the process) and the fusion."""
        try:
            loss, grads = fwd_bwd(loss_of, model)
            return [loss, *grads]
        except Exception as error:
            first_line = str(error).strip().splitlines()[0][:200]
            print(f"{label} failed: {type(error).__name__}: {first_line}", flush=True)
            print(faulting_fusion(error), flush=True)
            raise

    start = time.perf_counter()
    step("step 1 of the process (compile)")
    step("step 2 of the process (compile)")
    print(f"{args.model}, options {args.options}: two compile steps in {time.perf_counter() - start:.1f} s", flush=True)
    first = step("step 3 of the process (the first warm step, the reference)")
    differ = 0
    for k in range(1, args.steps):
        now = step(f"warm step {k} (step {k + 3} of the process)")
        changed = [f"{names[i]} ({int((a != b).sum())} of {a.numel()}, max {float((a - b).abs().max()):.3g})"
                   for i, (a, b) in enumerate(zip(first, now, strict=True)) if not torch.equal(a, b)]
        differ += bool(changed)
        print(f"warm step {k}: loss {float(now[0]):.6f}, "
              f"{'differs from the first in ' + '; '.join(changed[:3]) if changed else 'bit-equal to the first'}",
              flush=True)
    print(f"{args.model}, options {args.options}: {differ} of {args.steps - 1} warm steps differ from the first",
          flush=True)


def faulting_fusion(error: BaseException) -> str:
    """The Thunder fusion that raised ``error`` (with CUDA_LAUNCH_BLOCKING=1, the one whose kernel faulted): its
    name, its line in Thunder's trace and the nvFuser definition it ran, printed as nvFuser prints it."""
    tb, found = error.__traceback__, "no Thunder fusion in the traceback"
    line = ""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.startswith("thunder."):
            line = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
        wrapper = frame.f_locals.get("self")
        if frame.f_code.co_name == "__call__" and type(wrapper).__name__ == "FusionDefinitionWrapper":
            found = f"fusion {wrapper.name} (called at {line}); its definition:\n{wrapper.last_used!r}"
        tb = tb.tb_next
    return found


if __name__ == "__main__":
    main()
