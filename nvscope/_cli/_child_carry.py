"""``nvscope run``'s options in the Python processes its program starts: the child's side of one variable plus a
start-up hook, as coverage.py measures subprocesses (docs/cli.md, Child processes). The child's ``sitecustomize``
calls `start_child`; a bad ``NVSCOPE_RUN`` warns (`ConfigWarning`) and the child runs without options."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Sequence

from nvscope._core import (
    EMPTY,
    NVFUSER_MODULES,
    ROOT,
    NvscopeWarning,
    OptionSet,
    _env,
    _patches,
    _state,
    cut,
    process_options_shell,
    set_development_mode,
)
from nvscope._exec import AuditLog, audit
from nvscope._tools import HOOK_DIR, VARIABLE, Settings, export

__all__ = ["HOOK_DIR", "ON_ERROR", "VARIABLE", "Settings", "export", "start_child", "take_over"]

ON_ERROR = ("raise", "fallback", "torch")
_KEYS = ("enable", "disable", "fusions", "on_error", "audit", "outer")
_LAYER_KEYS = ("enable", "disable", "fusions", "on_error")
_FIX = (f"{VARIABLE} is set by `nvscope run` for the Python processes its program starts: unset it, or let "
        "`nvscope run` set it")


class _Carried:
    """The ``nvscope run`` carried into this process, from `start` until exit: what its exit handler reports. It keeps
    the entered import watch and audit referenced (a collected generator-based context manager would exit)."""

    __slots__ = ("entered", "install_errors", "log", "settings")

    def __init__(self, settings: Settings, log: AuditLog | None, install_errors: list[BaseException],
                 entered: contextlib.ExitStack) -> None:
        self.settings, self.log, self.install_errors, self.entered = settings, log, install_errors, entered


_carried: _Carried | None = None
_state.keep(__name__, "_carried", "the nvscope run in progress: its exit handler reports it and lets it go")


def _refuse(raw: str, why: str) -> None:
    _env.warn(f"{VARIABLE}={cut(raw, 80, repr)} {why}; this process runs without nvscope run's options. {_FIX}")


def _names(data: dict[str, object], key: str, required: bool) -> list[str] | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"has {key!r} {value!r}, not a list of non-empty strings")
    return value


def _scope_of(data: dict[str, object]) -> Settings:
    """One scope's arguments from their JSON object (raises ValueError saying what is wrong)."""
    enable, disable = _names(data, "enable", True), _names(data, "disable", True)
    fusions, on_error = _names(data, "fusions", False), data.get("on_error")
    if on_error is not None and on_error not in ON_ERROR:
        raise ValueError(f"has 'on_error' {on_error!r}, not one of {', '.join(map(repr, ON_ERROR))}")
    assert enable is not None and disable is not None
    return Settings(enable, disable, fusions, on_error)


def _outer(data: dict[str, object]) -> list[Settings]:
    value = data.get("outer", [])
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError(f"has 'outer' {value!r}, not a list of JSON objects")
    for item in value:
        unknown = sorted(set(item) - set(_LAYER_KEYS))
        if unknown:
            raise ValueError(f"has unknown keys {unknown} in 'outer' (known: {', '.join(_LAYER_KEYS)})")
    return [_scope_of(item) for item in value]


def decode(raw: str) -> Settings | None:
    """The settings in ``raw`` (``NVSCOPE_RUN``'s value), or None after a `ConfigWarning` saying what is wrong."""
    import json

    try:
        data = json.loads(raw)
    except ValueError:
        why = "is not JSON"
    else:
        unknown = sorted(set(data) - set(_KEYS)) if isinstance(data, dict) else []
        why = ("is not a JSON object" if not isinstance(data, dict) else
               f"has unknown keys {unknown} (known: {', '.join(_KEYS)})" if unknown else "")
    if why:
        _refuse(raw, why)
        return None
    audit = data.get("audit", True)
    try:
        settings = _scope_of(data)
        if not isinstance(audit, bool):
            raise ValueError(f"has 'audit' {audit!r}, not true or false")
        settings.audit, settings.outer = audit, _outer(data)
    except ValueError as error:
        _refuse(raw, str(error))
        return None
    return settings


