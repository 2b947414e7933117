"""Running a user's program as ``nvscope run`` runs it (`run_program`), and carrying its options to the Python
processes the program starts (`Settings`, `export`); each run of a ``bisect --subprocess`` runs through it too.
The carry's child side is `nvscope._cli._child_carry`."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

from nvscope._core import (
    ACTIVE,
    Frame,
    NoFusionWarning,
    UnclosedScopeWarning,
    _env,
    _scope,
    cut,
    set_development_mode,
    unwind,
)
from nvscope._exec import AuditLog, audit, watch_imports

__all__ = ["HOOK_DIR", "SHARE", "VARIABLE", "Settings", "export", "run_program"]

VARIABLE = _env.RUN
SHARE = "NVSCOPE_SHARE"  # `--share-defaults`: "all" for the children (`export`)
HOOK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_child")


# --- what nvscope run carries -----------------------------------------------------------------------------------------

class Settings:
    """What ``nvscope run`` carries: the scope's arguments, whether to audit, and the scopes of the runs around it
    (``outer``, outermost first: an ``nvscope run`` in a child of another one)."""

    __slots__ = ("audit", "disable", "enable", "fusions", "on_error", "outer", "share")

    def __init__(self, enable: Sequence[str], disable: Sequence[str], fusions: Sequence[str] | None = None,
                 on_error: str | None = None, audit: bool = True, outer: Sequence[Settings] = (),
                 share: bool = False) -> None:
        self.enable, self.disable = list(enable), list(disable)
        self.fusions = None if fusions is None else list(fusions)
        self.on_error = on_error
        self.audit = audit
        self.outer = list(outer)
        # Children get NVSCOPE_SHARE=all instead (`export`): read at import, it shares in every thread.
        self.share = share

    def layers(self) -> list[Settings]:
        """The scopes a process under these settings enters, outermost first (this run's own last)."""
        return [*self.outer, self]

    def scope(self) -> _scope.nv_options:
        """``nv_options`` with these arguments; ``fusions=``/``on_error=`` only when given (may raise on bad ones)."""
        extra = {**self._scope_data(), **({"share": True} if self.share else {})}
        # Looked up at each call, in its module: a test stands a recording nv_options in for it (sitecustomize).
        return _scope.nv_options(**extra)  # type: ignore[arg-type]

    def _scope_data(self) -> dict[str, object]:
        data: dict[str, object] = {"enable": self.enable, "disable": self.disable}
        if self.fusions is not None:
            data["fusions"] = self.fusions
        if self.on_error is not None:
            data["on_error"] = self.on_error
        return data

    def encode(self) -> str:
        import json

        data = {**self._scope_data(), "audit": self.audit}
        if self.outer:
            data["outer"] = [layer._scope_data() for layer in self.outer]
        return json.dumps(data, separators=(",", ":"))


def export(settings: Settings) -> Callable[[], None]:
    """Carry ``settings`` to the Python processes started from now on, through ``NVSCOPE_RUN`` and the hook's
    directory on ``PYTHONPATH``; returns the function that stops it."""
    saved = {name: os.environ.get(name) for name in (VARIABLE, "PYTHONPATH", SHARE)}
    os.environ[VARIABLE] = settings.encode()
    if settings.share:
        os.environ[SHARE] = "all"
    path = saved["PYTHONPATH"]
    if not path:
        os.environ["PYTHONPATH"] = HOOK_DIR
    elif HOOK_DIR not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = HOOK_DIR + os.pathsep + path

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    return restore


# --- the program ------------------------------------------------------------------------------------------------------

def _said(text: str) -> str:
    return cut(text, 200, repr)  # a path or module from the command line: a message must not echo 100,000 characters


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames that belong to nvscope's runner and runpy, as Python does for its own runner."""
    import runpy

    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith("<frozen runpy") or os.path.abspath(filename) in ours):
            break
        tb = tb.tb_next
    return tb


def _exit_code(code: object) -> int:
    """What Python does with ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _set_path0(entry: str) -> None:
    """``sys.path[0]`` is the script's directory (or the working directory for -m), as ``python`` sets it."""
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.append(entry)


def _restore(argv: list[str], path0: str | None) -> None:
    sys.argv = argv
    if path0 is not None and sys.path:
        sys.path[0] = path0


