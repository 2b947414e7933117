"""nvscope.search on the H200: compile time apart, a known nvFuser failure skipped, nothing leaks afterwards.

Kernel names (torch.profiler, via nvscope._measure._kernels) are the oracle: cuBLAS ``nvjet_*`` for ATen matmuls,
``nvfuser_matmul_*`` for nvFuser's matmul codegen under ``fuse_matmul`` + ``-matmul_expr_eval``.
"""

from __future__ import annotations

from typing import Any

import pytest

import nvscope
from nvscope import OptionSet, nv_options
from nvscope._measure._kernels import kernel_names
from nvscope._search._search import search

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")

CODEGEN = "fuse_matmul,-matmul_expr_eval"
CODEGEN_SET = OptionSet(["fuse_matmul"], ["matmul_expr_eval"])


def _cublas(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("nvjet")]


def _nvfuser_matmul(names: list[str]) -> list[str]:
    return [n for n in names if "nvfuser_matmul" in n]


def _mm(a: Any, b: Any) -> Any:
    return (a @ b) * 2


def _mm_search(a: Any, b: Any) -> Any:
    return (a @ b) * 3  # a definition of its own: no test before this one in the process compiled it


def test_search_times_matmul_codegen_with_compile_time_apart_and_leaves_nothing_behind() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    jfn = thunder.jit(_mm_search, nv_enable_matmul=True)
    with torch.no_grad(), nvscope.audit() as log:
        result = search(jfn, a, b, candidates=[CODEGEN], rounds=6, steps_per_round=3, progress=False)
    print(result.table())
    row, default = result[CODEGEN], result.default
    assert result.timer == "CUDA events"
    assert row.error is None and row.ratio is not None and row.ratio.rounds == 6 and row.ms_per_call is not None
    # Compile time is its own number: the candidate's first call compiled its partition, and no partition was
    # compiled anywhere else in the search (not in the warm-up, not in the timed rounds).
    assert row.first_call_s is not None and row.first_call_s > 0
    # The tools share the step's defaults (one partition at the fusion's own options, compiled once), and the
    # candidate compiles one definition of its own. A definition an earlier test in the process compiled with the
    # same options would be shared instead ("0 definitions compiled"): this test's function is its own.
    assert row.fusions >= 1 and row.new_partitions >= 1 and default.fusions >= 1 and default.new_partitions >= 1
    assert row.compiles is not None and row.compiles.definitions >= 1 and row.compiles.seconds > 0, row.compiles
    compiled = [r for r in log.records if r.route == "new" and r.options]
    assert len(compiled) == row.new_partitions and {r.options for r in compiled} == {CODEGEN_SET}
    assert row.numerics is not None and row.numerics.ok, row.numerics  # nvFuser's matmul vs cuBLAS, bf16
    # Nothing leaks: no scope, and the next unscoped call runs cuBLAS again; the candidate really was codegen.
    assert nvscope.current_options() == OptionSet()
    with torch.no_grad():
        plain, _ = kernel_names(lambda: jfn(a, b))
        with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
            scoped, _ = kernel_names(lambda: jfn(a, b))
    assert _cublas(plain) and not _nvfuser_matmul(plain), plain
    assert _nvfuser_matmul(scoped) and not _cublas(scoped), scoped


class _LinearGeluLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(1024, 4096)
        self.l2 = torch.nn.Linear(4096, 1024)

    def forward(self, x: Any) -> Any:
        return self.l2(torch.nn.functional.gelu(self.l1(x)))


def _bf16_model() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = _LinearGeluLinear().cuda().to(torch.bfloat16)
    x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    return model, thunder.jit(model, nv_enable_linear=True), x


def test_the_known_fuse_matmul_backward_failure_is_reported_and_skipped() -> None:
    # The oracle, on a model of its own: does this nvFuser still hit the assert (runtime_info.h:69)?
    _, probe, x = _bf16_model()
    try:
        with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
            probe(x).float().square().mean().backward()
    except RuntimeError as error:
        expected = f"RuntimeError: {str(error).strip().splitlines()[0]}"
    else:
        pytest.skip("this nvFuser runs the bf16 Linear-GELU-Linear backward under fuse_matmul: no known failure")
    model, jmodel, x = _bf16_model()

    def loss() -> Any:
        return jmodel(x).float().square().mean()

    result = search(loss, candidates=[CODEGEN, "static_fusion_count"], backward=True, module=model, rounds=5,
                    steps_per_round=2, progress=False)
    print(result.table())
    failed, other = result[CODEGEN], result["static_fusion_count"]
    assert failed.status == "failed" and failed.error is not None and failed.error.startswith(expected)
    assert failed.ratio is None and failed.ms_per_call is None
    # The search went on: the next candidate compiled, ran forward and backward, and was timed and compared.
    assert other.error is None and other.ratio is not None and other.new_partitions >= 1
    assert other.numerics is not None and other.numerics.compared == 1 + 4  # the loss and 4 parameter gradients
    assert other.numerics.ok
    assert CODEGEN_SET != result.recommended
    # Nothing leaks into the next unscoped step: cuBLAS for the linears, no nvFuser matmul kernel.
    assert nvscope.current_options() == OptionSet()
    names, _ = kernel_names(lambda: loss().backward())
    assert _cublas(names) and not _nvfuser_matmul(names), names
