"""What a ``mypy --strict`` user sees of nvscope's lazily loaded names (``nvscope.compare`` is loaded on first use
through the module's ``__getattr__``, which alone would type it ``object``: "object is not callable")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nvscope

REPO = Path(__file__).resolve().parents[1]

SNIPPET = """\
    import nvscope

    result = nvscope.compare(lambda: 1.0, variants={"default": {}, "x": {"enable": ["fuse_matmul"]}}, show=False)
    reveal_type(nvscope.compare)
    reveal_type(result)
    reveal_type(result["x"].max_abs_diff)
    reveal_type(nvscope.kernel_names)
    version: str = nvscope.__version__
"""


def test_lazy_names_are_listed_by_dir() -> None:
    names = dir(nvscope)
    for name in ("compare", "CompareResult", "kernel_names", "__version__"):
        assert name in names, name
        assert name in nvscope.__all__, name


def test_mypy_strict_types_the_lazy_names(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    snippet = tmp_path / "user_code.py"
    snippet.write_text(textwrap.dedent(SNIPPET))
    env = {**os.environ, "MYPYPATH": str(REPO)}
    # --follow-imports=silent: nvscope's own modules are analysed (for their types) but judged by nvscope's CI,
    # not here; what this test judges is the user's snippet.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    notes = re.findall(r'note: Revealed type is "(.*)"', done.stdout)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert errors == [], done.stdout + done.stderr
    assert len(notes) == 4, done.stdout + done.stderr
    compare_type, result_type, diff_type, kernel_names_type = notes
    assert compare_type.startswith("def (fn: def (*Any, **Any) -> Any, *args: Any, variants: ")
    assert compare_type.endswith("-> nvscope._tools._compare.CompareResult")
    assert result_type == "nvscope._tools._compare.CompareResult"
    assert diff_type in ("float | None", "builtins.float | None", "Union[builtins.float, None]")  # by mypy version
    assert kernel_names_type.startswith("def ")
