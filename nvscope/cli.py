"""The ``nvscope`` command: list the option catalog, check an installation, run a program under options.

    nvscope options [--enable | --disable] [--json]
    nvscope doctor [--require-gpu-stack]
    nvscope run [--enable NAME]... [--disable NAME]... [--no-audit] [--] script.py [args...]
    nvscope run [--enable NAME]... [--disable NAME]... [--no-audit] -m module [args...]

A tool, not part of the core: it may import everything, and nothing in the core imports it. Heavy packages
(torch, Thunder, nvFuser) are imported only inside the command that needs them (``doctor``), never here at the top.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import platform
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType, TracebackType
from typing import Any

import nvscope
from nvscope.devmode import NoFusionWarning, strict_mode
from nvscope.option_catalog import Catalog, Kind, OptionInfo, UnknownOptionError

__all__ = ["main"]

_EFFECTS = (
    "effect: codegen = can change the compiled kernels or which executor runs; runtime = runtime behaviour only; "
    "debug = output, profiling, validation"
)

_DESCRIPTION = """\
nvscope: scoped nvFuser developer options for Lightning Thunder and nvFuser.

In Python you write `with nvscope.nv_options(enable=[...], disable=[...]): ...`; this command helps around that:
find the option names, check that your installation can use them, and run an unmodified program under them."""

_EPILOG = """\
examples:
  nvscope options                       every nvFuser option name, what it does, and in which versions
  nvscope options --enable --json       the enable options, as JSON
  nvscope doctor                        check Python, torch/CUDA, nvFuser, Thunder and the NVFUSER_* environment
  nvscope run --enable fuse_matmul --disable matmul_expr_eval train.py --steps 10
                                        run train.py (with its own arguments) under those options and print
                                        which nvFuser fusions ran with which options when it exits
  nvscope run --enable fuse_matmul,static_fusion_count -m mypkg.bench

`nvscope COMMAND --help` describes each command. With no command, nvscope prints this help and exits with 2.
In pytest: `pytest --nv-enable NAME` or `@pytest.mark.nv_options(enable=[...])` (the nvscope pytest plugin)."""

_RUN_DESCRIPTION = """\
Run a Python script (or a module, with -m) as `python script.py args...` would, with every nvFuser fusion it
executes on its main thread running under the given options. The options are validated before anything runs.

While the program runs: development mode is on (no DevelopmentModeWarning), the program is audited, and
nvscope's Thunder adapter installs itself as soon as the program imports Thunder (or, without Thunder, the
nvFuser adapter as soon as it imports nvFuser). At exit, a summary goes to stderr: the options, then one row per
fusion with its options and execution count. The program's exit code is nvscope's exit code (an uncaught
exception prints its traceback and exits with 1).

