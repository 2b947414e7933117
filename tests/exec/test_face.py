"""The execution layer's face (``nvscope/_exec/__init__.pyi``) names functions and objects, never whole modules: the
layers above call ``compiling()``, not ``_shared.compiling()``."""

from __future__ import annotations

import types

import nvscope._exec


def test_the_face_exports_no_module() -> None:
    modules = [name for name in nvscope._exec.__all__ if isinstance(getattr(nvscope._exec, name), types.ModuleType)]
    assert modules == []
    assert {"ensure_adapters", "watch_imports", "program_errors", "listening", "watch_execute", "compiling",
            "installed", "unsupported", "MIN_VERSION"} <= set(nvscope._exec.__all__)
