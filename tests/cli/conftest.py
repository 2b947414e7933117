"""Fixtures of the command-line tests: the scripts a command imports (``nvscope search``, ``profile``, ``bisect``
import a script's function as ``__nvscope_search__``, or a module with ``-m``) are forgotten after each test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from thunder_double import reset_nvscope


@pytest.fixture
def imported() -> Iterator[None]:
    """Afterwards: the scripts the command imported are forgotten, their doubles and nvscope's adapters undone."""
    yield
    for name in ("__nvscope_search__", "searchmod"):
        module = sys.modules.pop(name, None)
        if module is not None and hasattr(module, "MONKEYPATCH"):
            reset_nvscope()
            module.MONKEYPATCH.undo()
    reset_nvscope()


@pytest.fixture
def plugin_pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An isolated pytester for the plugin's runs (a module using it declares ``pytest_plugins = ["pytester"]``): no
    autoloaded plugins, no NVSCOPE_/NVFUSER_ variables, the doubles (tests/) and nvscope importable."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for name in list(os.environ):
        if name.startswith(("NVSCOPE_", "NVFUSER_")):
            monkeypatch.delenv(name)
    tests = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(map(str, (tests, tests.parent))))
    return pytester