def _not_runnable(script: str) -> str | None:
    """Why ``python script`` could not start (as a one-line error), or None."""
    if not os.path.exists(script):
        return f"can't open file {_said(os.path.abspath(script))}: no such file"
    if os.path.isdir(script) and not any(os.path.isfile(os.path.join(script, f"__main__{ext}"))
                                         for ext in (".py", ".pyc")):
        return (f"{_said(script)} is a directory without a __main__.py: give the script itself (Python runs a "
                "directory by its __main__.py)")
    return None


def run_program(script: str | None, module: str | None, args: list[str], settings: Settings, *,
                command: str = "nvscope run", take_over: Callable[[], Settings | None] | None = None,
                output: Callable[[], AbstractContextManager[object]] = nullcontext) -> tuple[int, AuditLog | None]:
    """Run ``script`` (or ``module``) with ``args`` under ``settings``' scope, carried to its Python children
    (`export`): its exit code (2 when the scope is refused or it cannot start) and, with ``settings.audit``, the audit.
    ``take_over``: the settings of an enclosing ``nvscope run``; ``output``: a context for the program's run."""
    import runpy

    try:
        scope = settings.scope()
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        print(f"{command}: error: {error}", file=sys.stderr)
        return 2, None
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    if script is not None:
        cannot = _not_runnable(script)
        if cannot is not None:
            print(f"{command}: error: {cannot}", file=sys.stderr)
            return 2, None
        _set_path0(os.path.dirname(os.path.abspath(script)))
        sys.argv = [script, *args]
    else:
        assert module is not None
        _set_path0(os.getcwd())
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as error:
            spec, reason = None, f"{type(error).__name__}: {cut(str(error), 300)}"
        else:
            reason = f"No module named {_said(module)}"
        if spec is None:
            print(f"{command}: error: cannot run module {_said(module)}: {reason}", file=sys.stderr)
            _restore(saved_argv, saved_path0)
            return 2, None
        sys.argv = [module, *args]

    # Process-wide, not dev_mode's context-local switch: the program's own threads may enter scopes too.
    previous_mode = set_development_mode(True)
    log: AuditLog | None = None
    code = 0
    try:
        recording: AbstractContextManager[AuditLog | None] = audit() if settings.audit else nullcontext()
        with recording as log, watch_imports() as install_errors:
            scope.__enter__()
            ours = ACTIVE.get()
            # In a child of another nvscope run, this run's scope nests in that one's and its summary names both.
            around = None if take_over is None else take_over()
            if around is not None:
                settings.outer = around.layers()
            stop_carrying = export(settings)  # the Python processes the program starts get them too
            try:
                with output():
                    if script is not None:
                        runpy.run_path(script, run_name="__main__")  # sys.argv[0] and __file__: the path as given
                    else:
                        runpy.run_module(module, run_name="__main__", alter_sys=True)  # type: ignore[arg-type]
            except SystemExit as stop:
                code = _exit_code(stop.code)
            except BaseException as error:
                sys.stdout.flush()
                traceback.print_exception(type(error), error, _user_traceback(error.__traceback__))
                code = 130 if isinstance(error, KeyboardInterrupt) else 1
            finally:
                stop_carrying()
                _close_unclosed(ours)
                with warnings.catch_warnings():
                    # The summary says whether fusions ran; the scope's own NoFusionWarning would point at runpy.
                    warnings.simplefilter("ignore", NoFusionWarning)
                    scope.__exit__(None, None, None)
            for problem in install_errors:
                print(f"nvscope run: could not install an adapter: {problem!r}", file=sys.stderr)
    finally:
        set_development_mode(previous_mode)
        _restore(saved_argv, saved_path0)
    return code, log


def _close_unclosed(ours: Frame | None) -> None:
    """If the program left scopes of its own open above ours, say which, and drop them, so that its exit code and
    the summary are not lost to a scope error."""
    unclosed = unwind(ours)
    if not unclosed:
        return
    names = ", ".join(repr(owner) for owner in unclosed)
    warnings.warn(f"the program ended with {len(unclosed)} scope(s) it entered still open (innermost first): "
                  f"{names}; use `with nv_options(...):` so that every scope exits", UnclosedScopeWarning, stacklevel=1)
