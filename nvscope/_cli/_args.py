"""What the commands that run a user's step share: the measuring flags (so that search, profile and bisect say and
check them alike), output paths, and loading the script (or ``-m`` module) and its function."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from nvscope._core import cut
from nvscope._measure import arg, attribute, count, import_program_module, import_script, number, rounds

__all__ = ["COUNT", "JSON_OUT", "PLOT_OUT", "POSITIVE", "ROUNDS", "SECONDS", "STDOUT", "TABLE_OUT", "TOLERANCE",
           "add_json_flag", "add_measuring", "add_no_share", "error", "hint_misplaced", "json_flag_words",
           "json_took_the_target", "load_step", "output_problem", "program_output_to_stderr", "said", "split_target",
           "take_target", "text_stream", "write_json"]

STDOUT = "-"  # `--json -`: standard output, wherever --json takes a path


def _seconds(name: str, value: object) -> float:
    from nvscope._bisect import timeout_seconds

    return timeout_seconds(name, value)


def _number_word(text: str) -> int | float:
    """A number as written: an integer stays one, so that a refusal says ``got 1000001``, not ``1000001.0``."""
    try:
        return int(text)
    except ValueError:
        return float(text)


# The command line's argument types: the tools' own checks (nvscope._measure._checks), as argparse types.
ROUNDS = arg(rounds)
COUNT = arg(count)
POSITIVE = arg(lambda name, value: count(name, value, minimum=1))
TOLERANCE = arg(number, float)
SECONDS = arg(_seconds, _number_word)  # finite, > 0, at most 1e6: inf or 1e300 would overflow subprocess's waits


def _json_object(head: bytes) -> bool:
    import json

    try:
        return isinstance(json.loads(head.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def _output(what: str, ours: Callable[[bytes], bool], flag_takes_script: bool = False) -> Callable[[str], str]:
    """An argparse type for an output path that refuses a file nvscope did not write (``ours(content)`` says whether
    it looks like nvscope's earlier output), so that a word the flag took by mistake is never overwritten.
    ``flag_takes_script``: ``--json prog.py`` is refused as `json_took_the_target` says."""

    def output(path: str) -> str:
        if path == STDOUT or not os.path.lexists(path) or os.path.isdir(path):  # a folder: the command says why
            return path
        try:
            with open(path, "rb") as file:
                content = file.read(64 << 20)
        except OSError:
            content = b"?"  # unreadable: not known to be nvscope's
        if not content.strip() or ours(content):
            return path
        script = flag_takes_script and path.endswith(".py") and json_took_the_target(path)  # the script as PATH
        raise argparse.ArgumentTypeError(script or f"{cut(path, 200)} exists and is not {what}: nvscope replaces only "
                                                   "its own earlier output; remove the file or give another path")

    return output


_JSON = "an earlier nvscope JSON output (a JSON object)"
JSON_OUT = _output(_JSON, _json_object, flag_takes_script=True)  # --json PATH|- before a target
_JSON_FILE = _output(_JSON, _json_object)  # --json=PATH of options, doctor and check
PLOT_OUT = _output("a PNG image", lambda content: content.startswith(b"\x89PNG\r\n\x1a\n"))
TABLE_OUT = _output("an earlier nvscope profile table", lambda content: content.startswith(b"nvscope profile:"))


def add_json_flag(p: argparse.ArgumentParser, help: str) -> None:
    """``--json`` of the commands whose JSON is optional output (options, doctor, check): a flag, JSON on standard
    output; ``--json=PATH`` writes PATH. The word after a bare ``--json`` is never its value (``check --json
    train.py`` checks train.py): `json_flag_words` rewrites the command line before argparse reads it."""
    p.add_argument("--json", nargs="?", const=STDOUT, type=_JSON_FILE, metavar="=PATH", help=help)


def json_flag_words(args: Sequence[str], abbrev: bool) -> list[str]:
    """The command line with each bare ``--json`` (or, with ``abbrev``, its abbreviation) before any ``--`` as
    ``--json=-``, so that argparse's optional value never takes the next word."""
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            out.extend(args[i:])
            break
        if word == "--json" or (abbrev and len(word) >= 3 and "--json".startswith(word)):
            out.append("--json=-")
            if i + 1 < len(args) and args[i + 1] == STDOUT:
                i += 1
        else:
            out.append(word)
        i += 1
    return out


def hint_misplaced(command: str, parser: argparse.ArgumentParser, program: str, program_args: list[str]) -> None:
    """One line on stderr when words after the script (its arguments) are run's own flags: `nvscope run train.py
    --enable fuse_matmul` gives --enable to train.py, not to nvscope. The program still runs: they may be its own."""
    own = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    own -= {"--help"}
    given = list(dict.fromkeys(word.partition("=")[0] for word in program_args if word.partition("=")[0] in own))
    if given:
        verb = "go" if len(given) > 1 else "goes"
        print(f"nvscope {command}: note: {', '.join(given)} after {cut(program, 80)} {verb} to the program as its "
              f"own argument{'s' * (len(given) > 1)}, not to nvscope: put nvscope's flags before the script (or `--` "
              "before it, to pass them on without this note)", file=sys.stderr)


def add_no_share(p: argparse.ArgumentParser) -> None:
    """``--no-share-defaults``: the tools' ``share_defaults=False`` (search, profile, bisect)."""
    p.add_argument("--no-share-defaults", action="store_true",
                   help="run the step's defaults on their own path (Thunder's: one compile per fusion, as before "
                        "nvscope shared them) instead of one compiled definition per distinct definition "
                        "(nv_options(share=True))")


def add_measuring(p: argparse.ArgumentParser, rounds: int, steps: int, *, given: bool = False,
                  warmup: bool = True) -> None:
    """The flags of a step's measurement: --rounds, --steps, --warmup (unless ``warmup=False``), --tolerance,
    --backward, --params, --seed. ``rounds``/``steps``: the tool's defaults, as the help shows them; ``given``: the
    parsed values are None unless given (the command passes on only what was given)."""
    p.add_argument("--rounds", type=ROUNDS, default=None if given else rounds,
                   help=f"randomized timing rounds (default {rounds})")
    p.add_argument("--steps", type=POSITIVE, default=None if given else steps,
                   help="least calls of each variant per round; more for a short call, so that a timed sample "
                        f"lasts half a millisecond (default {steps})")
    if warmup:
        p.add_argument("--warmup", type=COUNT, default=2, help="untimed calls after each first call (default 2)")
    p.add_argument("--tolerance", type=TOLERANCE, default=None,
                   help="bound on max|diff|/max|default| of every output and gradient (default: by dtype)")
    p.add_argument("--backward", action="store_true",
                   help="the function returns a scalar loss; the tool calls .backward() on it")
    p.add_argument("--params", metavar="NAME",
                   help="a module-level nn.Module (or Thunder module) of the script whose parameters' gradients "
                        "are compared")
    p.add_argument("--seed", type=int, default=0, help="seed of the round order (default 0)")


def text_stream(json_to: str | None) -> TextIO:
    """Where a command's human-readable text goes: standard error when its JSON takes standard output (so that
    ``--json - | jq`` reads JSON alone), else standard output."""
    return sys.stderr if json_to == STDOUT else sys.stdout


@contextlib.contextmanager
def program_output_to_stderr(json_to: str | None) -> Iterator[None]:
    """With ``--json -``, the user's code writes to standard error while it runs, so that standard output holds the
    JSON alone: both ``sys.stdout`` and file descriptor 1 (C code, child processes)."""
    if json_to != STDOUT:
        yield
        return
    fd, saved = 1, None
    try:
        sys.stdout.flush()
        fd, err = sys.__stdout__.fileno(), sys.stderr.fileno()  # type: ignore[union-attr]
        saved = os.dup(fd)
        os.dup2(err, fd)
    except (OSError, ValueError, AttributeError):  # no file descriptors (an embedded or captured stream): print only
        if saved is not None:
            os.close(saved)
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            for stream in (sys.stdout, sys.__stdout__):  # what the program wrote goes out before fd 1 is back
                with contextlib.suppress(OSError, ValueError):
                    if stream is not None:
                        stream.flush()
            os.dup2(saved, fd)
            os.close(saved)


def json_took_the_target(json_to: str | None) -> str | None:
    """With no target on the command line: when ``--json`` took the script (``--json prog.py``, ``--json
    bench.py:step``) as its PATH, the one line that says so; else None."""
    if json_to is None or json_to == STDOUT or not json_to.partition(":")[0].endswith(".py"):
        return None
    word = cut(json_to, 200)
    return f"--json {word}: did you mean --json - {word}? (--json takes PATH or - before the script)"


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
        print(f"nvscope {command}: error: could not write {cut(path, 200)}: {error.strerror or error}",
              file=sys.stderr)
        return 1
    return 0


def load_step(ns: argparse.Namespace, where: str, function: str, error: Callable[[str, int], int],
              check_params: bool = True) -> tuple[Any, Any] | int:
    """Import ``where`` (a script, or ``-m`` module) and return (its ``function``, the object ``--params`` names or
    None); or, after ``error(message, exit code)`` said why not, that exit code. The caller restores ``sys.argv``
    and ``sys.path``."""
    try:
        if ns.module is None:
            if not os.path.isfile(where):
                return error(f"can't open file {said(os.path.abspath(where))}: no such file", 2)
            sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
            sys.argv = [where, *ns.args]
            loaded = import_script(where)
        else:
            sys.path.insert(0, os.getcwd())
            sys.argv = [where, *ns.args]
            if importlib.util.find_spec(where.partition(".")[0]) is None:
                return error(f"cannot import module {said(where)}: no module named {said(where.partition('.')[0])}",
                             2)
            loaded = import_program_module(where)  # its fusion ids name it as `python -m` does
    except Exception:
        traceback.print_exc()
        return error(f"importing {cut(where, 200)} failed (traceback above)", 1)
    fn = attribute(loaded, function)
    if not callable(fn):
        return error(f"{cut(where, 200)} has no function {said(function)}" if fn is None else
                     f"{cut(f'{where}:{function}', 200)} is a {type(fn).__name__}, not a function", 2)
    params = None
    if ns.params:
        params = attribute(loaded, ns.params)
        if params is None:
            return error(f"--params {cut(ns.params, 200)}: {cut(where, 200)} has no {said(ns.params)}", 2)
        if check_params:
            from nvscope._measure import grad_targets

            try:
                grad_targets((), {}, params)
            except TypeError as problem:
                return error(f"--params {cut(ns.params, 200)}: {str(problem).replace('module= takes', 'takes', 1)}",
                             2)
    return fn, params


def split_target(target: str, module: bool) -> tuple[str, str, str | None]:
    """``script.py:FUNCTION`` (``module:FUNCTION`` with ``module``) as (where, function, None), or what is missing as
    its third item: the one line a command prints (exit 2)."""
    where, _, function = target.rpartition(":")
    if where and function:
        return where, function, None
    if not where and function and target.startswith(":"):
        return "", "", f"{said(target)} names no {'module' if module else 'script'}: write " \
                       f"{'module' if module else 'script.py'}:{cut(function, 200)}"
    return "", "", f"{said(target)} names no function: write {cut(target.rstrip(':'), 200) or 'script.py'}:FUNCTION"


def take_target(ns: argparse.Namespace) -> str | None:
    """The target (script or ``-m`` module, with its ``:FUNCTION``), leaving in ``ns.args`` the words after it: as with
    ``python -m``, every word after the module is an argument, and a leading ``--`` goes."""
    if ns.module is not None and ns.target is not None:
        ns.args, ns.target = [ns.target, *ns.args], None
    if ns.args[:1] == ["--"]:
        ns.args = ns.args[1:]
    target: str | None = ns.target if ns.module is None else ns.module
    return target


def output_problem(paths: Sequence[tuple[str, str | None]], plot: str | None) -> str | None:
    """Why the outputs cannot be written, checked before the step runs: a missing folder, or --plot without
    matplotlib; None when they can."""
    for flag, path in paths:
        if path and path != STDOUT and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return f"{flag} {cut(path, 200)}: the directory does not exist"
    if plot and importlib.util.find_spec("matplotlib") is None:
        return "--plot needs matplotlib: pip install matplotlib (or leave --plot out)"
    return None


def error(command: str, message: str, code: int = 2) -> int:
    """Print ``message`` as ``command``'s error line; returns ``code``, the exit code."""
    print(f"nvscope {command}: error: {message}", file=sys.stderr)
    return code


def said(text: str) -> str:
    """A path, module, name or value from the command line, quoted, in a message: cut to 200 characters (a message
    must not echo a 100,000-character argument whole)."""
    return cut(text, 200, repr)
