"""GPU: `nvscope rescue` on a healthy Llama-2 fp32 step answers "nothing to rescue" (exit 0), from the command
line, in child processes. The four proofs of the issue are benchmarks/rescue_gpu.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - the CPU suite
    pytest.skip("needs CUDA", allow_module_level=True)
pytest.importorskip("thunder")

ROOT = Path(__file__).resolve().parents[2]


def test_a_healthy_llama_step_has_nothing_to_rescue(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import rescue_gpu
    finally:
        sys.path.pop(0)
    summary = rescue_gpu._part("llama_fp32_healthy", tmp_path, jobs=1)
    assert summary["exit"] == 0, (tmp_path / "rescue_llama_fp32_healthy.log").read_text()[-3000:]
    data = json.loads((tmp_path / "rescue_llama_fp32_healthy.json").read_text())
    assert data["healthy"] and data["rescues"] == [] and data["fusions"]
    assert summary["two_steps_exit"] == 0
