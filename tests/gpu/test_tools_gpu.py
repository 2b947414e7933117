"""Issue 20 on the H200: bisect and profile on real fusions (nvscope.bisect, nvscope.profile).

* bisect names the options and the fusion behind nvFuser's INTERNAL ASSERT at runtime_info.h:69 (bf16
  Linear-GELU-Linear, fuse_matmul / -matmul_expr_eval, forward + backward); the printed line, run alone in a fresh
  process, reproduces it; the given options on every other fusion run clean;
* profile gives per-fusion rows with the schedulers read off kernel names (the default), GPU times, and the failing
  fusion as a row;
* nvFuser's PythonProfiler (``schedulers="nvfuser"``) is checked against kernel names (torch.profiler), each in a
  fresh process of its own (CUPTI takes one client per process).

The larger runs (the MLP numerics bisect, nanoGPT) are benchmarks/bisect_gpu.py and benchmarks/profile_nanogpt.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import fresh_python

import nvscope
from nvscope import OptionSet, profile

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")
from workloads import CODEGEN, LINEAR_GELU, LINEAR_GELU_SHAPES, bisect_linear_gelu_assert, linear_gelu  # noqa: E402


def test_bisect_names_the_runtime_info_assert_and_its_line_reproduces_alone(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", str(tmp_path))
    # The printed line is checked in a fresh process that runs only this step; fusion ids name where a fusion sits,
    # not what ran first, so the earlier tests' fusions change nothing (the uninstall only starts from a clean slate).
    nvscope.uninstall()
    result, shape = bisect_linear_gelu_assert()
    if not result.reproduced:
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
    script.write_text(LINEAR_GELU.format(shape=shape) + textwrap.dedent(f"""\
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
    for shape in LINEAR_GELU_SHAPES:
        jitted, x, model = linear_gelu(shape)

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


_SCHEDULERS = """\
import json, sys
from contextlib import contextmanager
from nvscope._exec import _events
from nvscope._measure._schedulers import recorder
nvscope.install()  # the timing hook runs inside nvscope's patched executor; nothing scoped has installed it here
with torch.no_grad():
    jitted(x)  # compiled
if sys.argv[1] == "names":  # torch.profiler's kernel names
    with torch.no_grad():
        names, _ = nvscope.kernel_names(lambda: jitted(x))
    print("SEEN " + json.dumps(names))
    raise SystemExit
rec = recorder("nvfuser")  # opt-in; this process has not run torch.profiler
assert rec is not None and rec.source == "nvFuser's PythonProfiler", rec and rec.source
seen = []

@contextmanager
def timer(record):
    with rec.record() as segments:
        yield None
    seen.append(segments)

_events.TIMERS.append(timer)
with torch.no_grad(), nvscope.audit():
    jitted(x)
_events.TIMERS.remove(timer)
print("SEEN " + json.dumps([s.scheduler for segments in seen for s in segments]))
"""


def test_schedulers_match_the_kernel_names(tmp_path: Path) -> None:
    """The PythonProfiler's scheduler per segment against what torch.profiler's kernel names say (nvfuser_<sched>_*),
    each in a fresh process of its own: CUPTI takes one client per process (nvFuser's profiler aborts after
    torch.profiler ran; torch.profiler sees no kernels after nvFuser's profiler ran), and other tests here use
    torch.profiler."""
    import json

    from nvscope._measure._schedulers import scheduler_of_kernel

    script = tmp_path / "schedulers.py"
    script.write_text(LINEAR_GELU.format(shape=LINEAR_GELU_SHAPES[0]) + _SCHEDULERS)
    seen = {}
    for source in ("names", "profiler"):
        done = fresh_python(str(script), source)
        lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
        assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-3000:]
        seen[source] = json.loads(lines[-1][len("SEEN "):])
    print(seen)
    from_profiler = [s for s in seen["profiler"] if s != "expr_eval"]
    from_names = [scheduler_of_kernel(n) for n in seen["names"] if "nvfuser" in n]
    assert from_profiler and sorted(from_profiler) == sorted(from_names)
