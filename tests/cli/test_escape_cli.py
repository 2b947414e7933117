"""``on_error="torch"`` from the command line: ``nvscope run --on-error torch`` (carried to the program) and the pytest
plugin's ``--nv-on-error torch`` and marker, against the Thunder double whose fusion 1 fails under its defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from thunder_double import chain_program

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

pytest.importorskip("torch")  # the region's PyTorch form runs under torch.no_grad
pytest_plugins = ["pytester"]


def _run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_"))}
    env.update(FAILS="1=raise::", NVSCOPE_REPRO_DIR=str(tmp_path / "repros"),
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "nvscope", "run", *flags, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_run_on_error_torch_gets_the_program_past_a_failing_fusion(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    chain_program(tmp_path, monkeypatch, 3)
    failed = _run(tmp_path)
    assert failed.returncode != 0 and "INTERNAL ASSERT" in failed.stderr
    escaped = _run(tmp_path, "--on-error", "torch")
    assert escaped.returncode == 0, escaped.stderr
    assert "EscapeWarning" in escaped.stderr and "forward/nvFusion1" in escaped.stderr
    assert "torch" in escaped.stderr  # the audit summary's route


PLUGIN_TESTS = """\
import warnings
import pytest
import nvscope, nvscope.thunder
from thunder_double import ThunderDouble

def _step(monkeypatch):
    double = ThunderDouble(monkeypatch)
    nvscope.thunder.install()
    fusion = double.make_wrapper("nvFusion0", fails="raise::", eager="wrong")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fusion(1.0)
    finally:
        nvscope.uninstall()

def test_plain(monkeypatch):
    assert _step(monkeypatch) == [3.0]

@pytest.mark.nv_options(on_error="raise")
def test_marked_raise(monkeypatch):
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
        _step(monkeypatch)
"""




def test_pytest_nv_on_error_torch_and_a_marker_inside_it(plugin_pytester: pytest.Pytester) -> None:
    plugin_pytester.makepyfile(PLUGIN_TESTS)
    result = plugin_pytester.runpytest_subprocess("-p", "_nvscope_pytestplugin", "-p", "no:cacheprovider",
                                           "--nv-on-error", "torch")
    result.assert_outcomes(passed=2)
    assert "nvscope: on_error='torch' around each test (--nv-on-error)" in result.stdout.lines
    plain = plugin_pytester.runpytest_subprocess("-p", "_nvscope_pytestplugin", "-p", "no:cacheprovider")
    plain.assert_outcomes(passed=1, failed=1)  # without the flag the fusion's error fails test_plain
