"""Why no nvFuser fusion ran, where the machine itself says so: nvFuser is not installed, or no CUDA device is there.

The tools that find no fusion (search, profile, bisect, rescue) then say that, as `nvscope doctor` would, instead of
asking whether the step is jitted: on such a machine no step could run a fusion. Cheap: nvFuser is looked for
without importing it, and torch is asked only when something imported it already; otherwise the CUDA device files
(Linux) and ``CUDA_VISIBLE_DEVICES`` decide.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

from nvscope._core import NVFUSER_MODULES

__all__ = ["machine_cause", "no_fusion"]

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
