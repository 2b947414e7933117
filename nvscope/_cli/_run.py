"""``nvscope run``: run an unmodified script or module under nvFuser options, audited, with a summary at exit.

The program runs as ``python script.py args...`` (or ``python -m module``) would: ``sys.argv``, ``sys.path[0]`` and
``__main__`` as Python sets them, its exit code kept, an uncaught exception's traceback without nvscope's frames.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import warnings
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

from nvscope._cli import _child_carry as _carry
from nvscope._cli._args import program_output_to_stderr, said
from nvscope._core import ACTIVE, Frame, NoFusionWarning, UnclosedScopeWarning, cut, set_development_mode, unwind
from nvscope._exec import AuditLog, _autoinstall
from nvscope._exec import audit as audit_log

__all__ = ["run"]


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
        return f"can't open file {said(os.path.abspath(script))}: no such file"
    if os.path.isdir(script) and not any(os.path.isfile(os.path.join(script, f"__main__{ext}"))
                                         for ext in (".py", ".pyc")):
        return (f"{said(script)} is a directory without a __main__.py: give the script itself (Python runs a directory "
                "by its __main__.py)")
    return None


def run(script: str | None, module: str | None, program_args: list[str], enable: list[str], disable: list[str],
        audit: bool, fusions: list[str] | None = None, on_error: str | None = None, listing: bool = False,
        json_to: str | None = None, share: bool = False) -> int:
    """Run the program as ``nvscope run`` (``listing``: ``nvscope fusions``, which also lists the fusions at exit and
    writes them as JSON to ``json_to``, ``-`` for standard output); returns its exit code, or 2 when it cannot
    start. ``share`` (``--share-defaults``): fusions at their own options share compiled definitions, in the program
    (its scope) and in the Python processes it starts (``NVSCOPE_SHARE=all``)."""
    import runpy

    command = "nvscope fusions" if listing else "nvscope run"
    carried = _carry.Settings(enable, disable, fusions, on_error, audit, share=share)
    try:
        scope = carried.scope()
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        print(f"{command}: error: {error}", file=sys.stderr)
        return 2
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    if script is not None:
        cannot = _not_runnable(script)
        if cannot is not None:
            print(f"{command}: error: {cannot}", file=sys.stderr)
            return 2
        _set_path0(os.path.dirname(os.path.abspath(script)))
        sys.argv = [script, *program_args]
    else:
        assert module is not None
        _set_path0(os.getcwd())
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as error:
            spec, reason = None, f"{type(error).__name__}: {cut(str(error), 300)}"
        else:
            reason = f"No module named {said(module)}"
        if spec is None:
            print(f"{command}: error: cannot run module {said(module)}: {reason}", file=sys.stderr)
            _restore(saved_argv, saved_path0)
            return 2
        sys.argv = [module, *program_args]

    # Process-wide, not dev_mode's context-local switch: the program's own threads may enter scopes too.
    previous_mode = set_development_mode(True)
    log: AuditLog | None = None
    code = 0
    try:
        recording: AbstractContextManager[AuditLog | None] = audit_log() if audit else nullcontext()
        with recording as log, _autoinstall.watch_imports() as install_errors:
            scope.__enter__()
            ours = ACTIVE.get()
            # In a child of another nvscope run, this run's summary replaces the child's, and this run's scope is
            # nested in that run's (entered by the start-up hook): the processes this program starts get both, each
            # with its own fusion globs, and the summary names both.
            around = _carry.take_over()
            if around is not None:
                carried.outer = around.layers()
            stop_carrying = _carry.export(carried)  # the Python processes the program starts get them too
            try:
                with program_output_to_stderr(json_to):  # `nvscope fusions --json -`: stdout is the JSON alone
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
    if log is not None:
        try:
            sys.stdout.flush()
        except Exception:  # the program may have closed stdout
            pass
        print(_carry.summary(carried.layers(), log), file=sys.stderr)
        if listing:
            print(fusion_listing(log), file=sys.stderr)
            if json_to is not None:
                from nvscope._cli._args import write_json

                return write_json("fusions", json_to, fusion_json(log)) or code
    return code


def fusion_json(log: AuditLog) -> str:
    """``nvscope fusions --json``: ``{"fusions": [{id, phase, name, ops, function, calls}]}``, in first-run order."""
    import json
    from collections import Counter

    calls = Counter(record.fusion for record in log.records)
    return json.dumps({"fusions": [{"id": info.id, "phase": info.phase, "name": info.name,
                                    "ops": None if info.ops is None else list(info.ops), "function": info.function,
                                    "calls": calls[info.id]} for info in log.fusions()]}, indent=2)


def _close_unclosed(ours: Frame | None) -> None:
    """If the program left scopes of its own open above ours, say which, and drop them: the run still ends cleanly.

    Without this, exiting ``nvscope run``'s scope would raise nvscope's "innermost active scope is not one it entered"
    error over the program's bug, losing the program's exit code and the summary.
    """
    unclosed = unwind(ours)
    if not unclosed:
        return
    names = ", ".join(repr(owner) for owner in unclosed)
    warnings.warn(f"the program ended with {len(unclosed)} scope(s) it entered still open (innermost first): "
                  f"{names}; use `with nv_options(...):` so that every scope exits", UnclosedScopeWarning, stacklevel=1)


def fusion_listing(log: AuditLog) -> str:
    """``nvscope fusions``: every fusion that ran, in first-run order, with what selects it and how often it ran."""
    from collections import Counter

    from nvscope._core import _text as _texttable

    fusions = log.fusions()
    if not fusions:
        return "nvscope fusions: no nvFuser fusion ran"
    calls = Counter(record.fusion for record in log.records)
    phases = Counter(info.phase for info in fusions)
    rows = [(info.id, "?" if info.ops is None else ", ".join(info.ops), info.function or "", str(calls[info.id]))
            for info in fusions]
    head = ", ".join(f"{n} {phase}" for phase, n in phases.items())
    return "\n".join([f"nvscope fusions: {len(fusions)} fusions ({head}); select them with "
                      "nv_options(fusions=[...]) or nvscope run --fusions GLOB",
                      _texttable.render(("id", "ops", "function", "calls"), rows, right=(3,))])
