"""The suite leaves nothing in the machine's temporary directory: each test gets one of pytest's as ``TMPDIR``
(tests/conftest.py), where the tools' default folders (repro scripts, rescue's files, nvFuser's kernel database)
and its child processes' files go."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LEFT_BEHIND = ("nvscope-", "nvfuser_kernel_db")


def test_the_tools_default_folders_go_to_the_tests_temporary_directory() -> None:
    """What a test and its child processes make in the default temporary directory, as nvscope and nvFuser do."""
    folder = tempfile.mkdtemp(prefix="nvscope-repro-")  # _exec/_repro.py's default directory
    code = "import os, tempfile; os.makedirs(os.path.join(tempfile.gettempdir(), 'nvfuser_kernel_db'))"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # nvFuser's kernel_db, in a child
    where = Path(folder).parent
    assert (where / "nvfuser_kernel_db").is_dir()
    assert where == Path(os.environ["TMPDIR"])


def test_the_suite_leaves_nothing_in_the_machines_temporary_directory(tmp_path: Path) -> None:
    """The test above, run by pytest with ``TMPDIR`` as the machine's: afterwards that holds pytest's own folder
    only, no ``nvscope-*`` folder and no ``nvfuser_kernel_db``."""
    machine = tmp_path / "machine-tmp"
    machine.mkdir()
    env = {**os.environ, "TMPDIR": str(machine)}
    test = f"{Path(__file__).name}::test_the_tools_default_folders_go_to_the_tests_temporary_directory"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                          cwd=TESTS, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(path.name for path in machine.iterdir() if path.name.startswith(LEFT_BEHIND))
    assert left == [], f"the suite left {left} in the temporary directory"
