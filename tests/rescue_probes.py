"""A rescue target that counts its processes and its step's calls: `chain_script` (tests/thunder_double.py) with
its ``step`` wrapped, for tests that check where the rescue's probes ran (fresh processes or long-lived workers).

Each process that loads the script appends its pid to ``$STARTS``; each call of ``step`` appends ``<pid> <n>`` to
``$CALLS`` when it starts, and ``<pid> <n> compiled <c>`` when it ends (``n``: the call's number in its process,
``c``: the frontend double's compiles so far in it; a call that kills its process leaves only its start).
``CUDA_RAISE=1``: a failing fusion raises nvFuser's CUDA error (``CUDA error: an illegal memory access ...``)
instead of its internal assert. ``HANG_AT=<n>``: the ``n``-th call in a process creates ``$HANG_READY`` and sleeps.
``EAGER_OFF=<fraction>``: ``eager()``, the reference, is off by that fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from thunder_double import chain_program

_COUNTING = '''
import time
with open(os.environ["STARTS"], "a") as _file:
    _file.write(f"{os.getpid()}\\n")
if os.environ.get("CUDA_RAISE"):  # a sticky CUDA error, as nvFuser raises it after an illegal access
    double.fe.DEFAULTS_ASSERT = "CUDA error: an illegal memory access was encountered"
_step, _calls, _eager = step, [], eager
if os.environ.get("EAGER_OFF"):  # the reference off by this fraction

    def eager():
        return _eager() * (1 + float(os.environ["EAGER_OFF"]))


def step():
    _calls.append(None)
    with open(os.environ["CALLS"], "a") as file:
        file.write(f"{os.getpid()} {len(_calls)}\\n")
    if len(_calls) == int(os.environ.get("HANG_AT", "0")):
        open(os.environ["HANG_READY"], "w").close()
        time.sleep(600)
    try:
        return _step()
    finally:
        with open(os.environ["CALLS"], "a") as file:
            file.write(f"{os.getpid()} {len(_calls)} compiled {len(double.fe.COMPILES)}\\n")


'''


@dataclass
class Call:
    """One call of the step: its process, its number there, the compiles in that process when it ended (None: it
    did not end)."""

    pid: int
    n: int
    compiled: int | None


def counting_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int = 4) -> Path:
    """``train.py`` (``step()``, ``eager()``) in ``tmp_path``, counting into ``tmp_path/starts`` and ``/calls``."""
    path = chain_program(tmp_path, monkeypatch, n)
    body, main = path.read_text().split('if __name__ == "__main__":')
    path.write_text(body + _COUNTING + 'if __name__ == "__main__":' + main)
    monkeypatch.setenv("STARTS", str(tmp_path / "starts"))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("HANG_READY", str(tmp_path / "hanging"))
    return path


def starts(tmp_path: Path) -> list[int]:
    """The pids of the processes that loaded the script, in order."""
    found = tmp_path / "starts"
    return [int(line) for line in found.read_text().split()] if found.exists() else []


def calls(tmp_path: Path) -> list[Call]:
    """The step's calls, in the order they started."""
    found: dict[tuple[int, int], Call] = {}
    path = tmp_path / "calls"
    for line in path.read_text().splitlines() if path.exists() else []:
        pid, n, *end = line.split()
        call = found.setdefault((int(pid), int(n)), Call(int(pid), int(n), None))
        if end:
            call.compiled = int(end[1])
    return list(found.values())


def reset(tmp_path: Path) -> None:
    """Forget the counts (before another rescue of the same script)."""
    for name in ("starts", "calls"):
        (tmp_path / name).unlink(missing_ok=True)
