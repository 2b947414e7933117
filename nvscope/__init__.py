"""nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

    from nvscope import nv_options, with_nv_options
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        loss = jitted_model(x)          # every nvFuser fusion executed here gets these options

``import nvscope`` imports no torch, Thunder or nvFuser; adapters load when a scope first needs them, and the tools
(`compare`, `search`, `kernel_names`, ``__version__``) on first use.
"""

from __future__ import annotations

from types import MappingProxyType

from nvscope._core._catalog_cache import catalog
from nvscope._core._decorators import bind
from nvscope._core._devmode import dev_mode, development_mode, is_development_mode, set_development_mode
from nvscope._core._errors import (
    ConfigWarning,
    DevelopmentModeError,
    DevelopmentModeWarning,
    EscapeWarning,
    FallbackWarning,
    NoEffectWarning,
    NoFusionWarning,
    NvscopeError,
    NvscopeWarning,
    SelectorError,
    UnclosedScopeWarning,
    UnknownOptionError,
    UnsupportedError,
)
from nvscope._core._fusion import FusionInfo, Selector, holding, phase
from nvscope._core._optionset import OptionSet
from nvscope._core._scope import current_options, nv_options, with_nv_options
from nvscope._exec._audit import AuditLog, audit, fusions
from nvscope._exec._autoinstall import install, uninstall
from nvscope._exec._events import FusionRecord

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:  # what __getattr__ loads on first use, spelled out for type checkers
    from nvscope._core._catalog import Catalog, OptionInfo
    from nvscope._measure._kernels import kernel_names
    from nvscope._measure._settings import Measure
    from nvscope._tools._bisect import bisect
    from nvscope._tools._bisect_report import BisectResult
    from nvscope._tools._check import CheckResult, check
    from nvscope._tools._compare import CompareResult, compare
    from nvscope._tools._profile import profile
    from nvscope._tools._profile_report import ProfileResult, ProfileRow
    from nvscope._tools._rescue import rescue
    from nvscope._tools._rescue_report import RescueResult
    from nvscope._tools._search import search
    from nvscope._tools._search_fusions import FusionSearchResult, search_fusions
    from nvscope._tools._search_report import SearchResult

    __version__: str

__all__ = [
    "AuditLog",
    "BisectResult",
    "Catalog",
    "CheckResult",
    "CompareResult",
    "ConfigWarning",
    "DevelopmentModeError",
    "DevelopmentModeWarning",
    "EscapeWarning",
    "FallbackWarning",
    "FusionInfo",
    "FusionRecord",
    "FusionSearchResult",
    "Measure",
    "NoEffectWarning",
    "NoFusionWarning",
    "NvscopeError",
    "NvscopeWarning",
    "OptionInfo",
    "OptionSet",
    "ProfileResult",
    "ProfileRow",
    "RescueResult",
    "SearchResult",
    "Selector",
    "SelectorError",
    "UnclosedScopeWarning",
    "UnknownOptionError",
    "UnsupportedError",
    "__version__",
    "audit",
    "bind",
    "bisect",
    "catalog",
    "check",
    "compare",
    "current_options",
    "dev_mode",
    "development_mode",
    "fusions",
    "holding",
    "install",
    "is_development_mode",
    "kernel_names",
    "nv_options",
    "phase",
    "profile",
    "rescue",
    "search",
    "search_fusions",
    "set_development_mode",
    "uninstall",
    "with_nv_options",
]

# Loaded on first use so that `import nvscope` stays light: name -> (module, attribute).
_LAZY = MappingProxyType({
    "Catalog": ("nvscope._core._catalog", "Catalog"),
    "OptionInfo": ("nvscope._core._catalog", "OptionInfo"),
    "compare": ("nvscope._tools._compare", "compare"),
    "CompareResult": ("nvscope._tools._compare", "CompareResult"),
    "kernel_names": ("nvscope._measure._kernels", "kernel_names"),
    "Measure": ("nvscope._measure._settings", "Measure"),
    "search": ("nvscope._tools._search", "search"),
    "SearchResult": ("nvscope._tools._search_report", "SearchResult"),
    "profile": ("nvscope._tools._profile", "profile"),
    "ProfileResult": ("nvscope._tools._profile_report", "ProfileResult"),
    "ProfileRow": ("nvscope._tools._profile_report", "ProfileRow"),
    "bisect": ("nvscope._tools._bisect", "bisect"),
    "BisectResult": ("nvscope._tools._bisect_report", "BisectResult"),
    "search_fusions": ("nvscope._tools._search_fusions", "search_fusions"),
    "FusionSearchResult": ("nvscope._tools._search_fusions", "FusionSearchResult"),
    "check": ("nvscope._tools._check", "check"),
    "CheckResult": ("nvscope._tools._check", "CheckResult"),
    "rescue": ("nvscope._tools._rescue", "rescue"),
    "RescueResult": ("nvscope._tools._rescue_report", "RescueResult"),
})


def __getattr__(name: str) -> object:
    if name == "__version__":
        from nvscope._core._version import version

        return version()
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'nvscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)  # the public names only: not the imports, the submodules or the lazy-loading machinery
