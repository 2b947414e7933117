"""A rescue target that cannot run as given is a usage error, not the step's failure: `check_target` in the parent
before any child runs (a syntax error, a missing module), `load`/`unusable` in the child (a missing function).
`Plan`: what one probe of the target runs."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from nvscope._core import OptionSet, cut, first_line
from nvscope._measure import attribute, import_program_module, import_script, options_dict

__all__ = ["ASYNC_STEP", "Plan", "check_target", "load", "missing_module", "named", "unusable"]

ASYNC_STEP = ("the step is an async function: rescue calls it with no arguments and no event loop; give a plain "
              "function (def step(): return asyncio.run(train_step()))")


def check_target(target: dict[str, Any]) -> None:
    """Refuse a target that cannot load, before any child runs and without running any of its code: a script that
    does not compile, a module that cannot be found (a function's absence needs the import: the child says it,
    `unusable`). Raises `ValueError` naming the fix."""
    where = target["where"]
    if target["module"]:
        top = where.partition(".")[0]
        # The children put the working directory first and inherit PYTHONPATH (this process may have started
        # before it was set).
        path = [p for p in [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep), *sys.path] if p]
        try:
            found = importlib.machinery.PathFinder.find_spec(top, path) or importlib.util.find_spec(top)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise missing_module(where, top)
        source = found.origin if found.origin and found.origin.endswith(".py") and where == top else None
    else:
        source = where
    if source is not None:
        try:
            with open(source, "rb") as file:
                compile(file.read(), source, "exec", dont_inherit=True)
        except SyntaxError as error:
            raise ValueError(f"{cut(where, 200)} does not compile: {error.msg} (line {error.lineno}): fix the "
                             "syntax error") from None
        except (ValueError, OSError) as error:  # null bytes; unreadable
            raise ValueError(f"{cut(where, 200)} cannot be compiled: {first_line(error, 200)}") from None


def missing_module(where: str, name: str) -> ValueError:
    return ValueError(f"cannot import module {cut(where, 200, repr)}: no module named {cut(name, 200, repr)} "
                      "(run from the folder it is in, or put that folder on PYTHONPATH)")


def named(module: Any, where: str, name: str, role: str = "") -> Callable[[], Any]:
    """The function ``name`` of the loaded ``module`` (``where``: as the command line named it); `ValueError` where
    there is none, `TypeError` where it is not callable. ``role``: the message's start ("the reference: ")."""
    value = attribute(module, name)
    if value is None:
        raise ValueError(f"{role}{cut(where, 200)} has no function {cut(name, 200, repr)}")
    if not callable(value):
        raise TypeError(f"{role}{cut(f'{where}:{name}', 200)} is a {type(value).__name__}, not a function")
    if inspect.iscoroutinefunction(value):
        raise TypeError(f"{role}{cut(f'{where}:{name}', 200)} is {ASYNC_STEP[len('the step is '):]}")
    return value  # type: ignore[no-any-return]


def unusable(spec: dict[str, Any], error: Exception) -> NoReturn:
    """In a child: the target cannot run as given (``error``); say so in the observation (the parent raises it
    again: a usage error, not the step's failure) and exit."""
    if spec.get("out"):
        with open(spec["out"], "w", encoding="utf-8") as file:
            json.dump({"usage": str(error), "error": type(error).__name__}, file)
    raise SystemExit(3)


def load(spec: dict[str, Any]) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """In a child: the target's step and reference, loaded as `nvscope run` loads it (the script's folder, or for -m
    the working directory, first on the path); a program's step is judged by its exit code. A target that cannot run
    as given is a usage error (`unusable`)."""
    target = spec["target"]
    where, module = target["where"], target["module"]
    sys.argv = [where, *target["args"]]
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(where)))
    if target["function"] is None:
        if module:  # a program run with -m: the module must be there
            try:
                found = importlib.util.find_spec(where)
            except ImportError as error:
                unusable(spec, missing_module(where, error.name or where))
            if found is None:
                unusable(spec, missing_module(where, where))

        def step() -> None:
            try:
                if module:
                    runpy.run_module(where, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(where, run_name="__main__")
            except SystemExit as done:
                if done.code not in (None, 0):
                    raise

        return step, None
    try:
        loaded = import_program_module(where) if module else import_script(where)
    except Exception as error:  # its code raised, or a module it imports is missing: an `ImportError` of the target
        missing = error.name if module and isinstance(error, ModuleNotFoundError) else None
        if missing and (where + ".").startswith(missing + "."):  # the module itself is not there: a usage error
            unusable(spec, missing_module(where, missing))
        unusable(spec, ImportError(f"importing {cut(where, 200)} failed: {first_line(error, 300)}"))
    try:
        function = named(loaded, where, target["function"])
        return function, named(loaded, where, target["reference"], "the reference: ") if target["reference"] else None
    except (TypeError, ValueError) as error:
        unusable(spec, error)


@dataclass
class Plan:
    """What one probe runs: per fusion id its options (the others keep their defaults); ``drop_env``: without
    ``NVFUSER_ENABLE``/``NVFUSER_DISABLE``; ``validate``: the fusions to check with nvFuser's validate (True: every
    one); ``fresh``: in a fresh process (False: a worker may run it)."""

    options: dict[str, OptionSet]
    drop_env: Sequence[str] = ()
    validate: bool | list[str] = True
    fresh: bool = True

    def __post_init__(self) -> None:
        self.options = dict(self.options)  # the cures as they are now: the rescue's own go on changing

    def spec(self) -> dict[str, Any]:
        """The plan as `observe` reads it: each distinct option set with the fusions under it."""
        grouped: dict[OptionSet, list[str]] = {}
        for fusion, options in self.options.items():
            grouped.setdefault(options, []).append(fusion)
        return {"groups": [[options_dict(o), ids] for o, ids in grouped.items()], "validate": self.validate}
