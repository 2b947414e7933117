"""Executor adapter for Lightning Thunder's nvFuser executor: the public verbs.

`install` refuses, changing nothing, a Thunder that lacks what the patches (`ThunderAdapter.install`) rely on
(docs/failures.md, Thunder versions); `uninstall` undoes them exactly.
"""

from __future__ import annotations

import importlib
from typing import Any

from nvscope._core import UnsupportedError, _patches, _state
from nvscope._exec import _frontends
from nvscope._exec._adapter import INSTALLED
from nvscope._exec._fusion_table import FusionTable
from nvscope._exec._thunder_adapter import IMPL_MODULE, OWNER, PROVEN, ThunderAdapter, thunder_version
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


def _refusal(impl: Any, autograd: Any) -> str | None:
    """Why the adapter does not fit this Thunder, or None."""
    missing = ThunderAdapter.refusal(impl) + _autograd_refusal(autograd)
    why = f"lacks {', '.join(missing)}" if missing else None
    if why is None and callable(getattr(getattr(impl, "create_fd", None), "num_fusions", None)):
        # Equal definitions would share one compiled cache whatever their options: the default's kernels.
        why = ("builds its definitions through nvFuser's LruFusionCache, which shares compiled kernels between "
               "equal definitions whatever their options")
    if why is None:
        return None
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
    """Why `install` would refuse the Thunder installed here, or None (for ``nvscope doctor``)."""
    modules = _modules()
    return None if modules is None else _refusal(*modules)


def installed() -> bool:
    """Whether the Thunder patches are in place."""
    return bool(_patches.active(OWNER))


def install() -> bool:
    """Patch Thunder's nvFuser executor so it honours the active scope; idempotent. Returns whether the patches are
    in place; `UnsupportedError`, changing nothing, for a Thunder that lacks what they rely on."""
    _patches.accept(OWNER)
    if installed():
        return True
    modules = _modules()
    if modules is None:
        return False
    why = _refusal(*modules)
    if why is not None:
        raise UnsupportedError(why)
    # A too-old nvFuser is refused when a scope reaches a fusion: unscoped Thunder still works.
    INSTALLED.add(OWNER, ThunderAdapter(*modules, _frontends.check_version(_nvfuser_version())))
    return True


def uninstall() -> bool:
    """Restore Thunder's executor exactly and drop every fusion's partitions; returns whether anything was restored.
    Later scopes do not install it again; `install()` does."""
    _patches.decline(OWNER)
    restored = INSTALLED.remove(OWNER) or _patches.restore(OWNER)
    _state.reset("shared", "ids")
    return restored


def partitions(fusion: Any) -> FusionTable[_frontends.Partition] | None:
    """The table of one Thunder fusion (a ``FusionDefinitionWrapper``): its ``info`` and partitions; or None."""
    adapter = INSTALLED.get(OWNER)
    return None if adapter is None else adapter.lookup(fusion)