Threads the program starts begin with no options (Python's contextvars), except Thunder's backward passes,
which keep the options of their forward. Use nvscope.bind in the program to carry them into its own threads.
NVFUSER_ENABLE/NVFUSER_DISABLE in the environment still apply, to the whole process, on top of these."""

_RUN_EPILOG = """\
examples:
  nvscope run --enable fuse_matmul --disable matmul_expr_eval bench.py --size 4096
  nvscope run --enable fuse_matmul,static_fusion_count -- train.py --enable-this-is-the-script-s-own-flag
  nvscope run --disable fma -m mypkg.train --epochs 1
  nvscope run --no-audit --enable static_fusion_count bench.py

exit codes: the program's own; 2 when an option name is unknown or the script/module cannot be found."""

_DOCTOR_DESCRIPTION = """\
Check what nvscope needs and what it can drive: Python, the option catalog, torch and CUDA, nvFuser, Lightning
Thunder, nvscope's Thunder adapter, development mode, and NVFUSER_ENABLE/NVFUSER_DISABLE in the environment
(they apply to the whole process, on top of every scope, so a typo there affects everything).

One line per check: `ok`, `note` (missing but optional: the core works without it), `warn` (something that
will not work as you may expect), `FAIL` (broken); each problem is followed by a `fix:` line."""

_DOCTOR_EPILOG = """\
exit codes: 0 when nvscope's core works (torch, nvFuser and Thunder are optional: missing ones are notes);
1 when something it needs is broken, e.g. an unknown name in NVFUSER_ENABLE or a catalog that cannot load.
With --require-gpu-stack, a missing or broken torch, CUDA device, nvFuser or Thunder also exits with 1."""

_OPTIONS_DESCRIPTION = """\
List every nvFuser enable/disable option that nvscope knows, grouped by list: name, effect class, the nvFuser
versions that have it, and what it does. When nvFuser is installed, only the names of its version are listed
(the first line says which). Names marked (args) need arguments and so can be set only in the environment,
e.g. NVFUSER_ENABLE=name(args), not per scope."""

_OPTIONS_EPILOG = """\
examples:
  nvscope options --disable
  nvscope options --json | python -c "import json,sys; print(len(json.load(sys.stdin)['options']))"
  nvscope options --probe               compare the catalog with what the installed nvFuser accepts (needs CUDA)"""


# --- argument parsing ---------------------------------------------------------------------------------------------

def _parser(prog: str | None = None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level parser and the ``run`` subparser."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=prog or "nvscope", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {nvscope.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    options = commands.add_parser("options", help="list the nvFuser option names (the catalog)",
                                  description=_OPTIONS_DESCRIPTION, epilog=_OPTIONS_EPILOG, formatter_class=formatter)
    kind = options.add_mutually_exclusive_group()
    kind.add_argument("--enable", dest="kind", action="store_const", const="enable",
                      help="only the enable options (NVFUSER_ENABLE, nv_options(enable=...))")
    kind.add_argument("--disable", dest="kind", action="store_const", const="disable",
                      help="only the disable options (NVFUSER_DISABLE, nv_options(disable=...))")
    options.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    options.add_argument("--probe", action="store_true",
                         help="ask the installed nvFuser which names it accepts (a child process runs a one-op "
                              "fusion; needs CUDA) and compare them with the catalog; exit 1 if it accepts a name "
                              "the catalog lacks")

    doctor = commands.add_parser("doctor", help="check the installation and the NVFUSER_* environment",
                                 description=_DOCTOR_DESCRIPTION, epilog=_DOCTOR_EPILOG, formatter_class=formatter)
    doctor.add_argument("--require-gpu-stack", action="store_true",
                        help="also fail (exit 1) unless torch with a CUDA device, nvFuser and Thunder all work")

    run = commands.add_parser("run", help="run a script or module under nvFuser options, with an audit summary",
                              description=_RUN_DESCRIPTION, epilog=_RUN_EPILOG, formatter_class=formatter,
                              usage="%(prog)s [--enable NAME]... [--disable NAME]... [--no-audit] "
                                    "([--] script.py | -m module) [args...]",
                              allow_abbrev=False)
    run.add_argument("--enable", action="append", default=[], metavar="NAME[,NAME...]",
                     help="an nvFuser enable option; repeat it or separate names with commas")
    run.add_argument("--disable", action="append", default=[], metavar="NAME[,NAME...]",
                     help="an nvFuser disable option; repeat it or separate names with commas")
    run.add_argument("--no-audit", action="store_true",
                     help="do not record fusion executions, and print no summary at exit")
    run.add_argument("-m", dest="module", metavar="module",
                     help="run a library module as a script, like python -m (the rest are its arguments)")
    run.add_argument("script", nargs="?", help="the Python script to run (the rest are its arguments)")
    run.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser, run


def _split_run(argv: Sequence[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    """Split ``run``'s arguments into (its own options, script, module, the program's arguments), like cProfile.

    nvscope's options come first; the first `--`, `-m module` or non-option word ends them, and everything after
    belongs to the program, options included. A lone trailing `-m` or `--enable` stays with nvscope's options, so
    that argparse reports it.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1:]
            return list(argv[:i]), (rest[0] if rest else None), None, list(rest[1:])
        if arg == "-m" and i + 1 < len(argv):
            return list(argv[:i]), None, argv[i + 1], list(argv[i + 2:])
        if arg.startswith("-m") and not arg.startswith("--") and len(arg) > 2:
            return list(argv[:i]), None, arg[2:], list(argv[i + 1:])
        if arg in ("--enable", "--disable"):
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return list(argv[:i]), arg, None, list(argv[i + 1:])
    return list(argv), None, None, []


def _names(values: Sequence[str]) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` (empty items dropped)."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The ``nvscope`` console script. Returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser, run_parser = _parser(prog)
    if args and args[0] == "run":
        own, script, module, program_args = _split_run(args[1:])
        ns = parser.parse_args(["run", *own])
        ns.script, ns.module, ns.args = script, module, program_args
    else:
        ns = parser.parse_args(args)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return 2
    if ns.command in ("options", "doctor"):
        try:
            if ns.command == "doctor":
                return _doctor(ns.require_gpu_stack)
            return _probe() if ns.probe else _options(ns.kind, ns.json)
        except BrokenPipeError:  # `nvscope options | head`: stop quietly, as Python's docs recommend
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 1
    if ns.script is None and ns.module is None:
        run_parser.error("give the script to run (or -m module); `nvscope run --help` explains")  # exits with 2
    return _run(ns.script, ns.module, ns.args, _names(ns.enable), _names(ns.disable), audit=not ns.no_audit)


# --- nvscope options ----------------------------------------------------------------------------------------------

def _option_json(option: OptionInfo) -> dict[str, Any]:
    return {
        "kind": option.kind, "name": option.name, "effect": option.effect, "description": option.description,
        "since": option.since, "until": option.until, "requires_args": option.requires_args,
    }


def _options(kind: Kind | None, as_json: bool) -> int:
    try:
        known = nvscope.catalog()
    except Exception as error:  # a broken installation: say so instead of a traceback
        print(f"nvscope options: the option catalog cannot load: {error!r}", file=sys.stderr)
        return 1
    kinds: tuple[Kind, ...] = ("enable", "disable") if kind is None else (kind,)
    selected = sorted((o for o in known.options if o.kind in kinds), key=lambda o: (kinds.index(o.kind), o.name))
    if as_json:
        document = {
            "source": known.source,
            "nvfuser": None if known.nvfuser is None else str(known.nvfuser.version),
            "options": [_option_json(o) for o in selected],
        }
        print(json.dumps(document, indent=2))
        return 0
    print(f"source: {known.source}")
    print("use:    nv_options(enable=[...], disable=[...])  |  nvscope run --enable NAME  |  NVFUSER_ENABLE=NAME,...")
    width = max([len(o.name) + len(" (args)") * o.requires_args for o in selected] + [4])
    for k in kinds:
        group = [o for o in selected if o.kind == k]
        print()
        print(f"{k} options ({len(group)}):")
        print(f"  {'name':<{width}}  {'effect':<7}  {'versions':<13}  description")
        for o in group:
            name = o.name + (" (args)" if o.requires_args else "")
            print(f"  {name:<{width}}  {o.effect:<7}  {o.versions:<13}  {o.description}")
    print()
    if any(o.requires_args for o in selected):
        print("(args): needs arguments, e.g. NVFUSER_ENABLE=name(args): set it in the environment before the process "
              "starts; scopes cannot pass arguments")
    print(_EFFECTS)
    return 0


def _probe() -> int:
    """``nvscope options --probe``: nvFuser's own list of names against the catalog."""
    from nvscope.option_catalog import probe_installed

    known = nvscope.catalog()
    print(f"catalog: {known.source}")
    try:
        accepted = probe_installed()
    except Exception as error:  # RuntimeError from the probe, or the child's timeout
        print(f"nvscope options --probe: {error}", file=sys.stderr)
        return 1
    unknown_to_catalog = 0
    for kind in ("enable", "disable"):
        have, got = known.names(kind), accepted[kind]
        print(f"{kind}: the installed nvFuser accepts {len(got)} names; the catalog lists {len(have)} for its version")
        if got - have:
            unknown_to_catalog += len(got - have)
            print(f"  accepted by nvFuser but missing from the catalog: {', '.join(sorted(got - have))}")
        if have - got:
            print(f"  in the catalog for this version but not accepted by this build: {', '.join(sorted(have - got))}")
    return 1 if unknown_to_catalog else 0


# --- nvscope doctor -----------------------------------------------------------------------------------------------

class _Report:
    """Doctor's output: one line per check; counts the failures."""

    def __init__(self, require_gpu_stack: bool) -> None:
        self.require_gpu_stack = require_gpu_stack
        self.failures = 0
        self.warnings = 0

    def line(self, status: str, text: str, fix: str | None = None) -> None:
        if status == "FAIL":
            self.failures += 1
        elif status == "warn":
            self.warnings += 1
        print(f"{status:<6}{text}")
        if fix:
            print(f"{'fix:':<6}{fix}")

    def gpu(self, text: str, fix: str | None = None, status: str = "note") -> None:
        """Something of the GPU stack is missing or broken: a FAIL under --require-gpu-stack, else ``status``."""
        self.line("FAIL" if self.require_gpu_stack else status, text, fix)


def _env_names(value: str) -> list[str]:
    """Split an NVFUSER_ENABLE value on the commas outside parentheses: ``a,b(x,y)`` -> ``["a", "b(x,y)"]``."""
    items, depth, current = [], 0, ""
    for char in value:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def _check_env(report: _Report, known: Catalog | None) -> None:
    kinds: tuple[Kind, ...] = ("enable", "disable")
    for kind in kinds:
        variable = f"NVFUSER_{kind.upper()}"
        value = os.environ.get(variable)
        if value is None or not value.strip():
            report.line("ok", f"{variable} not set")
            continue
        if known is None:
            report.line("warn", f"{variable}={value}: not checked (no catalog)")
            continue
        bad = 0
        for item in _env_names(value):
            name, paren, _ = item.partition("(")
            name = name.strip()
            info = known.get(kind, name)
            if info is None:
                bad += 1
                other: Kind = "disable" if kind == "enable" else "enable"
                if known.get(other, name) is not None:
                    report.line("FAIL", f"{variable}: {name!r} is an nvFuser {other} option, not an {kind} option",
                                f"move {name!r} to NVFUSER_{other.upper()}")
                    continue
                try:
                    known.check(kind, name)
                    message = f"unknown nvFuser {kind} option {name!r}"
                except UnknownOptionError as error:
                    message = str(error)
                report.line("FAIL", f"{variable}: {message}",
                            f"correct or remove {name!r} in {variable} (nvFuser does not accept it); "
                            f"`nvscope options --{kind}` lists the valid names")
            elif info.requires_args and not paren:
                report.line("warn", f"{variable}: {name!r} needs arguments and does nothing without them",
                            f"set {variable}={name}(...) with its arguments: {info.description}")
        if not bad:
            report.line("ok", f"{variable}={value}: valid; applies to the whole process, on top of every scope "
                              "(scopes cannot remove it)")


def _flag(name: str) -> str:
    value = os.environ.get(name)
    return f"{name} not set" if value is None else f"{name}={value}"


def _check_flag_values(report: _Report) -> None:
    for name in ("NVSCOPE_DEV", "NVSCOPE_STRICT"):
        value = os.environ.get(name)
        if value is not None and value.strip().lower() not in ("", "0", "1", "true", "false", "yes", "no", "on", "off"):
            report.line("warn", f"{name}={value!r} is not understood and counts as off",
                        f"set {name}=1 (on) or {name}=0 (off)")


def _import_quietly(name: str) -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def _doctor(require_gpu_stack: bool) -> int:
    report = _Report(require_gpu_stack)
    report.line("ok", f"python {platform.python_version()} ({sys.executable})")
    report.line("ok", f"nvscope {nvscope.__version__} ({os.path.dirname(os.path.abspath(nvscope.__file__))})")
    known: Catalog | None
    try:
        known = nvscope.catalog()
        report.line("ok", f"catalog: {len(known.options)} options, {known.source}")
    except Exception as error:
        known = None
        report.line("FAIL", f"catalog: cannot load: {error!r}",
                    "reinstall nvscope (pip install --force-reinstall nvscope) and its dependency `packaging`")

    # torch and CUDA
    torch: Any = None
    if importlib.util.find_spec("torch") is None:
        report.gpu("torch not installed (nvFuser and Thunder need it)", "pip install torch (a CUDA build)")
    else:
        try:
            torch = _import_quietly("torch")
            report.line("ok", f"torch {torch.__version__}")
        except Exception as error:
            report.gpu(f"torch is installed but fails to import: {error!r}", "reinstall torch", status="warn")
        if torch is not None:
            try:
                cuda = bool(torch.cuda.is_available())
                device = torch.cuda.get_device_name(0) if cuda else None
            except Exception as error:
                cuda, device = False, f"error: {error!r}"
            if cuda:
                report.line("ok", f"CUDA available: {device} (torch CUDA {torch.version.cuda})")
            else:
                why = f" ({device})" if device else ""
                report.gpu(f"CUDA not available{why}: nvFuser fusions cannot run here",
                           "use a machine with an NVIDIA GPU and a CUDA build of torch")

    # nvFuser, found without importing it (that would import torch and load CUDA libraries)
    frontends = [name for name in ("nvfuser_direct", "nvfuser") if importlib.util.find_spec(name) is not None]
    from nvscope.nvfuser import MIN_VERSION
    from nvscope.option_catalog import installed_nvfuser

    found = installed_nvfuser()
    if found is None and not frontends:
        report.gpu("nvFuser not installed", "install the nvFuser wheel built for your CUDA and torch versions "
                   "(see https://github.com/NVIDIA/Fuser)")
    else:
        version = ("version unknown (no *.dist-info found)" if found is None
                   else f"{found.version} ({found.distribution})")
        shown = " and ".join(frontends) if frontends else "none importable"
        if not frontends:
            report.gpu(f"nvFuser {version}: metadata found but no frontend module (nvfuser_direct, nvfuser)",
                       "reinstall nvFuser", status="warn")
        elif found is not None and found.version.release < MIN_VERSION.release:
            report.gpu(f"nvFuser {version}, frontend {shown}: too old for per-call options (nvscope needs "
                       f">= {MIN_VERSION}); scopes raise UnsupportedError at the first fusion",
                       f"upgrade nvFuser to >= {MIN_VERSION}, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole "
                       "process", status="warn")
        else:
            report.line("ok", f"nvFuser {version}, frontend {shown}")

    # Thunder: any exception on import is reported (Thunder 0.2.x, for one, fails to import with torch >= 2.13)
    thunder: Any = None
    if importlib.util.find_spec("thunder") is None:
        report.gpu("Thunder not installed (nvscope also works with nvFuser directly)",
                   "pip install lightning-thunder")
    else:
        try:
            thunder = _import_quietly("thunder")
            report.line("ok", f"Thunder {getattr(thunder, '__version__', '(version unknown)')}")
        except (Exception, SystemExit) as error:  # whatever Thunder's import raises
            report.gpu(f"Thunder is installed but fails to import: {type(error).__name__}: {error}",
                       f"install a Thunder release that supports torch "
                       f"{getattr(torch, '__version__', '(not importable)')}, or a torch that this Thunder supports",
                       status="warn")

    # nvscope's Thunder adapter
    from nvscope import thunder as thunder_adapter

    autoinstall = os.environ.get("NVSCOPE_AUTOINSTALL", "1").strip().lower() not in ("0", "false", "no", "off")
    if thunder_adapter.installed():
        report.line("ok", "Thunder adapter: installed")
    elif thunder is not None:
        try:
            _import_quietly(thunder_adapter.IMPL_MODULE)
            _import_quietly(thunder_adapter.AUTOGRAD_MODULE)
            how = ("it installs itself at the first scope entered after `import thunder`" if autoinstall else
                   "NVSCOPE_AUTOINSTALL=0: call nvscope.thunder.install() after `import thunder`")
            report.line("ok", f"Thunder adapter: installable ({how})")
        except (Exception, SystemExit) as error:
            report.gpu(f"Thunder adapter: Thunder's nvFuser executor does not import: {type(error).__name__}: "
                       f"{error}", "install an nvFuser that this Thunder supports", status="warn")

    # Policy
    _check_flag_values(report)
    state = "on" if nvscope.development_mode() else "off"
    strict = strict_mode()
    if nvscope.development_mode():
        report.line("ok", f"development mode on ({_flag('NVSCOPE_DEV')})")
    else:
        consequence = "raise DevelopmentModeError" if strict else "warn (DevelopmentModeWarning)"
        report.line("note", f"development mode {state} ({_flag('NVSCOPE_DEV')}): non-empty scopes {consequence}; "
                            "`nvscope run` and the pytest plugin turn it on for their runs",
                    "export NVSCOPE_DEV=1 for development runs (or call nvscope.set_development_mode(True))")
    report.line("ok", f"strict mode {'on' if strict else 'off'} ({_flag('NVSCOPE_STRICT')})")

    _check_env(report, known)

    problems = report.failures
    print()
    if problems:
        print(f"doctor: {problems} failure{'s' * (problems != 1)}: see the fix: lines above")
    elif report.warnings:
        print(f"doctor: nvscope works; {report.warnings} warning{'s' * (report.warnings != 1)} above")
    else:
        print("doctor: nvscope works")
    return 1 if problems else 0


# --- nvscope run --------------------------------------------------------------------------------------------------

class _CallbackLoader(importlib.abc.Loader):
    """Wraps a module's loader to call ``callback`` once the module has finished executing."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its real loader (importlib.resources, inspect and linecache look at it).
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._callback()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls a function right after a given top-level module is first imported (one shot per module).

    Why: `nvscope run` enters its scope before the program imports Thunder, and the scope's own hook installs the
    Thunder adapter only for frameworks already imported at entry; without this, a program that imports Thunder
    afterwards would run its fusions without the options.
    """

    def __init__(self, callbacks: dict[str, Callable[[], None]]) -> None:
        self._callbacks = dict(callbacks)
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        callback = self._callbacks.get(fullname)
        if callback is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders (this one answers None meanwhile)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self._callbacks[fullname]
        spec.loader = _CallbackLoader(spec.loader, callback)
        return spec


def _autoinstall_enabled() -> bool:
    return os.environ.get("NVSCOPE_AUTOINSTALL", "1").strip().lower() not in ("0", "false", "no", "off")


def _after_thunder() -> None:
    from nvscope import _autoinstall

    try:
        _autoinstall.ensure_adapters()
    except Exception as error:
        print(f"nvscope run: could not install the Thunder adapter: {error!r}", file=sys.stderr)


def _after_nvfuser() -> None:
    # Thunder imports nvFuser while it is itself being imported; its own adapter then covers it.
    if "thunder" in sys.modules or not _autoinstall_enabled():
        return
    from nvscope import nvfuser

    try:
        nvfuser.install()
    except Exception as error:
        print(f"nvscope run: could not install the nvFuser adapter: {error!r}", file=sys.stderr)


def _adapters() -> list[str]:
    installed = []
    thunder = sys.modules.get("nvscope.thunder")
    if thunder is not None and thunder.installed():
        installed.append("thunder")
    nvfuser = sys.modules.get("nvscope.nvfuser")
    if nvfuser is not None:
        installed.extend(nvfuser.installed())
    return installed


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


def _run(script: str | None, module: str | None, program_args: list[str], enable: list[str], disable: list[str],
         audit: bool) -> int:
    import runpy

    try:
        scope = nvscope.nv_options(enable, disable)
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        print(f"nvscope run: error: {error}", file=sys.stderr)
        return 2
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    if script is not None:
        if not os.path.exists(script):
            print(f"nvscope run: error: can't open file {os.path.abspath(script)!r}: no such file", file=sys.stderr)
            return 2
        _set_path0(os.path.dirname(os.path.abspath(script)))
        sys.argv = [script, *program_args]
    else:
        assert module is not None
        _set_path0(os.getcwd())
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as error:
            spec, reason = None, f"{type(error).__name__}: {error}"
        else:
            reason = f"No module named {module!r}"
        if spec is None:
            print(f"nvscope run: error: cannot run module {module!r}: {reason}", file=sys.stderr)
            _restore(saved_argv, saved_path0)
            return 2
        sys.argv = [module, *program_args]

    watcher = _AfterImport({"thunder": _after_thunder, "nvfuser_direct": _after_nvfuser, "nvfuser": _after_nvfuser})
    sys.meta_path.insert(0, watcher)
    previous_mode = nvscope.set_development_mode(True)
    log: nvscope.AuditLog | None = None
    code = 0
    try:
        recording: AbstractContextManager[nvscope.AuditLog | None] = nvscope.audit() if audit else nullcontext()
        with recording as log:
            scope.__enter__()
            try:
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
                with warnings.catch_warnings():
                    # The summary says whether fusions ran; the scope's own NoFusionWarning would point at runpy.
                    warnings.simplefilter("ignore", NoFusionWarning)
                    scope.__exit__(None, None, None)
    finally:
        nvscope.set_development_mode(previous_mode)
        if watcher in sys.meta_path:
            sys.meta_path.remove(watcher)
        _restore(saved_argv, saved_path0)
    if log is not None:
        try:
            sys.stdout.flush()
        except Exception:  # the program may have closed stdout
            pass
        print(_summary(scope.options, log), file=sys.stderr)
    return code


def _summary(options: nvscope.OptionSet, log: nvscope.AuditLog) -> str:
    env = " ".join(f"{k}={os.environ[k]}" for k in ("NVFUSER_ENABLE", "NVFUSER_DISABLE") if os.environ.get(k))
    lines = [f"nvscope run: options {options.as_shell() or '(none)'}"
             + (f" (and {env} from the environment, for the whole process)" if env else "")]
    lines.append(log.summary())
    if not log.records and not _adapters():
        if any(name in sys.modules for name in ("thunder", "nvfuser_direct", "nvfuser")):
            lines.append("nvscope run: no nvscope adapter was installed (NVSCOPE_AUTOINSTALL=0?), so the options "
                         "reached no fusion")
        else:
            lines.append("nvscope run: the program imported neither Thunder nor nvFuser, so no fusion could run")
    return "\n".join(lines)
