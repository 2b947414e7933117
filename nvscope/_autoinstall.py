"""Zero setup: adapters install themselves for the frameworks a program uses, by one rule and two triggers.

The rule (`ensure_adapters`): once ``thunder`` is imported, the Thunder adapter is installed (unless
``NVSCOPE_AUTOINSTALL=0`` or after an explicit ``nvscope.thunder.uninstall()``); with ``direct=True`` (``nvscope
run``, which owns the whole program), an nvFuser frontend imported without Thunder gets the direct adapter too. It
imports an adapter only when its framework is already in ``sys.modules``, so ``import nvscope`` and scopes on a
machine without Thunder stay light.

The triggers: every non-empty scope entry (registered as a scope enter hook by ``nvscope/__init__.py``; it looks
again only when ``sys.modules`` has grown since the last look, so a scope entered in a loop costs one ``len()``),
and, inside `watch_imports` (``nvscope run``), the moment the program finishes importing Thunder or nvFuser:
``nvscope run`` enters its scope before the program imports anything, so the entry alone would come too early.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

from nvscope import _env

__all__ = ["accept", "decline", "ensure_adapters", "reset", "watch_imports"]

_seen_modules = -1
_WATCHED = ("thunder", "nvfuser_direct", "nvfuser")
# Adapters explicitly uninstalled by the user: an explicit choice that automatic installation must not undo.
_declined: set[str] = set()


def decline(adapter: str) -> None:
    """``adapter`` was uninstalled explicitly: do not install it automatically any more (until `accept`)."""
    _declined.add(adapter)


def accept(adapter: str) -> None:
    """``adapter`` was installed explicitly: automatic installation may install it again after a later uninstall."""
    _declined.discard(adapter)


def reset() -> None:
    """Back to a fresh import's state: nothing declined, and the next scope entry looks at ``sys.modules`` again."""
    global _seen_modules
    _seen_modules = -1
    _declined.clear()


def ensure_adapters(direct: bool = False) -> None:
    """Install the adapter for each framework imported by now (see the module docstring for the rule)."""
    global _seen_modules
    count = len(sys.modules)
    if count == _seen_modules and not direct:
        return
    _seen_modules = count
    if not _env.flag("NVSCOPE_AUTOINSTALL"):
        return
    if "thunder" in sys.modules:
        from nvscope import thunder

        if "thunder" not in _declined and not thunder.installed():
            thunder.install()
    elif direct and ("nvfuser_direct" in sys.modules or "nvfuser" in sys.modules):
        # Thunder imports nvFuser while it is itself being imported; its own adapter then covers it.
        from nvscope import nvfuser

        nvfuser.install()
    _seen_modules = len(sys.modules)  # installing may import more; those need no second look


class _CallbackLoader(importlib.abc.Loader):
    """Wraps a module's loader to install adapters once the module has finished executing."""

    def __init__(self, loader: importlib.abc.Loader, report: list[BaseException]) -> None:
        self._loader = loader
        self._report = report

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its real loader (importlib.resources, inspect and linecache look at it).
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        if module.__name__ != "thunder" and "thunder" in sys.modules:
            return  # nvFuser imported by Thunder's own import: Thunder's adapter installs once Thunder is complete
        try:
            ensure_adapters(direct=True)
        except Exception as error:  # the program's import must not fail over nvscope; the runner reports it
            self._report.append(error)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of each watched top-level module, once, so adapters install right after its import."""

    def __init__(self, report: list[BaseException]) -> None:
        self._pending = set(_WATCHED) - set(sys.modules)
        self._busy: set[str] = set()
        self._report = report

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._pending or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders (this one answers None meanwhile)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self._pending.discard(fullname)
        spec.loader = _CallbackLoader(spec.loader, self._report)
        return spec


@contextmanager
def watch_imports() -> Iterator[list[BaseException]]:
    """Inside, adapters install as soon as Thunder or nvFuser is imported; yields the list of install errors."""
    report: list[BaseException] = []
    finder = _AfterImport(report)
    sys.meta_path.insert(0, finder)
    try:
        ensure_adapters(direct=True)
        yield report
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
