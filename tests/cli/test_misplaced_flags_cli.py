"""``nvscope run train.py --enable fuse_matmul`` gives --enable to train.py (the words after the script are its
own): a one-line note on stderr says so, and the program still runs with its arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTE = "goes to the program as its own argument, not to nvscope: put nvscope's flags before the script"


def nvscope(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "PYTHON", "NVFUSER_"))}
    env["PYTHONPATH"] = str(REPO)
    (tmp_path / "prog.py").write_text("import sys\nprint(sys.argv[1:])\n")
    return subprocess.run([sys.executable, "-m", "nvscope", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_nvscopes_own_flag_after_the_script_gets_a_note(tmp_path: Path) -> None:
    done = nvscope(tmp_path, "run", "prog.py", "--enable", "fuse_matmul")
    assert done.returncode == 0 and done.stdout == "['--enable', 'fuse_matmul']\n"  # still the program's
    (note,) = [line for line in done.stderr.splitlines() if "note:" in line]
    assert note.startswith(f"nvscope run: note: --enable after prog.py {NOTE}"), done.stderr
    listing = nvscope(tmp_path, "fusions", "prog.py", "--json=-", "--disable=fma")
    assert "nvscope fusions: note: --json, --disable after prog.py go to the program" in listing.stderr


def test_no_note_for_the_programs_own_flags_or_after_dash_dash(tmp_path: Path) -> None:
    for args in (("run", "prog.py", "--steps", "3", "--help"), ("run", "--", "prog.py", "--enable", "x")):
        done = nvscope(tmp_path, *args)
        assert done.returncode == 0 and "note:" not in done.stderr, done.stderr
