"""The one parser for nvscope's environment variables (``NVSCOPE_*``): each declared once with its type and
default. A value that does not parse warns once (`ConfigWarning`) and the default applies. Values are read at each
use, so a launcher or a test may change them at any time."""

from __future__ import annotations

import os
import warnings
from types import MappingProxyType

from nvscope._core._errors import ConfigWarning, once
from nvscope._core._text import cut

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["RUN", "VARIABLES", "flag", "integer", "problems", "share_all", "text", "warn"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

# What a kind's value may be, as a refusal says it.
_ACCEPTED: Mapping[str, str] = MappingProxyType({
    "flag": "1/true/yes/on or 0/false/no/off", "share": "1/true/yes/on, 0/false/no/off or all",
    "count": "a positive integer"})

# `nvscope run` -> its child processes (nvscope/_cli/_child_carry.py)
RUN = "NVSCOPE_RUN"

# name -> (kind, default, what it does). kind: "flag", "count" (an integer >= 1), "text", "share" (a flag or "all").
VARIABLES: Mapping[str, tuple[str, object, str]] = MappingProxyType({
    "NVSCOPE_DEV": ("flag", False, "development mode: scopes do not warn"),
    "NVSCOPE_STRICT": ("flag", False, "outside development mode a scope raises DevelopmentModeError"),
    "NVSCOPE_AUTOINSTALL": ("flag", True, "the first non-empty scope installs the Thunder adapter"),
    "NVSCOPE_MAX_PARTITIONS": ("count", 8, "option sets kept compiled per fusion (LRU)"),
    "NVSCOPE_SHARE": ("share", True, "fusions with identical nvFuser definitions share one compiled definition per "
                      "option set: 1 scoped fusions (default), all also the defaults of every fusion (read when "
                      "nvscope is imported: the program-wide nv_options(share=True)), 0 none"),
    "NVSCOPE_MAX_SHARED": ("count", 256, "shared compiled definitions kept process-wide (LRU)"),
    "NVSCOPE_REPRO": ("flag", True, "a failing scoped fusion writes a repro script"),
    "NVSCOPE_REPRO_DIR": ("text", "", "where repro scripts go (default: a temporary directory)"),
    "NVSCOPE_TRUST_NVFUSER": ("flag", False, "option names the catalog lacks go to nvFuser unvalidated (for an "
                              "nvFuser newer than the catalog that cannot be asked, e.g. without CUDA)"),
    RUN: ("text", "", "set by `nvscope run` while its program runs: its options, as JSON, for the Python "
                    "processes the program starts (read by nvscope/_cli/_child_carry.py, not by this parser)"),
})

def _parse(name: str, raw: str) -> tuple[object, str | None]:
    """(value, None) or (the default, why ``raw`` was refused)."""
    kind, default, _ = VARIABLES[name]
    value = raw.strip()
    if kind == "share" and value.lower() == "all":
        return "all", None
    if kind in ("flag", "share"):
        lowered = value.lower()
        if lowered in _TRUE:
            return True, None
        if lowered in _FALSE:
            return False if value else default, None
    elif kind == "count":
        # ASCII digits only: str.isdigit() also accepts '²' and '٣'.
        if value.isascii() and value.isdigit() and int(value) >= 1:
            return int(value), None
    else:
        return value, None
    return default, f"{name}={cut(raw, 40, repr)} is not {_ACCEPTED[kind]}; using the default ({default!r})"


def _get(name: str, warns: bool = True) -> object:
    raw = os.environ.get(name)
    if raw is None:
        return VARIABLES[name][1]
    value, problem = _parse(name, raw)
    if warns and problem is not None and once("environment", name, raw):
        warn(problem)
    return value


def warn(problem: str) -> None:
    """A `ConfigWarning` located in ``<environment>``, where the fix is, not at the line that read the variable."""
    warnings.warn_explicit(problem, ConfigWarning, "<environment>", 0, module="nvscope")


def flag(name: str) -> bool:
    """The on/off variable ``name`` (declared in `VARIABLES`)."""
    return bool(_get(name))


def share_all(warn: bool = True) -> bool:
    """``NVSCOPE_SHARE=all``: the defaults of every fusion share compiled definitions. ``warn=False`` for the read at
    import, where ``-W error`` would make a bad value a crash."""
    return _get("NVSCOPE_SHARE", warn) == "all"


def integer(name: str) -> int:
    """The integer variable ``name`` (declared in `VARIABLES`)."""
    value = _get(name)
    assert isinstance(value, int)
    return value


def text(name: str) -> str:
    """The string variable ``name`` (declared in `VARIABLES`)."""
    return str(_get(name))


def problems() -> list[tuple[str, str]]:
    """Every set ``NVSCOPE_*`` variable whose value is refused, or whose name is unknown, as (name, message)."""
    found = []
    for name, raw in sorted(os.environ.items()):
        if not name.startswith("NVSCOPE_"):
            continue
        if name not in VARIABLES:
            if name not in ("NVSCOPE_CI_VENV", "NVSCOPE_GPU_THUNDER"):  # the project's scripts' variables
                found.append((name, f"{name} is not a variable nvscope reads (known: {', '.join(VARIABLES)})"))
            continue
        problem = _parse(name, raw)[1]
        if problem is not None:
            found.append((name, problem))
    return found
