"""The watch over one rescue probe (and the scope it runs in: `detached`, `routes_forgotten`).

`Watch` wraps ``FusionDefinition.execute`` at each fusion's first execution: it writes the repro script and runs
nvFuser's ``validate`` in its place, a mismatch being that fusion's wrong numbers."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from importlib import metadata
from typing import Any

from nvscope._core import NVFUSER_MODULES, OptionSet, cut, enter_frame, first_line, installed_nvfuser, reset
from nvscope._exec import FusionTable, watch_execute

__all__ = ["NO_VALIDATE", "Watch", "detached", "failure_of", "loaded_versions", "routes_forgotten", "script_path",
           "scripts_directory", "tidy"]

# The observation's ``validate`` when a fusion was to be validated and no loaded frontend has validate.
NO_VALIDATE = "none"
# Ops whose numbers ATen draws differently (its evaluation is not nvFuser's random stream): not validated.
_RANDOM = frozenset({"uniform", "normal", "rand_like", "randn_like", "bernoulli"})
_ALIASED = re.compile(r"fd\.add_output\(\s*[\w.]+\s*,")  # an output that updates an input in place
# The repro's last line runs the fusion (`fd.execute(inputs)`): for wrong numbers, validate instead.
_EXECUTE = re.compile(r"^(\s*\w+)\.execute\(", re.MULTILINE)


def scripts_directory() -> str:
    """A new directory for one rescue's repro scripts (in ``NVSCOPE_REPRO_DIR`` when set): no rescue overwrites
    another's."""
    base = os.environ.get("NVSCOPE_REPRO_DIR") or None
    try:
        if base:
            os.makedirs(base, exist_ok=True)
        return tempfile.mkdtemp(prefix="nvscope-rescue-", dir=base)
    except OSError as error:  # a file of that name, no permission: `ValueError`, one line
        raise ValueError(f"NVSCOPE_REPRO_DIR={cut(base or tempfile.gettempdir(), 200)} cannot hold the repro scripts "
                         f"({error.strerror or error}): set it to a folder you can write to") from None


def tidy(directory: str, keep: Sequence[str]) -> None:
    """Remove the repro scripts in ``directory`` that no failure kept (children write each fusion's before it runs),
    and the directory when nothing is left."""
    if not os.path.isdir(directory):  # removed already, empty (`Children.close`)
        return
    kept = {os.path.abspath(p) for p in keep}
    for name in os.listdir(directory):
        path = os.path.abspath(os.path.join(directory, name))
        if name.startswith("rescue-") and name.endswith(".py") and path not in kept:
            os.remove(path)
    if not os.listdir(directory):
        os.rmdir(directory)


def loaded_versions() -> dict[str, str]:
    """nvFuser, Thunder, torch and CUDA as this process loaded them (the process that ran the step: its path may
    hold another Thunder or nvFuser than the rescue's), else as installed."""
    found: dict[str, str] = {}
    for name in NVFUSER_MODULES:
        version = getattr(sys.modules.get(name), "version", None)
        if callable(version):
            with suppress(Exception):  # a frontend that cannot say: the installed distribution's
                found["nvFuser"] = str(version())
                break
    if "nvFuser" not in found:
        installed = installed_nvfuser()
        if installed is not None:
            found["nvFuser"] = str(installed.version)
    for label, module, dist in (("Thunder", "thunder", "lightning-thunder"), ("torch", "torch", "torch")):
        version = getattr(sys.modules.get(module), "__version__", None)
        with suppress(metadata.PackageNotFoundError):
            found[label] = str(version) if version else metadata.version(dist)
    cuda = getattr(getattr(sys.modules.get("torch"), "version", None), "cuda", None)
    if cuda:
        found["CUDA"] = str(cuda)
    return found


