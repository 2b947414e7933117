"""The interface of a layer whose modules load on first use: a layer's ``__init__`` names what the layers above may
use, and `lazy_attributes` imports the module that defines a name only when the name is first looked up, so that naming
the interface costs ``import nvscope`` nothing (tests/test_layers.py holds callers to the interfaces)."""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: ``name`` is the attribute of that name of the submodule
    ``where[name]`` (relative: ``"._harness"``; ``"._candidates:_PAIRS"`` for another attribute name), kept in the
    package once loaded. A submodule the interface names as a namespace (``from nvscope._exec import _shared``) needs
    no entry: the import system loads it."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    return __getattr__
