"""nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

    from nvscope import nv_options, with_nv_options
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        loss = jitted_model(x)          # every nvFuser fusion executed here gets these options

``import nvscope`` imports no torch, Thunder or nvFuser; adapters load when a scope first needs them.
"""

from __future__ import annotations

from nvscope import _autoinstall
from nvscope.auditing import AuditLog, audit
from nvscope.devmode import (
    DevelopmentModeError,
    DevelopmentModeWarning,
    NoFusionWarning,
    development_mode,
    set_development_mode,
)
from nvscope.nvfuser import UnsupportedError
from nvscope.option_catalog import Catalog, OptionInfo, UnknownOptionError, catalog
from nvscope.optionset import OptionSet
from nvscope.scope import ENTER_HOOKS, bind, current_options, nv_options, with_nv_options

__version__ = "0.1.0"

__all__ = [
    "AuditLog",
    "Catalog",
    "CompareResult",
    "DevelopmentModeError",
    "DevelopmentModeWarning",
    "NoFusionWarning",
    "OptionInfo",
    "OptionSet",
    "UnknownOptionError",
    "UnsupportedError",
    "__version__",
    "audit",
    "bind",
    "catalog",
    "compare",
    "current_options",
    "development_mode",
    "nv_options",
    "set_development_mode",
    "with_nv_options",
]

ENTER_HOOKS.append(_autoinstall.ensure_adapters)


def __getattr__(name: str) -> object:
    # compare() needs statistics and the profiler glue: loaded on first use so `import nvscope` stays light.
    if name in ("compare", "CompareResult"):
        from nvscope import ab

        return getattr(ab, name)
    raise AttributeError(f"module 'nvscope' has no attribute {name!r}")
