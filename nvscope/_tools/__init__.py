"""Layer 4, the tools: compare, search, per-fusion search, profile, bisect and minimize, with their results.
Imports only the layers below (tests/test_layers.py); the command line is above, in `nvscope._cli`."""

# The interface: what the command line and the faces may use (they import it from here, never from a module of this
# layer; tests/test_layers.py). Loaded on first use: each tool loads when it is first named. ``_program`` is a
# namespace: running a program as ``nvscope run`` does, and what it carries to the processes the program starts.
from nvscope._core import lazy_attributes

__all__ = [
    "BisectResult",
    "CheckResult",
    "CompareResult",
    "ConfigError",
    "FusionSearchResult",
    "ProfileResult",
    "ProfileRow",
    "RescueResult",
    "SearchResult",
    "_program",
    "bisect",
    "bisect_program",
    "check",
    "check_arg",
    "compare",
    "profile",
    "rescue",
    "search",
    "search_fusions",
    "timeout_seconds",
]

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:  # what __getattr__ loads, spelled out for type checkers
    from . import _program as _program
    from ._bisect import bisect as bisect
    from ._bisect import check_arg as check_arg
    from ._bisect_process import bisect_program as bisect_program
    from ._bisect_process import timeout_seconds as timeout_seconds
    from ._bisect_report import BisectResult as BisectResult
    from ._check import CheckResult as CheckResult
    from ._check import ConfigError as ConfigError
    from ._check import check as check
    from ._compare import CompareResult as CompareResult
    from ._compare import compare as compare
    from ._profile import profile as profile
    from ._profile_report import ProfileResult as ProfileResult
    from ._profile_report import ProfileRow as ProfileRow
    from ._rescue import rescue as rescue
    from ._rescue_report import RescueResult as RescueResult
    from ._search import search as search
    from ._search_fusions import FusionSearchResult as FusionSearchResult
    from ._search_fusions import search_fusions as search_fusions
    from ._search_report import SearchResult as SearchResult
else:  # hidden from type checkers, which then still report a misspelt name
    __getattr__ = lazy_attributes(__name__, {
        "bisect": "._bisect", "check_arg": "._bisect",
        "bisect_program": "._bisect_process", "timeout_seconds": "._bisect_process",
        "BisectResult": "._bisect_report",
        "CheckResult": "._check", "ConfigError": "._check", "check": "._check",
        "CompareResult": "._compare", "compare": "._compare",
        "profile": "._profile",
        "ProfileResult": "._profile_report", "ProfileRow": "._profile_report",
        "rescue": "._rescue",
        "RescueResult": "._rescue_report",
        "search": "._search",
        "FusionSearchResult": "._search_fusions", "search_fusions": "._search_fusions",
        "SearchResult": "._search_report",
    })
