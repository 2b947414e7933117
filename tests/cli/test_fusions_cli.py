"""``nvscope fusions script.py``: run a program and list the nvFuser fusions it ran (fake frontend, real process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import thunder_double

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """\
import nvfuser_direct as fe

def define(*ops):
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        for op in ops:
            getattr(fd.ops, op)(0)
    return fd

matmul, pointwise = define("linear", "add"), define("mul")
for _ in range(3):
    matmul.execute([1.0])
pointwise.execute([1.0])
print("program done")
"""


def nvscope(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    shutil.copy(thunder_double.FRONTEND_FILE, site / "nvfuser_direct.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join((str(REPO), str(site)))
    return subprocess.run([sys.executable, "-m", "nvscope", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_fusions_lists_what_a_program_ran(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "program done\n"
    lines = done.stderr.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("nvscope fusions: 2 fusions (2 call)")))
    header, _rule, first, second = lines[start + 1:start + 5]
    assert header.split() == ["id", "ops", "function", "calls"]
    assert first.split() == ["call/FusionDefinition#0", "add,", "linear", "3"]
    assert second.split() == ["call/FusionDefinition#1", "mul", "1"]


def test_fusions_with_options_and_a_selector(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "--enable", "fuse_matmul", "--fusions", "call/*", "prog.py")
    assert done.returncode == 0, done.stderr
    assert "nvscope fusions: 2 fusions" in done.stderr
    # fuse_matmul reaches the fusion holding a linear only (the catalog's gate), and compiles one partition for it
    assert "1 new partitions compiled" in done.stderr


def test_fusions_needs_a_program(tmp_path: Path) -> None:
    done = nvscope(tmp_path, "fusions")
    assert done.returncode == 2 and "nvscope fusions --help" in done.stderr