def script_path(directory: str, fusion: str) -> str:
    """Where a probe writes ``fusion``'s repro script (a fixed name: the parent finds it after a fault). A long id
    is cut, with a digest of the whole, so that the name (and ``.issue.md`` beside it) fits a file system's limit."""
    name = "".join(c if c.isalnum() or c in "_-." else "_" for c in fusion)
    if len(name) > _LONGEST:
        name = f"{name[:_LONGEST - 9]}-{hashlib.blake2b(fusion.encode('utf-8', 'replace'), digest_size=4).hexdigest()}"
    return os.path.join(directory, f"rescue-{name}.py")


_LONGEST = 120  # characters of a fusion id in a script's name (names of 255 bytes at most, the .issue.md included)


class Watch:
    """The frontend's ``FusionDefinition.execute``, watched while one probe runs. ``validate``:
    True (every fusion), or the ids to validate; ``scripts``: the directory for repro scripts (None: none);
    ``planned``: the fusions under options in this probe (their scripts are not the defaults' failure)."""

    def __init__(self, validate: bool | Sequence[str], scripts: str | None, prewrite: bool,
                 planned: set[str]) -> None:
        self.validate, self.scripts, self.prewrite, self.planned = validate, scripts, prewrite, planned
        self.local = threading.local()
        self.done: set[str] = set()
        self.wrong: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}
        self.written: dict[str, str] = {}
        self.frontends: list[tuple[Any, Any]] | None = None  # (class, its own execute or None), once patched
        self.found_validate = False
        self.checked: set[str] = set()  # the fusions validate compared
        self.unhook: Callable[[], None] | None = None

    def enter(self, fusion: str, ops: Any) -> None:
        if self.frontends is None:
            self._patch()
        self.local.fusion, self.local.ops = fusion, ops

    def leave(self) -> None:
        self.local.fusion = None

    def _patch(self) -> None:
        self.frontends = []
        # The direct adapter (`nvscope.nvfuser.install()`, before the watch or while it lasts) calls the execute it
        # saved, under the class's: its executions are watched through its hook.
        self.unhook = watch_execute(self._wrap)
        for name in NVFUSER_MODULES:  # the frontend Thunder (or the program) loaded by now
            cls: Any = getattr(sys.modules.get(name), "FusionDefinition", None)
            if not (isinstance(cls, type) and callable(getattr(cls, "execute", None))):
                continue
            self.frontends.append((cls, vars(cls).get("execute")))
            self.found_validate = self.found_validate or callable(getattr(cls, "validate", None))
            patched: Any = cls
            patched.execute = self._wrap(patched.execute)

    def close(self) -> None:
        if self.unhook is not None:
            self.unhook()
        for cls, own in self.frontends or ():
            if getattr(vars(cls).get("execute"), "_nvscope_rescue", False):
                if own is None:
                    delattr(cls, "execute")
                else:
                    cls.execute = own

    def _write(self, fusion: str, fd: Any, inputs: Any, wrong: bool = False) -> None:
        """Write ``fusion``'s repro script (once; again with ``wrong``: its wrong numbers, found after it ran)."""
        if self.scripts is None or fusion in self.planned or (fusion in self.written and not wrong):
            return
        path = script_path(self.scripts, fusion)
        try:
            body = fd.repro_script_for(list(inputs))
        except Exception as error:  # a definition nvFuser cannot print: the report says so
            body = f"# nvFuser's repro_script_for failed: {first_line(error, 300)}\n"
        how = ""
        if wrong:  # executing runs clean: the repro must fail where the numbers do
            runs = list(_EXECUTE.finditer(body))
            if runs:
                body = f"{body[:runs[-1].start()]}{runs[-1].group(1)}.validate({body[runs[-1].end():]}"
            how = ("# Its outputs are wrong: fd.validate(inputs) runs it and compares them with ATen's (it raises "
                   "where they differ).\n")
        os.makedirs(self.scripts, exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as file:
            file.write(f"# nvscope rescue: fusion {fusion} as it ran under nvFuser's defaults (no per-call "
                       "options).\n# The inputs have its inputs' shapes, dtypes and strides, not their "
                       f"values.\n{how}{body}")
        os.replace(partial, path)  # atomic: probes in parallel write the same fusion's script
        self.written[fusion] = path

    def _wrap(self, previous: Any) -> Any:
        watch, local = self, self.local

        def execute(fd: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(local, "validating", False):  # validate's own execute
                local.executed = (previous(fd, inputs, *args, **kwargs),)
                return local.executed[0]
            fusion = getattr(local, "fusion", None)
            if fusion is None or fusion in watch.done:
                return previous(fd, inputs, *args, **kwargs)
            watch.done.add(fusion)
            if watch.prewrite:
                watch._write(fusion, fd, inputs)
            validate = getattr(type(fd), "validate", None)
            reason = watch._unvalidated(fd, fusion, args, validate)
            if reason is not None:
                try:
                    return previous(fd, inputs, *args, **kwargs)
                except Exception:
                    watch._write(fusion, fd, inputs)
                    raise
            assert validate is not None, "`_unvalidated` said why not"
            local.validating, local.executed = True, None
            try:
                outputs = validate(fd, inputs, **kwargs)  # nvFuser's: execute(inputs, **kwargs), then ATen
                watch.checked.add(fusion)
                return outputs
            except Exception as error:
                if local.executed is None:  # execute itself failed: the fusion raised
                    watch._write(fusion, fd, inputs)
                    raise
                if isinstance(error, AssertionError) or "Validation error" in str(error):
                    watch.checked.add(fusion)
                    watch._write(fusion, fd, inputs, wrong=True)
                    watch.wrong.append(failure_of(fusion, "numbers", "nvFuser's validate (its outputs against ATen's): "
                                                + first_line(error, 300), str(error)[:2000]))
                else:
                    watch.skipped[fusion] = f"validate raised {first_line(error, 200)}"
                return local.executed[0]
            finally:
                local.validating = False

        execute._nvscope_rescue = True  # type: ignore[attr-defined]
        return execute

    def _unvalidated(self, fd: Any, fusion: str, args: tuple[Any, ...], validate: Any) -> str | None:
        """Why this execution is not validated, or None (a reason of the fusion's own is kept in ``skipped``)."""
        asked = self.validate is True or (not isinstance(self.validate, bool) and fusion in self.validate)
        if not asked or validate is None or args:
            return "not asked" if validate is not None else "no validate"
        ops = set(getattr(self.local, "ops", None) or ())
        if ops & _RANDOM:
            self.skipped[fusion] = f"random numbers ({', '.join(sorted(ops & _RANDOM))}): ATen draws others"
        else:
            with suppress(Exception):  # a definition that cannot print itself: validated
                if _ALIASED.search(repr(fd)):
                    self.skipped[fusion] = "it updates an input in place: ATen would see the updated input"
        return self.skipped.get(fusion)


def failure_of(fusion: str | None, kind: str, line: str, detail: str = "") -> dict[str, Any]:
    return {"fusion": fusion, "kind": kind, "line": line, "detail": detail}


@contextmanager
def detached() -> Iterator[None]:
    """No scope around the probe's own (in process, the caller's): what ran in the probe is not reported to it."""
    token = enter_frame(None)
    try:
        yield
    finally:
        reset(token)


@contextmanager
def routes_forgotten() -> Iterator[None]:
    """The PyTorch routes that ``on_error="torch"`` adds while a probe runs, forgotten at its end: the next probe
    in this process (in process, a worker's) must see nvFuser fail again, not a route remembered from this one."""
    added: list[tuple[Any, Any]] = []
    original = FusionTable.add_route

    def add_route(table: Any, options: OptionSet, key: Any, region: Callable[..., Any]) -> bool:
        added.append((table, (options, key)))
        return original(table, options, key, region)

    FusionTable.add_route = add_route  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        FusionTable.add_route = original  # type: ignore[method-assign]
        for table, key in added:
            table.routes.pop(key, None)
