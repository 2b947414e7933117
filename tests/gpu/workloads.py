"""Models for the GPU tests and benchmarks (imported by both; needs CUDA, torch and Thunder).

* `nanogpt`: Thunder's own nanoGPT (``thunder/tests/nanogpt_model.py``, shipped in Thunder's wheel), 4 layers x 768,
  ``thunder.jit`` with no other option: its fusions hold no matmul or linear (Thunder sends those to cuBLAS).
* `llama2_model`: Thunder's own Llama-2 (``thunder/tests/llama2_model.py``), by default 2 layers x 256, fp32.
* `linear_gelu`: a bf16 Linear-GELU-Linear, jitted with ``nv_enable_linear``/``nv_enable_matmul``, whose step hits
  nvFuser 0.2.35's ``runtime_info.h:69`` assert under ``fuse_matmul``/``-matmul_expr_eval``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import thunder
import torch

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}


def nanogpt(batch: int = 4, seq: int = 256, layers: int = 4, width: int = 768) -> tuple[Any, Any, Any]:
    """(jitted model, idx, targets): ``jitted(idx, targets)`` returns (logits, loss)."""
    model, idx, targets = nanogpt_model(batch, seq, layers, width)
    return thunder.jit(model), idx, targets


def fwd_bwd(loss_of: Callable[[], Any], model: Any) -> tuple[Any, list[Any]]:
    """One training step: (loss, every parameter's gradient), copied after the device finished, gradients cleared
    before. ``loss_of()`` runs the jitted model and returns the loss (e.g. `llama2_loss`)."""
    for p in model.parameters():
        p.grad = None
    loss = loss_of()
    loss.backward()
    torch.cuda.synchronize()
    return loss.detach().clone(), [p.grad.detach().clone() for p in model.parameters()]


def llama2_model(layers: int = 2, dim: int = 256, batch: int = 4, seq: int = 256) -> tuple[Any, Any, Any]:
    """Thunder's Llama-2 (``thunder/tests/llama2_model.py``, 8 heads, vocabulary 32000), fp32, seeded: (the CUDA
    module, not jitted; tokens; targets)."""
    from thunder.tests import llama2_model as llama

    torch.manual_seed(0)
    args = llama.ModelArgs(dim=dim, n_layers=layers, n_heads=8, n_kv_heads=8, vocab_size=32000, multiple_of=32,
                           max_seq_len=seq, dropout=0.0)
    model = llama.Transformer(args).cuda()
    tokens = torch.randint(0, 32000, (batch, seq), device="cuda")
    targets = torch.randint(0, 32000, (batch, seq), device="cuda")
    return model, tokens, targets


def llama2_grads(net: Any, run: Any, tokens: Any, targets: Any) -> list[Any]:
    """One fwd+bwd of Llama-2 through ``run`` (the module, jitted or not): the loss and every gradient, in fp32 for
    comparison across dtypes and executors."""
    for p in net.parameters():
        p.grad = None
    logits = run(tokens, targets)
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    return [loss.detach().float()] + [p.grad.detach().float() for p in net.parameters()]


def llama2_loss(jitted: Any, tokens: Any, targets: Any) -> Callable[[], Any]:
    """Llama-2's ``forward(tokens, targets)`` returns every position's logits; the loss is their cross entropy,
    computed outside the jitted module (as benchmarks/compile_once.py does)."""
    def loss() -> Any:
        logits = jitted(tokens, targets)
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    return loss


def nanogpt_model(batch: int = 4, seq: int = 256, layers: int = 4, width: int = 768,
                  dtype: Any = None) -> tuple[Any, Any, Any]:
    """(the CUDA module, not jitted; idx; targets), seeded; ``dtype`` None keeps float32."""
    from thunder.tests import nanogpt_model as gpt

    torch.manual_seed(0)
    config = gpt.GPTConfig(n_layer=layers, n_head=12, n_embd=width, block_size=seq, dropout=0.0)
    model = gpt.GPT(config).cuda()
    if dtype is not None:
        model = model.to(dtype)
    idx = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    targets = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    return model, idx, targets


# The Linear-GELU-Linear as program text: tests and benchmarks build it from this text in-process (`linear_gelu`) and
# write it into the fresh processes that must reproduce a failure alone, so both run the very same model and input.
LINEAR_GELU = """\
import torch, thunder
import nvscope
from nvscope import nv_options
nvscope.set_development_mode(True)
width, hidden, batch = {shape}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))
model = model.cuda().to(torch.bfloat16)
x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
jitted = thunder.jit(model, nv_enable_linear=True, nv_enable_matmul=True)
"""
LINEAR_GELU_SHAPES = ((512, 512, 256), (1024, 4096, 2048))  # (width, hidden, batch): issue 10's, the search's model


def linear_gelu(shape: tuple[int, int, int] = LINEAR_GELU_SHAPES[1]) -> tuple[Any, Any, Any]:
    """(jitted bf16 Linear-GELU-Linear with nvFuser linears and matmuls, a bf16 input that requires grad, the module),
    built by running `LINEAR_GELU` (it also turns development mode on, as a fresh process wants it)."""
    scope: dict[str, Any] = {}
    exec(LINEAR_GELU.format(shape=shape), scope)
    return scope["jitted"], scope["x"], scope["model"]


def bisect_linear_gelu_assert(say: Callable[[str], None] = lambda line: None) -> tuple[Any, tuple[int, int, int]]:
    """`nvscope.bisect` of the bf16 Linear-GELU-Linear step under `CODEGEN` (forward and backward), judged by
    ``check="raises"``, over `LINEAR_GELU_SHAPES` until a shape reproduces the assert: the last result, its shape."""
    import nvscope

    for shape in LINEAR_GELU_SHAPES:
        jitted, x, model = linear_gelu(shape)

        def loss(jitted: Any = jitted, x: Any = x) -> Any:
            return jitted(x).float().square().mean()

        # check="raises": the assert is the problem; a bf16 matmul-codegen difference is not what is bisected here.
        result = nvscope.bisect(loss, **CODEGEN, check="raises", backward=True, module=model)
        if result.reproduced:
            break
        say(f"shape {shape} runs clean under the options")
    return result, shape
