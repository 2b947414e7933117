"""Where no nvFuser fusion can run on the machine (nvFuser not installed, no CUDA device), search, profile, bisect
and rescue say so, as `nvscope doctor` would, instead of asking whether the step is jitted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from nvscope.cli import main

COMMANDS = {
    "search": ["search", "--candidates", "fast_math", "--rounds", "5", "--quiet", "plain.py:plain"],
    "profile": ["profile", "--enable", "fast_math", "--rounds", "5", "--quiet", "plain.py:plain"],
    "bisect": ["bisect", "--enable", "fast_math", "--quiet", "plain.py:plain"],
    "bisect --subprocess": ["bisect", "--subprocess", "--enable", "fast_math", "--quiet", "plain.py"],
    "rescue": ["rescue", "--quiet", "plain.py:plain"],
}


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``machine(nvfuser=...)``: nvFuser's modules findable or not (nothing else changes); a plain step to run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.py").write_text("def plain():\n    return 1.0\n")
    real = importlib.util.find_spec

    def set_up(nvfuser: bool) -> None:
        def find_spec(name: str, package: str | None = None) -> Any:
            if name in ("nvfuser", "nvfuser_direct"):
                return object() if nvfuser else None
            return real(name, package)

        monkeypatch.setattr("importlib.util.find_spec", find_spec)

    return set_up


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("command", COMMANDS)
def test_without_nvfuser_the_tools_say_it_is_not_installed(command: str, machine: Any,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    machine(nvfuser=False)
    code, text = run(capsys, COMMANDS[command])
    assert code == 1
    assert "no nvFuser fusion ran" in text and "nvFuser is not installed here (no nvfuser_direct or nvfuser " \
        "module; `nvscope doctor` names the wheel)" in text, text
    assert "jitted" not in text and "thunder.jit" not in text


@pytest.mark.parametrize("command", ["profile", "rescue"])
def test_with_every_cuda_device_hidden_they_say_there_is_none(command: str, machine: Any,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    machine(nvfuser=True)
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # torch not imported: the variable decides
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    code, text = run(capsys, COMMANDS[command])
    assert code == 1 and "no CUDA device here (CUDA_VISIBLE_DEVICES='-1' hides them all" in text, text
    assert "jitted" not in text
