"""What the tool families share: why no fusion ran where the machine itself says so (nvFuser missing, no CUDA
device: looked up without importing nvFuser or torch), how a child process ended, and a map of scopes entered as one."""

from __future__ import annotations

import glob
import importlib.util
import os
import signal
import subprocess
import sys
from typing import Any

from nvscope._core import NVFUSER_MODULES, OptionSet, cut, exact_glob, nv_options

__all__ = ["ScopeMap", "exit_detail", "machine_cause", "no_fusion"]

_DOCTOR = "`nvscope doctor` checks this machine"


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module in sys.modules without a spec (a test's double): it is there
        return name in sys.modules


def machine_cause() -> str | None:
    """What keeps every nvFuser fusion from running here, in a few words; None when nothing known does."""
    if not any(_findable(name) for name in NVFUSER_MODULES):
        return (f"nvFuser is not installed here (no {' or '.join(NVFUSER_MODULES)} module; `nvscope doctor` names the "
                "wheel)")
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            available = bool(torch.cuda.is_available())
        except Exception:  # a broken or partial torch: not this tool's to judge
            return None
        return None if available else f"no CUDA device here (torch.cuda.is_available() is False; {_DOCTOR})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"no CUDA device here (CUDA_VISIBLE_DEVICES={visible!r} hides them all; {_DOCTOR})"
    if sys.platform.startswith("linux") and not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        return f"no CUDA device here (no /dev/nvidia* device; {_DOCTOR})"
    return None


def no_fusion(message: str) -> str:
    """A "no nvFuser fusion ran ...: <question about the step>?" message, its question replaced by the machine's
    cause when it has one."""
    cause = machine_cause()
    return message if cause is None else f"{message.rpartition(': ')[0]}: {cause}"


def exit_detail(done: subprocess.CompletedProcess[str] | None, timeout: float) -> str:
    """How a child process ended, for a one-line report: its exit or signal and its last error line."""
    if done is None:
        return f"timed out after {timeout:g} s"
    code = done.returncode
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit {code}"
    lines = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.partition(":")[0] or "error" in line.partition(":")[0]]
    last = errors[-1] if errors else lines[-1] if lines else ""
    return f"{how}: {cut(last, 300)}" if last else how


class ScopeMap:
    """The selector map as one re-enterable context manager: the candidates' scopes, nested."""

    def __init__(self, groups: list[tuple[OptionSet, list[str]]]) -> None:
        self.scopes = [nv_options(options, fusions=[exact_glob(f) for f in fusions]) for options, fusions in groups]
        self.entered: list[list[nv_options]] = []

    def __enter__(self) -> None:
        done: list[nv_options] = []
        try:
            for scope in self.scopes:
                scope.__enter__()
                done.append(scope)
        except BaseException:
            for scope in reversed(done):
                scope.__exit__(None, None, None)
            raise
        self.entered.append(done)

    def __exit__(self, *exc: Any) -> None:
        for scope in reversed(self.entered.pop()):
            scope.__exit__(None, None, None)
