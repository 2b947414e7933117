"""Rescue targets for tests that run them in child processes.

`counting_program`: `chain_script` (tests/thunder_double.py) with its ``step`` wrapped so that it counts its
processes and its calls, for tests that check where the rescue's probes ran (fresh processes or long-lived workers).
`late_thunder_program`: a script that imports Thunder (the double, as a real package) only when its step first runs
and never calls ``nvscope.thunder.install()``. `add_to`: more functions in a script, before its ``__main__`` block.
`fake_sanitizer`: a compute-sanitizer double on ``PATH``.

Each process that loads the script appends its pid to ``$STARTS``; each call of ``step`` appends ``<pid> <n>`` to
``$CALLS`` when it starts, and ``<pid> <n> compiled <c>`` when it ends (``n``: the call's number in its process,
``c``: the frontend double's compiles so far in it; a call that kills its process leaves only its start).
``CUDA_RAISE=1``: a failing fusion raises nvFuser's CUDA error (``CUDA error: an illegal memory access ...``)
instead of its internal assert. ``HANG_AT=<n>``: the ``n``-th call in a process creates ``$HANG_READY`` and sleeps.
``EAGER_OFF=<fraction>``: ``eager()``, the reference, is off by that fraction.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from thunder_double import FRONTEND_FILE, ThunderDouble, chain_program

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


# A package named ``thunder`` whose import builds the Thunder double: a real import, which an import hook sees (the
# double alone only puts its modules into sys.modules).
_THUNDER_PACKAGE = """\
import sys
import pytest
import thunder_double

DOUBLE = thunder_double.ThunderDouble(pytest.MonkeyPatch(), autograd=False)  # children without torch
sys.modules["thunder"].DOUBLE = DOUBLE  # the double's module replaced this one in sys.modules: the import gets it
"""

_LATE = """\
import os
FAILS = {{int(k): v for k, v in (p.split("=", 1) for p in os.environ.get("FAILS", "").split(";") if p)}}
_wrappers = []


def step():
    import thunder  # the first call imports Thunder; nothing here calls nvscope.thunder.install()

    if not _wrappers:
        _wrappers.extend(thunder.DOUBLE.make_wrapper(f"nvFusion{{i}}", fails=FAILS.get(i), ops=("slice",))
                         for i in range({n}))
    x = 1.0
    for w in _wrappers:
        (x,) = w(x)
    return x


def eager():
    return {result!r}


if __name__ == "__main__":
    step()
"""


def late_thunder_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int = 3) -> Path:
    """``late.py`` in ``tmp_path``: ``step()`` imports ``thunder`` (a package in ``tmp_path/site`` that builds the
    Thunder double) at its first call and runs ``n`` fusions (``FAILS`` as for `chain_script`); ``eager()`` is its
    reference; run as a program it calls ``step()``. The package, the tests' folder and the checkout go on
    ``PYTHONPATH``."""
    import os

    site = tmp_path / "site" / "thunder"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(_THUNDER_PACKAGE)
    tests = FRONTEND_FILE.parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "site"), str(tests), str(tests.parent),
                                                      os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "late.py"
    path.write_text(_LATE.format(n=n, result=2.0 ** n))
    return path


def add_to(script: Path, code: str) -> Path:
    """``code`` (top-level definitions) added to ``script`` before its ``__main__`` block."""
    body, main = script.read_text().split('if __name__ == "__main__":')
    script.write_text(body + code + '\n\nif __name__ == "__main__":' + main)
    return script


# compute-sanitizer's double: runs the program, from its `fault_from`-th run on with FAKE_SANITIZER set (the frontend
# double then prints a fusion's write out of bounds as memcheck does), and prints memcheck's summary line.
_SANITIZER = """\
#!{python}
import os, subprocess, sys
args = sys.argv[1:]
assert args[:2] == ["--tool", "memcheck"], args
assert os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
with open({runs!r}, "a") as file:
    file.write("run\\n")
with open({runs!r}) as file:
    runs = len(file.read().split())
env = {{**os.environ, **({{"FAKE_SANITIZER": "1"}} if runs >= {fault_from} else {{}})}}
done = subprocess.run(args[2:], env=env, stdout=subprocess.PIPE, text=True)
sys.stdout.write(done.stdout)
errors = sum(line.startswith("========= Invalid") for line in done.stdout.splitlines())
print(f"========= ERROR SUMMARY: {{errors}} error{{'s' * (errors != 1)}}")
sys.exit(done.returncode)
"""


def fake_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault_from: int = 1) -> Path:
    """Put compute-sanitizer's double first on ``PATH``; its memcheck sees the fault from its ``fault_from``-th run on
    (1: every run; more: a flaky fault). Returns the file that counts its runs, a line each."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "sanitizer-runs"
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(_SANITIZER.format(python=sys.executable, runs=str(runs), fault_from=fault_from))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    return runs


def chain(double: ThunderDouble, fails: dict[int, str], n: int = 4,  # type: ignore[no-untyped-def]
          eager: dict[int, str] | None = None):
    """``n`` fusions one after the other; ``eager``: per fusion its region's kind (the PyTorch route's numbers:
    "double" right, "wrong" 3 * x, "unsupported": no route)."""
    wrappers = [double.make_wrapper(f"nvFusion{i}", fails=fails.get(i), ops=("slice",),
                                    eager=(eager or {}).get(i, "double")) for i in range(n)]

    def step() -> float:
        x = 1.0
        for w in wrappers:
            (x,) = w(x)
        return x

    return step
