"""GPU: `nvscope rescue` on a healthy Llama-2 fp32 step answers "nothing to rescue" (exit 0); on Llama-2 bf16, which
fails under nvFuser's defaults, it names every failing fusion and rescues the step (exit 0) with a proved line,
from the command line, in child processes. ``NVSCOPE_RESULTS`` keeps the bf16 run's files there. The other proofs
are benchmarks/rescue_gpu.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - the CPU suite
    pytest.skip("needs CUDA", allow_module_level=True)
pytest.importorskip("thunder")

ROOT = Path(__file__).resolve().parents[2]


def _rescue_gpu() -> object:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import rescue_gpu
    finally:
        sys.path.pop(0)
    return rescue_gpu


def test_a_healthy_llama_step_has_nothing_to_rescue(tmp_path: Path) -> None:
    rescue_gpu: Any = _rescue_gpu()
    summary = rescue_gpu._part("llama_fp32_healthy", tmp_path, jobs=1)
    assert summary["exit"] == 0, (tmp_path / "rescue_llama_fp32_healthy.log").read_text()[-3000:]
    data = json.loads((tmp_path / "rescue_llama_fp32_healthy.json").read_text())
    assert data["healthy"] and data["rescues"] == [] and data["fusions"]
    assert summary["two_steps_exit"] == 0


def test_llama2_bf16_is_rescued_with_its_failing_fusions_routed(tmp_path: Path) -> None:
    out = Path(os.environ.get("NVSCOPE_RESULTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    rescue_gpu: Any = _rescue_gpu()
    summary = rescue_gpu._part("llama_bf16", out, jobs=4)
    print(summary)
    assert summary["exit"] == 0, (out / "rescue_llama_bf16.log").read_text()[-3000:]
    data = json.loads((out / "rescue_llama_bf16.json").read_text())
    assert data["rescued"] and data["proved"] and 'on_error="torch"' in data["line"]
    failing = {r["fusion"] for r in data["rescues"]}
    assert {f.partition("/")[0] for f in failing} == {"forward", "backward"}, failing
