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

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope._core import _env, _patches
from nvscope._core._catalog import NVFUSER_MODULES as MODULES

__all__ = ["ensure_adapters", "install", "reset", "watch_imports"]

_seen_modules = -1
_WATCHED = ("thunder", *MODULES)


def reset() -> None:
    """Back to a fresh import's state: nothing declined, and the next scope entry looks at ``sys.modules`` again."""
    global _seen_modules
    _seen_modules = -1
    _patches.forget_declined()


def ensure_adapters(direct: bool = False) -> None:
    """Install the adapter for each framework imported by now (see the module docstring for the rule)."""
    global _seen_modules
    count = len(sys.modules)
    if count == _seen_modules and not direct:
        return
    _seen_modules = count
    if not _env.flag("NVSCOPE_AUTOINSTALL"):
        return
    try:
        if "thunder" in sys.modules:
            from nvscope._exec import _thunder as thunder

            if not _patches.declined("thunder") and not thunder.installed():
                thunder.install()
        elif direct and any(name in sys.modules for name in MODULES):
            # Thunder imports nvFuser while it is itself being imported; its own adapter then covers it.
            from nvscope._exec import _nvfuser as nvfuser

            nvfuser.install()
    except BaseException:
        # A refusal (an unknown Thunder: UnsupportedError) must meet every later scope too, not only the first:
        # otherwise the second scope would run its fusions silently without the options.
        _seen_modules = -1
        raise
    _seen_modules = len(sys.modules)  # installing may import more; those need no second look


def install() -> list[str]:
    """Install now the adapter of every framework already imported; returns the adapters in place, e.g.
    ``["nvscope.thunder"]`` (``[]``: import Thunder or nvFuser first).

    Thunder's adapter when ``thunder`` is imported (it covers the nvFuser that Thunder uses), else the direct nvFuser
    adapter for the imported nvFuser frontends. Explicit, so it works under ``NVSCOPE_AUTOINSTALL=0`` and after an
    explicit uninstall; idempotent. Raises `UnsupportedError`, patching nothing, for a Thunder nvscope cannot drive.
    """
    if "thunder" in sys.modules:
        from nvscope._exec import _thunder as thunder

        return ["nvscope.thunder"] if thunder.install() else []
    if any(name in sys.modules for name in MODULES):
        from nvscope._exec import _nvfuser as nvfuser

        return ["nvscope.nvfuser"] if nvfuser.install() else []
    return []


def _imported(name: str) -> None:
    if name != "thunder" and "thunder" in sys.modules:
        return  # nvFuser imported by Thunder's own import: Thunder's adapter installs once Thunder is complete
    ensure_adapters(direct=True)


@contextmanager
def watch_imports() -> Iterator[list[BaseException]]:
    """Inside, adapters install as soon as Thunder or nvFuser is imported; yields the list of install errors."""
    from nvscope._exec._import_hook import (
        AfterImport,  # importlib.abc costs milliseconds that `import nvscope` must not pay
    )

    report: list[BaseException] = []
    finder = AfterImport(_WATCHED, report, _imported)
    sys.meta_path.insert(0, finder)
    try:
        ensure_adapters(direct=True)
        yield report
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
