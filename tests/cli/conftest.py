"""Fixtures of the command-line tests: the scripts a command imports (``nvscope search``, ``profile``, ``bisect``
import a script's function as ``__nvscope_search__``, or a module with ``-m``) are forgotten after each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator

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
