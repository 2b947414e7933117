"""Asking the installed nvFuser which option names it accepts, for an nvFuser newer than the catalog: it lists them
all when it refuses one, so a child process runs a one-op fusion with an invalid name. Needs CUDA and seconds, so it
runs at most once per process, after a miss."""

from __future__ import annotations

import os
import sys
import threading

from nvscope._core import _state
from nvscope._core._optionset import NVFUSER_VARIABLES
from nvscope._core._text import cut

__all__ = ["accepted", "known", "probe_installed", "reset"]

_PROBE = """
import torch
try:
    from nvfuser_direct import DataType, FusionDefinition
except ImportError:
    from nvfuser import DataType, FusionDefinition
with FusionDefinition() as fd:
    t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    fd.add_output(fd.ops.relu(t))
fd.execute([torch.ones(4, device="cuda")])
"""

_lock = threading.Lock()
_accepted: dict[str, frozenset[str]] | None = None
_error: str | None = None
_state.keep(__name__, "_accepted _error", "what the installed nvFuser answered: uninstall changes no installation, and "
            "asking again takes a child process and seconds; `reset` forgets it for tests that fake one")
_state.keep(__name__, "_lock", "a lock")


def probe_installed(timeout: float = 300.0) -> dict[str, frozenset[str]]:
    """Ask the installed nvFuser which option names it accepts, from its "Available options: ..." error (needs CUDA).
    Raises RuntimeError when the child does not print that list."""
    import re
    import subprocess

    found: dict[str, frozenset[str]] = {}
    for kind in ("enable", "disable"):
        env = {k: v for k, v in os.environ.items() if k not in NVFUSER_VARIABLES}
        env[f"NVFUSER_{kind.upper()}"] = "__nvscope_probe__"
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
        match = re.search(r"Available options: ([^\n]*)", done.stdout + done.stderr)
        if match is None:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1].strip()
            raise RuntimeError(f"nvFuser did not list its {kind} options (exit {done.returncode}): {cut(last, 300)}")
        found[kind] = frozenset(name.strip() for name in match.group(1).split(",") if name.strip())
    return found


def accepted() -> dict[str, frozenset[str]] | None:
    """The names the installed nvFuser accepts, per list, asked on the first call only; None when it cannot be asked
    (`known` says why)."""
    global _accepted, _error
    with _lock:
        if _accepted is None and _error is None:
            try:
                _accepted = probe_installed()
            except Exception as error:
                _error = cut(f"{type(error).__name__}: {error}", 200)
        return _accepted


def known() -> tuple[dict[str, frozenset[str]] | None, str | None]:
    """What the probe found so far, without asking: (the names accepted, or None; why it failed, or None)."""
    with _lock:
        return _accepted, _error


def reset() -> None:
    """Forget the answer (for tests that fake an installation)."""
    global _accepted, _error
    with _lock:
        _accepted, _error = None, None
