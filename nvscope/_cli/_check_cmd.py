"""``nvscope check [PATH ...]``: find nvFuser developer options set where they do not belong (`nvscope._check`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nvscope._cli._args import add_json_flag, error

__all__ = ["add_parser", "command"]

_DESCRIPTION = """\
Read the code under the given files and folders (default: the current folder) and report every place that sets an
nvFuser developer option or turns nvscope's development mode on: nv_options/with_nv_options/OptionSet, the pytest
marker, set_development_mode(True)/dev_mode(), Thunder's nv_enable_options=/nv_disable_options= and other nvFuser
compile options, nvFuser's _enable_options=/_disable_options=, NVFUSER_ENABLE/NVFUSER_DISABLE/NVSCOPE_DEV set in
os.environ, env= mappings, monkeypatch.setenv, shell scripts, Dockerfiles, Makefiles, YAML (CI env:), TOML/INI
(pytest addopts --nv-enable), .env files and notebooks, and `nvscope run --enable/--disable`.

Python is read as syntax trees (imports and aliases resolved); option names are checked against the bundled
catalog (unknown names with a did-you-mean; names outside the nvFuser range of [tool.nvscope.check] or the
installed nvFuser). A value forwarded from a caller (a parameter, self.x) is plumbing: listed with --verbose,
never failing. Nothing is imported or run."""

_EPILOG = """\
allowances (ignored with --strict):
  a comment on the line, or alone on the line above:   # nvscope: allow benchmark of the matmul scheduler
  (allow[name], allow[version] also allow bad names / names outside the range there)
  pyproject.toml:
    [tool.nvscope.check]
    nvfuser = ">=0.2.35"             # the nvFuser versions the code must work with
    allow = ["experiments/**"]       # paths where options may be set
    allow-names = []                 # paths where bad names are on purpose
    exclude = ["third_party/**"]     # paths not read

examples:
  nvscope check
  nvscope check --strict src/
  nvscope check --format github --nvfuser ">=0.2.35" .
  nvscope check --json . | python -c "import json,sys; print(json.load(sys.stdin)['counts'])"

exit codes: 0 nothing failing; 1 findings that are not allowed; 2 a bad command line, path or [tool.nvscope.check]."""


def add_parser(subparsers: Any) -> None:
    """Add the ``check`` command to an ``argparse`` subparsers object."""
    p = subparsers.add_parser("check", help="find nvFuser developer options set in code, configs and scripts "
                                             "(a static check for CI and pre-commit)",
                              description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to check (default: .)")
    p.add_argument("--strict", action="store_true", help="ignore every allowance (comments and allow globs)")
    p.add_argument("--format", choices=("text", "github", "json"), default="text",
                   help="text (default), GitHub Actions annotations, or JSON on stdout")
    add_json_flag(p, "the result as JSON on standard output, the text then on standard error; --json=PATH writes it "
                     "to PATH instead, the text as usual (an existing file only if it holds JSON)")
    p.add_argument("--config", metavar="PYPROJECT",
                   help="the pyproject.toml whose [tool.nvscope.check] applies (default: the nearest above the first "
                        "PATH that has the table)")
    p.add_argument("--nvfuser", metavar="RANGE",
                   help='the nvFuser versions to check names against, e.g. ">=0.2.35" (default: the table\'s '
                        "nvfuser, else the installed nvFuser, else the whole catalog)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also list allowed findings (with their reasons) and plumbing")
    p.add_argument("--statistics", action="store_true", help="also print the counts per construct")


def _error(message: str) -> int:
    return error("check", message)


def command(ns: argparse.Namespace) -> int:
    from nvscope._check import ConfigError, check
    from nvscope._core import cut

    if ns.format == "github" and ns.json == "-":
        return _error("--format github and --json both print to standard output: write the JSON to a file "
                      "(--json=report.json)")
    try:
        result = check(ns.paths or ["."], strict=ns.strict, config=ns.config, nvfuser=ns.nvfuser)
    except FileNotFoundError as error:  # the message names the fix
        import os

        missing = next((path for path in ns.paths if path.endswith(".json") and not os.path.lexists(path)), None)
        if ns.json == "-" and missing is not None:  # `--json report.json .`: --json is a flag, --json=PATH a file
            return _error(f"{error}; to write the JSON to a file: --json={cut(missing, 200)}")
        return _error(str(error))
    except ConfigError as error:
        return _error(str(error))
    as_json = result.to_json()
    to_stdout = ns.format == "json" or ns.json == "-"
    if ns.json not in (None, "-"):
        try:
            with open(ns.json, "w", encoding="utf-8") as out:
                out.write(as_json + "\n")
        except OSError as error:
            return _error(f"--json {cut(ns.json, 200)}: cannot write it ({error.strerror or error})")
    if to_stdout:
        print(as_json)
        if ns.format != "json":  # --json -: the text goes to standard error, as for every command's --json -
            print(result.render(verbose=ns.verbose), file=sys.stderr)
    elif ns.format == "github":
        print(result.render_github())
    else:
        print(result.render(verbose=ns.verbose))
    if ns.statistics:
        print(result.statistics(), file=sys.stderr if to_stdout else sys.stdout)
    return result.exit_code
