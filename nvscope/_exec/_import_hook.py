"""The import hook behind `nvscope._exec._autoinstall.watch_imports`: a callback right after a watched module loads.

Kept out of ``_autoinstall`` because ``importlib.abc`` costs milliseconds that ``import nvscope`` must not pay; only
``nvscope run`` loads it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

__all__ = ["AfterImport"]


class _CallbackLoader(importlib.abc.Loader):
    """Wraps a module's loader to call back once the module has finished executing (errors go to ``report``)."""

    def __init__(self, loader: importlib.abc.Loader, report: list[BaseException],
                 callback: Callable[[str], None], done: Callable[[str], None]) -> None:
        self._loader = loader
        self._report = report
        self._callback = callback
        self._done = done

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
        self._done(module.__name__)
        try:
            self._callback(module.__name__)
        except Exception as error:  # the program's import must not fail over nvscope; the runner reports it
            self._report.append(error)


class AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of each watched top-level module, once, so the callback runs right after its import."""

    def __init__(self, modules: Iterable[str], report: list[BaseException], callback: Callable[[str], None]) -> None:
        self._pending = set(modules) - set(sys.modules)
        self._busy: set[str] = set()
        self._report = report
        self._callback = callback

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
        # Still pending until the module executes: ``importlib.util.find_spec("thunder")`` (doctor, a library probing
        # what is installed) asks this finder too, without importing; the later import must still be seen.
        spec.loader = _CallbackLoader(spec.loader, self._report, self._callback, self._pending.discard)
        return spec
