"""What every command that runs a user's step shares: loading the script (or ``-m`` module) and its function."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any, TextIO

__all__ = ["STDOUT", "load_step", "text_stream", "write_json"]

STDOUT = "-"  # `--json -`: standard output, wherever --json takes a path


def text_stream(json_to: str | None) -> TextIO:
    """Where a command's human-readable text goes: standard error when its JSON takes standard output (so that
    ``--json - | jq`` reads JSON alone), else standard output."""
    return sys.stderr if json_to == STDOUT else sys.stdout


def write_json(command: str, path: str, text: str) -> int:
    """Write ``text`` (a JSON document) to ``path``, or with ``-`` to standard output; returns the exit code: 0, or 1
    after one line saying why the file could not be written."""
    if path == STDOUT:
        print(text)
        return 0
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    except OSError as error:
        print(f"nvscope {command}: error: could not write {path}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def load_step(ns: argparse.Namespace, where: str, function: str, error: Callable[[str, int], int],
              check_params: bool = True) -> tuple[Any, Any] | int:
    """Import ``where`` (a script, or ``-m`` module) as the command line says and return (its ``function``, the object
    ``--params`` names or None); or, after ``error(message, exit code)`` said why not, that exit code.

    Shared by ``nvscope search``, ``profile`` and ``bisect``. The caller restores ``sys.argv`` and ``sys.path``.
    """
    try:
        if ns.module is None:
            if not os.path.isfile(where):
                return error(f"can't open file {os.path.abspath(where)!r}: no such file", 2)
            sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
            sys.argv = [where, *ns.args]
            loaded = _import_script(where)
        else:
            sys.path.insert(0, os.getcwd())
            sys.argv = [where, *ns.args]
            if importlib.util.find_spec(where.partition(".")[0]) is None:
                return error(f"cannot import module {where!r}: no module named {where.partition('.')[0]!r}", 2)
            loaded = importlib.import_module(where)
    except Exception:
        traceback.print_exc()
        return error(f"importing {where} failed (traceback above)", 1)
    fn = _attribute(loaded, function)
    if not callable(fn):
        return error(f"{where} has no function {function!r}" if fn is None else
                     f"{where}:{function} is a {type(fn).__name__}, not a function", 2)
    params = None
    if ns.params:
        params = _attribute(loaded, ns.params)
        if params is None:
            return error(f"--params {ns.params}: {where} has no {ns.params!r}", 2)
        if check_params:
            from nvscope._measure._numerics import grad_targets

            try:
                grad_targets((), {}, params)
            except TypeError as problem:
                return error(f"--params {ns.params}: {str(problem).replace('module= takes', 'takes', 1)}", 2)
    return fn, params


def _import_script(path: str) -> ModuleType:
    """Import ``path`` as a module named ``__nvscope_search__`` (so its ``__main__`` block does not run)."""
    name = "__nvscope_search__"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path!r} as a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickle, dataclasses and typing look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _attribute(module: ModuleType, dotted: str) -> Any:
    value: Any = module
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value
