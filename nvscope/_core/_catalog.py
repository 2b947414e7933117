"""The option catalog: every nvFuser enable/disable option name, what it does, and in which versions it exists.

A bad name fails at ``nv_options``, with the fix, not inside the first fusion. The table is narrowed to the installed
nvFuser's version (read from its metadata); a newer nvFuser is asked about names the table lacks (`_catalog_probe`).
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from nvscope._core import _catalog_data, _catalog_probe, _env, _state
from nvscope._core._errors import NvscopeWarning, UnknownOptionError, once, user_stacklevel
from nvscope._core._optionset import NVFUSER_MODULES
from nvscope._core._record import Record
from nvscope._core._text import cut

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    from packaging.version import Version

    Kind = Literal["enable", "disable"]
    Effect = Literal["codegen", "runtime", "debug"]

__all__ = ["Catalog", "Kind", "OptionInfo", "installed_nvfuser"]

_OTHER: Mapping[str, Kind] = MappingProxyType({"enable": "disable", "disable": "enable"})


class OptionInfo(Record):
    """One nvFuser option: ``effect`` is "codegen", "runtime" or "debug"; ``since``/``until`` the first and last
    versions with it (and ``since_day``/``until_day`` for nightlies); ``ops`` the frontend ops a fusion must hold for
    it to matter (empty: any fusion)."""

    __slots__ = ("description", "effect", "kind", "name", "ops", "requires_args", "since", "since_day", "source",
                 "until", "until_day")

    kind: Kind
    name: str
    effect: Effect
    description: str
    since: str
    until: str | None
    requires_args: bool
    ops: tuple[str, ...]
    source: str | None
    since_day: str | None
    until_day: str | None

    def __init__(self, kind: Kind, name: str, effect: Effect, description: str, since: str, until: str | None,
                 requires_args: bool, ops: tuple[str, ...] = (), source: str | None = None,
                 since_day: str | None = None, until_day: str | None = None) -> None:
        self._init(kind=kind, name=name, effect=effect, description=description, since=since, until=until,
                   requires_args=requires_args, ops=ops, source=source, since_day=since_day, until_day=until_day)

    def available_in(self, version: Version) -> bool:
        """Whether nvFuser ``version`` has this option: by release, and for a nightly by its date too."""
        from packaging.version import Version

        release = Version(version.base_version)
        if release < Version(self.since) or (self.until is not None and release > Version(self.until)):
            return False
        dev = str(version.dev)  # a nightly's build day: 0.2.36.dev20260301
        if not (len(dev) == 8 and "20000101" <= dev <= "29991231"):
            return True  # not a nightly
        day = f"{dev[:4]}-{dev[4:6]}-{dev[6:]}"
        came = self.since_day is None or release != Version(self.since) or day >= self.since_day
        return came and (self.until_day is None or release != Version(self.until or "0") or day < self.until_day)

    @property
    def versions(self) -> str:
        """The version range as text, e.g. ``0.2.23+`` or ``0.2.26-0.2.35``."""
        return f"{self.since}+" if self.until is None else f"{self.since}-{self.until}"


class InstalledNvFuser(Record):
    """An installed nvFuser distribution, found without importing it."""

    __slots__ = ("distribution", "version")

    distribution: str
    version: Version

    def __init__(self, distribution: str, version: Version) -> None:
        self._init(distribution=distribution, version=version)


def _bundled() -> tuple[OptionInfo, ...]:
    gates = {(kind, name): (ops, source) for kind, name, ops, source in _catalog_data.OP_GATES}
    days = {(kind, name): (added, removed) for kind, name, added, removed in _catalog_data.NIGHTLY_DATES}
    return tuple(
        OptionInfo(kind, name, effect, description, since, until, requires_args,  # type: ignore[arg-type]
                   *gates.get((kind, name), ((), None)), *days.get((kind, name), (None, None)))  # type: ignore[call-arg]
        for kind, name, effect, since, until, requires_args, description in _catalog_data.OPTIONS
    )


@functools.cache
def installed_nvfuser() -> InstalledNvFuser | None:
    """The installed nvFuser, from an imported module if there is one, else from the distributions whose name starts
    with ``nvfuser`` (wheels are named for CUDA and torch). Cached for the process."""
    from importlib import metadata

    from packaging.version import InvalidVersion, Version

    for module_name in NVFUSER_MODULES:
        module = sys.modules.get(module_name)
        version_fn = getattr(module, "version", None)
        if callable(version_fn):
            try:
                return InstalledNvFuser(module_name, Version(str(version_fn())))
            except InvalidVersion:
                pass
    found = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("nvfuser"):
            try:
                found.append(InstalledNvFuser(name, Version(dist.version)))
            except InvalidVersion:
                continue
    return min(found, key=lambda f: f.distribution) if found else None


# How "pass it as ..." spells a name in the other list; command-line tools pass their flag's syntax.
PYTHON_SPELLING = "{kind}=[{name!r}]"

_ARTICLE: Mapping[str, str] = MappingProxyType({"enable": "an enable", "disable": "a disable"})
_LONGEST_SHOWN = 60  # a name longer than this is cut in messages


def _shown(name: str) -> str:
    """``repr(name)``, cut to a readable length."""
    return cut(name, _LONGEST_SHOWN - 12, repr)


def _close_matches(name: str, names: Iterable[str], n: int, cutoff: float) -> list[str]:
    """Did-you-mean candidates, compared case-insensitively."""
    if len(name) > 2 * _LONGEST_SHOWN:  # difflib is quadratic
        return []
    import difflib

    by_lower = {candidate.lower(): candidate for candidate in names}
    return [by_lower[match] for match in difflib.get_close_matches(name.lower(), by_lower, n=n, cutoff=cutoff)]


class Catalog:
    """The options one nvFuser version accepts (or the whole bundled table when no nvFuser is installed); on a newer
    nvFuser, a name the table lacks passes if nvFuser accepts it, with a one-time `NvscopeWarning`."""

    __slots__ = ("_all", "_by_kind", "_gates", "_newer", "nvfuser", "options", "source")

    def __init__(self, options: Iterable[OptionInfo], nvfuser: InstalledNvFuser | None) -> None:
        everything = tuple(options)
        self.nvfuser = nvfuser
        first, last = _catalog_data.VERSIONS[0][0], _catalog_data.VERSIONS[-1][0]
        self._newer = False
        if nvfuser is None:
            self.options = everything
            self.source = f"bundled catalog (nvFuser {first} to {last}; no nvFuser installed)"
        else:
            self.options = tuple(o for o in everything if o.available_in(nvfuser.version))
            from packaging.version import Version

            self._newer = Version(nvfuser.version.base_version) > Version(last)
            note = (f", newer than the catalog's {last}: names the catalog lacks are checked with nvFuser itself"
                    if self._newer else "")
            self.source = f"bundled catalog for installed nvFuser {nvfuser.version} ({nvfuser.distribution}{note})"
        self._by_kind: dict[str, dict[str, OptionInfo]] = {"enable": {}, "disable": {}}
        self._all = everything
        for option in self.options:
            self._by_kind[option.kind][option.name] = option
        # The gates were read up to the newest version covered; a newer nvFuser may read more.
        self._gates: dict[tuple[str, str], frozenset[str]] = {} if self._newer else {
            (o.kind, o.name): frozenset(o.ops) for o in self.options if o.ops
        }

    def __repr__(self) -> str:
        return f"<nvscope Catalog: {len(self.options)} options, {self.source}>"

    def names(self, kind: Kind) -> frozenset[str]:
        """Every name accepted in the ``kind`` list."""
        return frozenset(self._by_kind[kind])

    def can_affect(self, kind: str, name: str, ops: Collection[str]) -> bool:
        """Whether option ``name`` can affect a fusion holding ``ops`` (frontend op names): False only when it is
        gated (`OptionInfo.ops`) on ops the fusion lacks."""
        if isinstance(ops, str):
            raise TypeError(f"can_affect: ops must be a collection of op names, not the string {ops!r}")
        gate = self._gates.get((kind, name))
        return gate is None or not gate.isdisjoint(ops)

    def get(self, kind: Kind, name: str) -> OptionInfo | None:
        """The option ``name`` in the ``kind`` list, or None."""
        return self._by_kind[kind].get(name)

    def check(self, kind: Kind, name: str, *, spelling: str = PYTHON_SPELLING) -> None:
        """Raise `UnknownOptionError`, with the fix in the message, unless ``name`` is valid per call in ``kind``.
        ``spelling`` formats a name in a list (``{kind}``, ``{name}``), e.g. ``"--{kind} {name}"`` for a CLI."""
        info = self._by_kind[kind].get(name)
        if info is not None:
            if info.requires_args:
                raise UnknownOptionError(
                    f"nvFuser {kind} option {name!r} needs arguments, e.g. NVFUSER_{kind.upper()}={name}(...), "
                    "and per-call options carry no arguments: set it in the environment before the process starts"
                )
            return
        self._miss(kind, name, spelling)

    def _miss(self, kind: Kind, name: str, spelling: str) -> None:
        """``check`` for a name this version's table lacks: accept it if nvFuser does, else raise."""
        shown = _shown(name)
        if "(" in name:
            env = f"NVFUSER_{kind.upper()}={name}" if len(name) <= _LONGEST_SHOWN else f"NVFUSER_{kind.upper()}"
            raise UnknownOptionError(f"nvFuser {kind} option {shown}: per-call options carry no arguments; "
                                     f"set {env} in the environment before the process starts")
        anywhere = [o for o in self._all if o.name == name and o.kind == kind]
        other = _OTHER[kind]
        # A name in the other list passes on trust only when nvFuser is newer than the catalog (names move).
        wrong_list = name in self._by_kind[other]
        if not any(o.requires_args for o in anywhere):
            if _env.flag("NVSCOPE_TRUST_NVFUSER") and (self._newer or not wrong_list):
                if wrong_list:
                    self._note(kind, name, "passed to nvFuser unvalidated (NVSCOPE_TRUST_NVFUSER=1); if it is "
                                           f"still {_ARTICLE[other]} option there, pass it as "
                                           + spelling.format(kind=other, name=name),
                               f"is {_ARTICLE[other]} option in nvscope's catalog (which covers nvFuser up to "
                               f"{_catalog_data.VERSIONS[-1][0]}), not {_ARTICLE[kind]} option")
                else:
                    self._note(kind, name, "passed to nvFuser unvalidated (NVSCOPE_TRUST_NVFUSER=1)")
                return
            accepted = _catalog_probe.accepted() if self._newer else None  # None: nvFuser cannot be asked
            if accepted is not None and name in accepted[kind]:
                self._note(kind, name, f"accepted because the installed nvFuser {self._installed()} accepts it per "
                                       f"call; the bundled catalog is older (it covers nvFuser up to "
                                       f"{_catalog_data.VERSIONS[-1][0]})")
                return
        # The version check first: a name that moved between lists across versions must not be "passed as" the other.
        if anywhere and self.nvfuser is not None:
            also = f" (it has {name!r} only as {_ARTICLE[other]} option)" if wrong_list else ""
            raise UnknownOptionError(
                f"nvFuser {kind} option {name!r} exists only in nvFuser {anywhere[0].versions}; "
                f"the installed nvFuser is {self.nvfuser.version}{also}{self._newer_note(kind, name, spelling)}"
            )
        if wrong_list:
            raise UnknownOptionError(
                f"{name!r} is an nvFuser {other} option, not {_ARTICLE[kind]} option: pass it as "
                + spelling.format(kind=other, name=name)
            )
        close, close_other = self.near(kind, name)
        hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else
                f"; did you mean the {other} option {close_other[0]!r}?" if close_other else "")
        raise UnknownOptionError(f"unknown nvFuser {kind} option {shown}{hint} (`nvscope options` lists them all)"
                                 + self._newer_note(kind, name, spelling))

    def near(self, kind: Kind, name: str) -> tuple[list[str], list[str]]:
        """Did-you-mean candidates for ``name``: (names of ``kind``, of the other kind)."""
        mine, other = self._by_kind[kind], self._by_kind[_OTHER[kind]]
        same = next((candidate for candidate in (*mine, *other) if candidate.lower() == name.lower()), None)
        if same is not None:  # the name but for case
            return ([same], []) if same in mine else ([], [same])
        return _close_matches(name, mine, n=3, cutoff=0.6), _close_matches(name, other, n=1, cutoff=0.75)

    def _installed(self) -> str:
        return "?" if self.nvfuser is None else str(self.nvfuser.version)

    def _newer_note(self, kind: Kind, name: str, spelling: str) -> str:
        """For a refusal on an nvFuser newer than the catalog: what nvFuser itself said, or the way out."""
        if not self._newer:
            return ""
        probed, probe_error = _catalog_probe.known()
        said = (f" (the bundled catalog covers nvFuser up to {_catalog_data.VERSIONS[-1][0]}, older than the "
                f"installed {self._installed()}")
        if probed is not None:
            other = _OTHER[kind]
            if name in probed[other]:
                return (f"{said}; that nvFuser accepts it as {_ARTICLE[other]} option: pass it as "
                        f"{spelling.format(kind=other, name=name)})")
            return f"{said}, and that nvFuser does not accept it either)"
        if probe_error is not None:
            return (f"{said}, and nvFuser could not be asked which names it accepts: {probe_error}; set "
                    "NVSCOPE_TRUST_NVFUSER=1 to pass names the catalog lacks to nvFuser unvalidated)")
        return ""  # not asked (a name that needs arguments)

    def _note(self, kind: Kind, name: str, why: str, what: str = "is not in nvscope's option catalog") -> None:
        """Say once per process that ``name`` was let through although the catalog lacks it."""
        if not once("catalog", kind, name):
            return
        warnings.warn(f"nvFuser {kind} option {_shown(name)} {what}: {why}",
                      NvscopeWarning, stacklevel=user_stacklevel())


_state.keep(__name__, "installed_nvfuser", "the installed nvFuser: uninstall changes no installation; "
            "`nvscope._core._catalog_cache._reset_cache` forgets it for tests that fake one")