def start_child() -> None:
    """In a child process, at start-up: enter ``NVSCOPE_RUN``'s scope for the main thread, until exit. Never raises
    for a bad value (it warns); nothing happens without the variable."""
    raw = os.environ.get(VARIABLE)
    if raw is None:
        return
    settings = decode(raw)
    if settings is None:
        return
    try:
        scopes = [layer.scope() for layer in settings.layers()]
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        _refuse(raw, f"is refused: {error}")
        return
    from nvscope._exec import watch_imports

    previous = set_development_mode(True)  # process-wide: the scope below stays entered until the process ends
    entered = contextlib.ExitStack()  # left entered: they end with the process
    try:
        install_errors = entered.enter_context(watch_imports())
        log = entered.enter_context(audit()) if settings.audit else None
        for scope in scopes:  # nested, outermost first: each layer's options on the fusions its own globs select
            scope.__enter__()
    except Exception as error:  # an adapter that refuses a Thunder imported by another sitecustomize, say
        entered.close()
        set_development_mode(previous)
        warnings.warn(f"nvscope run's options cannot apply in this process: {error!r}", NvscopeWarning,
                      stacklevel=2)
        return
    import atexit

    global _carried
    _carried = _Carried(settings, log, install_errors, entered)
    atexit.register(_report)


def take_over() -> Settings | None:
    """``nvscope run`` runs in this process (a child of another ``nvscope run``): it prints the summary instead, and
    carries the scopes of the runs around it (returned: None in a process no ``nvscope run`` started)."""
    global _carried
    carried, _carried = _carried, None
    return None if carried is None else carried.settings


def _report() -> None:
    """At exit: install errors, and the audit summary if Thunder or nvFuser was imported, tagged with the pid."""
    global _carried
    carried, _carried = _carried, None
    if carried is None:
        return
    settings, log = carried.settings, carried.log
    lines = [f"nvscope run: could not install an adapter: {problem!r}" for problem in carried.install_errors]
    from nvscope._exec import WATCHED

    if log is not None and (log.records or any(name in sys.modules for name in WATCHED)):
        lines.extend(summary(settings.layers(), log).splitlines())
    if not lines:
        return
    rank = os.environ.get("RANK")
    tag = f"[pid {os.getpid()}{'' if rank is None else f' RANK={rank}'}] "
    with contextlib.suppress(Exception):  # the program may have closed stdout
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.write("".join(tag + line + "\n" for line in lines))  # one write: children may share stderr
        sys.stderr.flush()


def describe(layers: Sequence[Settings]) -> str:
    """The options of nested run scopes (outermost first), in shell words: those that reach every fusion merged, as
    nested scopes merge them, then each selector's own, innermost first (``A, and B on the fusions G``)."""
    everywhere = EMPTY
    selected = []
    for layer in layers:
        options = OptionSet(layer.enable, layer.disable)
        if layer.fusions is None:
            everywhere = everywhere.override(options)
        elif options:
            selected.append(f"{options.as_shell()} on the fusions {', '.join(layer.fusions)}")
    parts = ([everywhere.as_shell()] if everywhere else []) + selected[::-1]
    return ", and ".join(parts) or "(none)"


def summary(layers: Sequence[Settings], log: AuditLog, command: str = "nvscope run") -> str:
    """What ``nvscope run`` (``command``: or ``nvscope fusions``) says at the end of a process: the options of its
    scopes (on which fusions), the audit, why no fusion ran (if none)."""
    env = process_options_shell()
    lines = [f"{command}: options {describe(layers)}"
             + (f" (and {env} from the environment, for the whole process)" if env else "")]
    if ROOT is not None or any(layer.share for layer in layers):
        how = "NVSCOPE_SHARE=all" if ROOT is not None else "--share-defaults"
        lines.append(f"{command}: fusions at their own options share compiled definitions ({how}): each distinct "
                     "definition compiles once")
    lines.append(log.summary())
    if not log.records and not _patches.owners():
        if any(name in sys.modules for name in ("thunder", *NVFUSER_MODULES)):
            lines.append(f"{command}: no nvscope adapter was installed (NVSCOPE_AUTOINSTALL=0?), so the options "
                         "reached no fusion")
        else:
            lines.append(f"{command}: the program imported neither Thunder nor nvFuser, so no fusion could run in "
                         "this process")
    return "\n".join(lines)
