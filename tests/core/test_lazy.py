"""A face declared once in its ``__init__.pyi``: `lazy_face` derives ``__all__`` and the loading ``__getattr__``."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

INIT = ('"""A package."""\nfrom nvscope._core import lazy_face\n\n'
        '__all__, __getattr__, __dir__ = lazy_face(__name__, __file__, answer=lambda: 42)\n')


def make(root: pathlib.Path, stub: str) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text(INIT)
    (root / "pkg" / "__init__.pyi").write_text(stub)
    (root / "pkg" / "_heavy.py").write_text("print('loading heavy')\ndef verb() -> int:\n    return 7\n")
    (root / "pkg" / "_ns.py").write_text("X = 1\n")


def run(root: pathlib.Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)


def test_the_stub_is_the_list_and_names_load_on_first_use(tmp_path: pathlib.Path) -> None:
    make(tmp_path, "from collections.abc import Callable\n"  # no alias: for the stub's types only, not offered
                   "from . import _ns as _ns\nfrom ._heavy import verb as verb\n"
                   "answer: int\n")
    done = run(tmp_path, "import pkg; print(pkg.__all__, dir(pkg)); print(pkg.verb(), pkg._ns.X, "
                         "pkg.answer)\ntry:\n    pkg.missing\nexcept AttributeError as e:\n    print(e)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['_ns', 'answer', 'verb'] ['_ns', 'answer', 'verb']",
        "loading heavy",
        "7 1 42",
        "module 'pkg' has no attribute 'missing'",
    ]


@pytest.mark.parametrize(("stub", "error"), [
    ("from ._heavy import (\n    verb as verb,\n)\n", "one `from m import a as a` per line"),
    ("other: int\n", "declares other, which pkg does not compute"),
    ("from ._heavy import verb as alias\n", "`import verb as verb`, not as alias"),
])
def test_a_stub_the_reader_cannot_read_fails_the_import(tmp_path: pathlib.Path, stub: str, error: str) -> None:
    make(tmp_path, stub)
    done = run(tmp_path, "import pkg")
    assert done.returncode == 1 and error in done.stderr.splitlines()[-1]
