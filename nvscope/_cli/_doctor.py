"""``nvscope doctor``: check what nvscope needs and what it can drive, one line per check with a fix for each problem.
Heavy packages (torch, Thunder, nvFuser) are imported inside the check that needs them."""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import sys
import warnings
from types import ModuleType
from typing import Any

from nvscope._check import split_env
from nvscope._core import (
    NVFUSER_MODULES,
    Catalog,
    UnknownOptionError,
    _env,
    _patches,
    catalog,
    cut,
    is_development_mode,
    strict_mode,
)
from nvscope._core import (
    version as nvscope_version,
)
from nvscope._exec import MIN_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nvscope._core import Kind

__all__ = ["doctor"]


class _Report:
    """Doctor's output: one line per check (none with ``quiet``, for JSON on standard output); counts the failures
    and keeps every check for ``--json``."""

    def __init__(self, require_gpu_stack: bool, quiet: bool = False) -> None:
        self.require_gpu_stack = require_gpu_stack
        self.quiet = quiet
        self.failures = 0
        self.warnings = 0
        self.checks: list[dict[str, str | None]] = []

    def line(self, status: str, text: str, fix: str | None = None) -> None:
        if status == "FAIL":
            self.failures += 1
        elif status == "warn":
            self.warnings += 1
        self.checks.append({"status": status, "check": text, "fix": fix or None})
        self.say(f"{status:<6}{text}")
        if fix:
            self.say(f"{'fix:':<6}{fix}")

    def say(self, text: str = "") -> None:
        if not self.quiet:
            print(text)

    def gpu(self, text: str, fix: str | None = None, status: str = "note") -> None:
        """Something of the GPU stack is missing or broken: a FAIL under --require-gpu-stack, else ``status``."""
        self.line("FAIL" if self.require_gpu_stack else status, text, fix)


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
        items, malformed = split_env(value)
        for problem in malformed:
            report.line("FAIL", f"{variable}: {problem}", f"write {variable} as NAME[,NAME(ARGS)...]")
        bad = len(malformed)
        for item in items:
            name, paren, _ = item.partition("(")
            name = name.partition(")")[0].strip()  # a stray ')' is reported above, once, not as a second bad name
            info = known.get(kind, name)
            if info is None:
                # The catalog's check is the authority: it also accepts a name the catalog lacks when a newer
                # nvFuser accepts it (or NVSCOPE_TRUST_NVFUSER=1), saying so in a warning, shown here as a note.
                with warnings.catch_warnings(record=True) as notes:
                    warnings.simplefilter("always")
                    try:
                        known.check(kind, name)
                    except UnknownOptionError as error:
                        bad += 1
                        other: Kind = "disable" if kind == "enable" else "enable"
                        if known.get(other, name) is not None:
                            article = "an enable" if kind == "enable" else "a disable"
                            report.line("FAIL", f"{variable}: {name!r} is an nvFuser {other} option, not {article} "
                                                "option", f"move {name!r} to NVFUSER_{other.upper()}")
                        else:
                            report.line("FAIL", f"{variable}: {error}",
                                        f"correct or remove {name!r} in {variable} (nvFuser does not accept it); "
                                        f"`nvscope options --{kind}` lists the valid names")
                for note in notes:
                    report.line("note", f"{variable}: {note.message}")
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
    import difflib

    for name, problem in _env.problems():
        if name in _env.VARIABLES:
            report.line("warn", problem, f"set {name} to an accepted value, or unset it")
            continue
        near = difflib.get_close_matches(name, _env.VARIABLES, n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else ""
        report.line("warn", problem + hint, f"rename it to {near[0]}" if near else "unset it, or correct its name")


def _check_escape(report: _Report) -> None:
    """Whether ``nv_options(on_error="torch")`` can run this Thunder's failing fusions in PyTorch."""
    try:
        from nvscope._exec import IMPL_MODULE, escape_refusal

        why = escape_refusal(_import_quietly(IMPL_MODULE))
    except (Exception, SystemExit) as error:
        why = f"Thunder's nvFuser executor does not import ({type(error).__name__}: {error})"
    if why is None:
        report.line("ok", "escape (on_error='torch'): available, a failing Thunder fusion can run in PyTorch")
    else:
        report.line("note", f"escape (on_error='torch'): not available with this Thunder: {why}",
                    "on_error='torch' then raises nvFuser's error as 'raise' does (docs/escape.md)")


def _check_share(report: _Report) -> None:
    """``NVSCOPE_SHARE=all``: whether it is in force (read when nvscope was imported) and what its install at import
    could not do (an unsupported Thunder, say: the program's fusions then run Thunder's own path, unshared)."""
    from nvscope._core import ROOT
    from nvscope._exec import program_errors

    if ROOT is not None:
        report.line("ok", "NVSCOPE_SHARE=all: fusions at their own options share compiled definitions, program-wide "
                          "(every thread; read when nvscope was imported)")
    elif _env.share_all():
        report.line("warn", "NVSCOPE_SHARE=all was set after nvscope was imported: it takes effect only at import",
                    "set NVSCOPE_SHARE=all before the program starts, or use nv_options(share=True)")
    for error in program_errors():
        report.line("warn", f"NVSCOPE_SHARE=all: an adapter could not install: {cut(repr(error), 300)}",
                    "the fusions it would reach run Thunder's own path, unshared: use a Thunder and nvFuser that "
                    "nvscope supports (docs/failures.md, \"Thunder versions\")")


def _import_quietly(name: str) -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def doctor(require_gpu_stack: bool, json_to: str | None = None) -> int:
    """``nvscope doctor``: the checks, as lines and (``json_to``: a path, or ``-`` for standard output instead of the
    lines) as JSON; returns the exit code."""
    from nvscope._core import ConfigWarning

    report = _Report(require_gpu_stack, quiet=json_to == "-")
    with warnings.catch_warnings():
        # A refused NVSCOPE_* value is one warn line of the report (_check_flag_values), not also a ConfigWarning from
        # each check that reads the variable.
        warnings.simplefilter("ignore", ConfigWarning)
        _checks(report)
    problems = report.failures
    report.say()
    if problems:
        report.say(f"doctor: {problems} failure{'s' * (problems != 1)}: see the fix: lines above")
    elif report.warnings:
        report.say(f"doctor: nvscope works; {report.warnings} warning{'s' * (report.warnings != 1)} above")
    else:
        report.say("doctor: nvscope works")
    code = 1 if problems else 0
    if json_to is not None:
        import json

        from nvscope._cli._args import write_json

        document = {"ok": not problems, "failures": problems, "warnings": report.warnings,
                    "require_gpu_stack": require_gpu_stack, "checks": report.checks}
        code = write_json("doctor", json_to, json.dumps(document, indent=2)) or code
    return code


def _checks(report: _Report) -> None:
    report.line("ok", f"python {platform.python_version()} ({sys.executable})")
    report.line("ok", f"nvscope {nvscope_version()} ({os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})")
    known: Catalog | None
    try:
        known = catalog()
        report.line("ok", f"catalog: {len(known.options)} options, {known.source}")
    except Exception as error:
        known = None
        report.line("FAIL", f"catalog: cannot load: {error!r}",
                    "reinstall nvscope (pip install --force-reinstall nvscope) and its dependency `packaging`")

    # torch and CUDA
    torch: Any = None
    if importlib.util.find_spec("torch") is None:
        from nvscope._cli._wheels import torch_hint

        report.gpu("torch not installed (nvFuser and Thunder need it)", torch_hint())
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
    frontends = [name for name in NVFUSER_MODULES if importlib.util.find_spec(name) is not None]
    from packaging.version import Version

    from nvscope._core import installed_nvfuser

    minimum = Version(MIN_VERSION)

    found = installed_nvfuser()
    if found is None and not frontends:
        from nvscope._cli._wheels import install_hint

        report.gpu("nvFuser not installed", install_hint())
    else:
        version = ("version unknown (no *.dist-info found)" if found is None
                   else f"{found.version} ({found.distribution})")
        shown = " and ".join(frontends) if frontends else "none importable"
        if not frontends:
            report.gpu(f"nvFuser {version}: metadata found but no frontend module (nvfuser_direct, nvfuser)",
                       "reinstall nvFuser", status="warn")
        elif found is not None and found.version.release < minimum.release:
            report.gpu(f"nvFuser {version}, frontend {shown}: too old for per-call options (nvscope needs "
                       f">= {minimum}); scopes raise UnsupportedError at the first fusion",
                       f"upgrade nvFuser to >= {minimum}, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole "
                       "process", status="warn")
        else:
            report.line("ok", f"nvFuser {version}, frontend {shown}")

    # Thunder: any exception on import is reported (Thunder 0.2.x, for one, fails to import with torch >= 2.13)
    from nvscope._cli._wheels import thunder_hint

    thunder: Any = None
    if importlib.util.find_spec("thunder") is None:
        report.gpu("Thunder not installed (nvscope also works with nvFuser directly)",
                   thunder_hint(str(getattr(torch, "__version__", "(not importable)")), installed=False))
    else:
        try:
            thunder = _import_quietly("thunder")
            report.line("ok", f"Thunder {getattr(thunder, '__version__', '(version unknown)')}")
        except (Exception, SystemExit) as error:  # whatever Thunder's import raises
            report.gpu(f"Thunder is installed but fails to import: {type(error).__name__}: {error}",
                       thunder_hint(str(getattr(torch, "__version__", "(not importable)"))), status="warn")

    # nvscope's Thunder adapter
    from nvscope._exec import installed, unsupported

    autoinstall = _env.flag("NVSCOPE_AUTOINSTALL")
    if installed():
        report.line("ok", "Thunder adapter: installed")
    elif thunder is not None:
        try:
            from nvscope._exec import AUTOGRAD_MODULE, IMPL_MODULE

            _import_quietly(IMPL_MODULE)
            _import_quietly(AUTOGRAD_MODULE)
            refusal = unsupported()
            if refusal is not None:
                report.gpu(f"Thunder adapter: {refusal}",
                           'use a Thunder listed in docs/failures.md ("Thunder versions")', status="warn")
            else:
                how = ("it installs itself at the first scope entered after `import thunder`" if autoinstall else
                       "NVSCOPE_AUTOINSTALL=0: call nvscope.thunder.install() after `import thunder`")
                report.line("ok", f"Thunder adapter: installable ({how})")
        except (Exception, SystemExit) as error:
            report.gpu(f"Thunder adapter: Thunder's nvFuser executor does not import: {type(error).__name__}: "
                       f"{error}", "install an nvFuser that this Thunder supports", status="warn")

    if thunder is not None:
        _check_escape(report)
    _check_share(report)

    # Policy
    _check_flag_values(report)
    strict = strict_mode()
    if is_development_mode():
        report.line("ok", f"development mode on ({_flag('NVSCOPE_DEV')})")
    else:
        consequence = "raise DevelopmentModeError" if strict else "warn (DevelopmentModeWarning)"
        report.line("note", f"development mode off ({_flag('NVSCOPE_DEV')}): non-empty scopes {consequence}; "
                            "`nvscope run` and the pytest plugin turn it on for their runs",
                    "export NVSCOPE_DEV=1 for development runs (or call nvscope.set_development_mode(True))")
    report.line("ok", f"strict mode {'on' if strict else 'off'} ({_flag('NVSCOPE_STRICT')})")

    _check_env(report, known)

    patches = _patches.describe()
    report.line("ok", f"patched by nvscope now: {', '.join(patches)}" if patches else "patched by nvscope now: nothing")
