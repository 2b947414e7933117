"""Models for the GPU tests and benchmarks (imported by both; needs CUDA, torch and Thunder).

* `nanogpt`: Thunder's own nanoGPT (``thunder/tests/nanogpt_model.py``, shipped in Thunder's wheel), 4 layers x 768,
  ``thunder.jit`` with no other option: its fusions hold no matmul or linear (Thunder sends those to cuBLAS).
* `linear_gelu`: a bf16 Linear-GELU-Linear, jitted with ``nv_enable_linear``/``nv_enable_matmul``, whose step hits
  nvFuser 0.2.35's ``runtime_info.h:69`` assert under ``fuse_matmul``/``-matmul_expr_eval``.
"""

from __future__ import annotations

from typing import Any

import thunder
import torch

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}


def nanogpt(batch: int = 4, seq: int = 256, layers: int = 4, width: int = 768) -> tuple[Any, Any, Any]:
    """(jitted model, idx, targets): ``jitted(idx, targets)`` returns (logits, loss)."""
    from thunder.tests import nanogpt_model

    torch.manual_seed(0)
    config = nanogpt_model.GPTConfig(n_layer=layers, n_head=12, n_embd=width, block_size=seq, dropout=0.0)
    model = nanogpt_model.GPT(config).cuda()
    idx = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    targets = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    return thunder.jit(model), idx, targets


def linear_gelu(width: int = 1024, hidden: int = 4096, batch: int = 2048) -> tuple[Any, Any]:
    """(jitted bf16 Linear-GELU-Linear with nvFuser linears and matmuls, a bf16 input that requires grad)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))
    x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    jitted = thunder.jit(model.cuda().to(torch.bfloat16), nv_enable_linear=True, nv_enable_matmul=True)
    return jitted, x
