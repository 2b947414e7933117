"""The import hook behind `nvscope._exec._autoinstall.watch_imports`: a callback right after a watched module loads.
Apart, as ``importlib.abc`` costs milliseconds that ``import nvscope`` must not pay."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

__all__ = ["AfterImport"]


class _CallbackLoader(importlib.abc.Loader):
    """A module's loader that calls back once the module has executed."""

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
        # importlib.resources, inspect and linecache read the real loader.
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._done(module.__name__)
        try:
            self._callback(module.__name__)
        except Exception as error:  # the program's import must not fail over nvscope
            self._report.append(error)


class AfterImport(importlib.abc.MetaPathFinder):
    """Wraps each watched module's loader, once."""

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
            spec = importlib.util.find_spec(fullname)  # the other finders
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        # Pending until it executes: a find_spec without an import must not hide the later import.
        spec.loader = _CallbackLoader(spec.loader, self._report, self._callback, self._pending.discard)
        return spec
