"""Issue 20 on the H200: bisect and profile on real fusions (nvscope.bisect, nvscope.profile).

* bisect names the options and the fusion behind nvFuser's INTERNAL ASSERT at runtime_info.h:69 (bf16
  Linear-GELU-Linear, fuse_matmul / -matmul_expr_eval, forward + backward); the printed line, run alone in a fresh
  process, reproduces it; the given options on every other fusion run clean;
* profile gives per-fusion rows with nvFuser's schedulers (its PythonProfiler), compile times, GPU times, and the
  failing fusion as a row;
* the schedulers themselves are checked against kernel names (torch.profiler), which do not depend on nvscope.

The larger runs (the MLP numerics bisect, nanoGPT) are benchmarks/bisect_gpu.py and benchmarks/profile_nanogpt.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import fresh_python

import nvscope
from nvscope import OptionSet, bisect, profile

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}
SHAPES = ((512, 512, 256), (1024, 4096, 2048))
MODEL = """\
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


def _model(shape: tuple[int, int, int]) -> tuple[Any, Any, Any]:
    scope: dict[str, Any] = {}
    exec(MODEL.format(shape=shape), scope)  # the code the fresh process runs too
    return scope["jitted"], scope["x"], scope["model"]


def test_bisect_names_the_runtime_info_assert_and_its_line_reproduces_alone(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path))
    for shape in SHAPES:
        jitted, x, model = _model(shape)

        def loss(jitted: Any = jitted, x: Any = x) -> Any:
            return jitted(x).float().square().mean()

        # check="raises": the assert is the problem; a bf16 matmul-codegen difference is not what is bisected here.
        result = bisect(loss, **CODEGEN, check="raises", backward=True, module=model)
        if result.reproduced:
            break
    else:
        pytest.fail("neither bf16 Linear-GELU-Linear step failed under fuse_matmul/-matmul_expr_eval: this nvFuser has "
                    "no known failure to bisect")
    print(result.report())
    assert "runtime_info.h" in result.problem, result.problem
    assert result.options and result.options.enable <= {"fuse_matmul"} and result.options.disable <= {
        "matmul_expr_eval"}
    assert result.fusions and all(f in result.all_fusions for f in result.fusions)
    # Every fusion that fails on its own is a culprit (docs/fusions.md: on nvFuser 0.2.35 both of this step's fusions
    # hit the assert); the given options on every other fusion run clean (None: no other fusion is left).
    assert result.others_clean is not False, result.report()
    # The first culprit is the runtime_info.h:69 assert; the others fail on their own with nvFuser asserts too (on
    # 0.2.35: -matmul_expr_eval alone on the forward fusion, fusion_segmenter.cpp:4099).
    assert all("INTERNAL ASSERT FAILED" in c.problem for c in result.culprits), result.report()
    assert result.repro_scripts and all(Path(p).is_file() for p in result.repro_scripts)
    assert nvscope.current_options() == OptionSet()
    # The printed line, alone around the same step, in a fresh process with no NVFUSER_* variable.
    script = tmp_path / "line.py"
    script.write_text(MODEL.format(shape=shape) + textwrap.dedent(f"""\
        with {result.line()}:
            jitted(x).float().square().mean().backward()
        torch.cuda.synchronize()
        """))
    done = fresh_python(str(script))
    assert done.returncode != 0 and "runtime_info.h" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]


def test_profile_names_the_matmul_scheduler_under_matmul_codegen() -> None:
    """One fusion, (a @ b) * 2 jitted with nv_enable_matmul=True: cuBLAS (an expr_eval segment) and an nvFuser
    pointwise kernel by default, one nvFuser matmul kernel under fuse_matmul/-matmul_expr_eval (README, examples)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    jfn = thunder.jit(lambda a, b: (a @ b) * 2, nv_enable_matmul=True)
    with torch.no_grad():
        result = profile(jfn, a, b, **CODEGEN, rounds=6, steps_per_round=3)
    print(result.table())
    assert result.timer == "CUDA events"
    assert result.schedulers_from == "kernel names (torch.profiler)"  # the default (nvFuser's profiler: opt-in)
    (row,) = result.rows
    assert row.phase == "forward" and row.reached and row.error is None
    assert row.ratio is not None and row.default_ms and row.options_ms
    schedulers = row.schedulers
    assert schedulers["default"] and "matmul" not in schedulers["default"], schedulers
    assert schedulers["options"] and "matmul" in schedulers["options"], schedulers
    assert row.numerics is not None and row.numerics.ok, row.numerics  # nvFuser's matmul vs cuBLAS, bf16
    assert nvscope.ProfileResult.from_json(result.to_json()) == result
    assert nvscope.current_options() == OptionSet()


def test_profile_a_failing_fusion_is_a_row_and_the_profile_goes_on() -> None:
    for shape in SHAPES:
        jitted, x, model = _model(shape)

        def loss(jitted: Any = jitted, x: Any = x) -> Any:
            return jitted(x).float().square().mean()

        result = profile(loss, **CODEGEN, backward=True, module=model, rounds=5, steps_per_round=1)
        failed = [r for r in result.rows if r.error is not None]
        if failed:
            break
    else:
        pytest.skip("this nvFuser runs the bf16 Linear-GELU-Linear step under fuse_matmul: no fusion fails")
    print(result.table())
    assert {r.phase for r in result.rows} == {"forward", "backward"}
    for row in failed:
        assert row.status == "failed" and row.ratio is None
        assert "runtime_info.h" in row.error and "nvscope:" in row.error, row.error
    assert result.step is not None and result.step.rounds == 5  # every round completed: the failures fell back
    assert "FAILED under the options" in result.table()


def test_schedulers_match_the_kernel_names() -> None:
    """The PythonProfiler's scheduler per segment against what torch.profiler's kernel names say (nvfuser_<sched>_*),
    in two passes (two CUPTI clients at once are not asked for)."""
    from contextlib import contextmanager

    from nvscope import _events
    from nvscope._schedulers import recorder, scheduler_of_kernel

    jitted, x, _ = _model(SHAPES[0])
    with torch.no_grad():
        jitted(x)  # compiled
    rec = recorder("nvfuser")  # opt-in; this test runs it in a process where torch.profiler has not run yet
    assert rec is not None and rec.source == "nvFuser's PythonProfiler"
    seen: list[Any] = []

    @contextmanager
    def timer(record: Any) -> Any:
        with rec.record() as segments:
            yield None
        seen.append(segments)

    _events.TIMERS.append(timer)
    try:
        with torch.no_grad(), nvscope.audit():
            jitted(x)
    finally:
        _events.TIMERS.remove(timer)
    with torch.no_grad():
        names, _ = nvscope.kernel_names(lambda: jitted(x))
    from_profiler = [s.scheduler for segments in seen for s in segments if s.scheduler != "expr_eval"]
    from_names = [scheduler_of_kernel(n) for n in names if "nvfuser" in n]
    print(from_profiler, names)
    assert from_profiler and sorted(from_profiler) == sorted(from_names)
