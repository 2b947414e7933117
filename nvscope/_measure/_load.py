"""Loading a user's step from a script (its ``__main__`` block not run) or a module, by a dotted name."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

from nvscope._core import cut

__all__ = ["SCRIPT_MODULE", "attribute", "import_program_module", "import_script"]

SCRIPT_MODULE = "__nvscope_search__"


def import_script(path: str) -> ModuleType:
    """Import ``path`` as a module named ``__nvscope_search__`` (so its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(SCRIPT_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {cut(path, 200, repr)} as a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[SCRIPT_MODULE] = module  # pickle, dataclasses and typing look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[SCRIPT_MODULE]
        raise
    return module


def import_program_module(name: str) -> ModuleType:
    """Import the module ``name`` given with ``-m``, its fusion ids naming it as ``python -m`` does."""
    from nvscope._core import run_as_program

    run_as_program(name)
    return importlib.import_module(name)


def attribute(module: ModuleType, dotted: str) -> Any:
    """``module.a.b`` for ``dotted`` ``"a.b"``, or None where a part is missing."""
    value: Any = module
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value
