"""Executor adapter for Lightning Thunder's nvFuser executor: the public verbs.

Three patches, all undone exactly by `uninstall` (`nvscope._core._patches`), each owned by one module:

1. ``FusionDefinitionWrapper.__call__`` (``thunder/executors/nvfuserex_impl.py``), Thunder's per-fusion entry point:
   in place only while a scope exists somewhere or an audit listens (`nvscope._core._patches.demand`), so with none
   Thunder's own ``__call__`` runs untouched; with no scope active in the caller's context (and no audit listening)
   it runs Thunder's own ``__call__`` behind one ContextVar read and two tests; otherwise the call goes through
   nvscope's one execution path (`nvscope._exec._execute`) with the wrapper shape `install` picked
   (`nvscope._exec._thunder_adapter`), which runs a partition (a copy of the wrapper) per option set.
2. ``execute_with_dtensors`` as ``nvfuserex_impl`` calls it for DTensor inputs: nvFuser's function, handed a view of
   a partition's definition whose ``execute`` passes the options (`nvscope._exec._frontends`).
3. ``ThunderFunction.forward``/``backward`` (``thunder/executors/torch_autograd.py``): backward fusions run under
   their forward's scope, wherever autograd runs them (`nvscope._exec._thunder_autograd`); the backward on demand,
   as 1; the forward while installed (once per step, not per fusion): it names the jitted function for the
   backward's fusion ids also when no scope or audit exists during the forward (``.backward()`` scoped alone).

An exception out of a scoped fusion keeps its type and gains a note naming the fusion, the phase and the options,
with a repro script that runs with them (`nvscope._exec._repro`); under ``on_error="fallback"`` the fusion runs again
with its defaults. `install` checks the Thunder it finds first and refuses one that lacks what these patches rely on,
changing nothing. Installed lazily by the first non-empty scope once ``thunder`` is imported
(`nvscope._exec._autoinstall`); `install()` does it explicitly and is idempotent.
"""

from __future__ import annotations

import importlib
from typing import Any

from nvscope._core import UnsupportedError, _patches, _state
from nvscope._exec import _frontends
from nvscope._exec._adapter import INSTALLED
from nvscope._exec._fusion_table import FusionTable
from nvscope._exec._thunder_adapter import IMPL_MODULE, OWNER, PROVEN, SHAPES, ThunderAdapter, thunder_version
from nvscope._exec._thunder_autograd import AUTOGRAD_MODULE
from nvscope._exec._thunder_autograd import refusal as _autograd_refusal

__all__ = ["install", "installed", "partitions", "uninstall", "unsupported"]

VERSION_MODULE = "thunder.executors.nvfuserex"


def _nvfuser_version() -> str | None:
    try:
        raw = importlib.import_module(VERSION_MODULE).nvfuser_version()
    except (ImportError, AttributeError):
        return None
    return None if raw is None else str(raw)


def _choose(impl: Any, autograd: Any) -> type[ThunderAdapter] | str:
    """The wrapper shape that fits this Thunder, or why none does (what is missing or in the way)."""
    missing: list[str] = []
    shape = None
    for candidate in SHAPES:
        lacking = candidate.refusal(impl)
        if not lacking:
            shape = candidate
            break
        missing = missing or lacking
    missing += _autograd_refusal(autograd)
    why = f"lacks {', '.join(missing)}" if missing or shape is None else None
    if why is None and callable(getattr(getattr(impl, "create_fd", None), "num_fusions", None)):
        # Thunder PR 2806 (closed) shape: nvFuser's LruFusionCache around create_fd gives equal definitions one
        # compiled cache whatever their options, so a partition's definitions would run the default's kernels.
        why = ("builds its definitions through nvFuser's LruFusionCache, which shares compiled kernels between "
               "equal definitions whatever their options")
    if why is None and shape is not None:
        return shape
    return (f"nvscope cannot drive {thunder_version()}: its nvFuser executor {why}. Nothing was patched, so "
            f"scopes do not reach its fusions. nvscope is proven with {PROVEN} (docs/failures.md, \"Thunder "
            "versions\"): use one of those, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process "
            "(NVSCOPE_AUTOINSTALL=0 keeps scopes from trying this adapter).")


def _modules() -> tuple[Any, Any] | None:
    try:
        return importlib.import_module(IMPL_MODULE), importlib.import_module(AUTOGRAD_MODULE)
    except ImportError:
        return None


def unsupported() -> str | None:
    """Why `install` would refuse the Thunder installed here, or None (for ``nvscope doctor``).

    None also when Thunder's nvFuser executor does not import at all: `install` then returns False.
    """
    modules = _modules()
    if modules is None:
        return None
    chosen = _choose(*modules)
    return chosen if isinstance(chosen, str) else None


def installed() -> bool:
    """Whether the Thunder patches are in place."""
    return bool(_patches.active(OWNER))


def install() -> bool:
    """Patch Thunder's nvFuser executor so it honours the active scope. Idempotent.

    Returns whether the patches are in place: False, changing nothing, when Thunder's nvFuser executor cannot be
    imported. Raises `UnsupportedError`, changing nothing, for a Thunder that lacks what the patches rely on.
    """
    _patches.accept(OWNER)
    if installed():
        return True
    modules = _modules()
    if modules is None:
        return False
    chosen = _choose(*modules)
    if isinstance(chosen, str):
        raise UnsupportedError(chosen)
    # A too-old nvFuser is refused when a scope reaches a fusion, not here: unscoped Thunder still works.
    INSTALLED.add(OWNER, chosen(*modules, _frontends.check_version(_nvfuser_version())))
    return True


def uninstall() -> bool:
    """Restore Thunder's original executor exactly, and drop every fusion's partitions. Idempotent; returns whether
    anything was restored. Scopes entered afterwards do not install it again (an explicit choice); `install()` does.
    """
    _patches.decline(OWNER)
    restored = INSTALLED.remove(OWNER) or _patches.restore(OWNER)
    # What the partitions were built on goes with them: the shared definitions, and the numbering of fusion ids.
    _state.reset("shared", "ids")
    return restored


def partitions(fusion: Any) -> FusionTable[_frontends.Partition] | None:
    """The table of one Thunder fusion (a ``FusionDefinitionWrapper``), or None if nvscope never saw it scoped or
    audited: its ``info`` (`nvscope.FusionInfo`), and its partitions, whose ``runner`` is the wrapper copy that runs
    the fusion for that option set."""
    adapter = INSTALLED.get(OWNER)
    return None if adapter is None else adapter.lookup(fusion)
