"""The documentation's examples, run: every fenced block in README.md and docs/*.md says how it was run.

The marker convention (an HTML comment on the line before the block) is described in docs/README.md. Blocks marked
``test: cpu`` run here, each in a fresh process from the repository root: ``console`` blocks as shell commands whose
shown output is compared, ``python`` blocks as doctests (``>>>``) or scripts. ``ran: ci`` blocks must appear verbatim
in .ci/run. Relative links between the pages must resolve, anchors included. Every repository path and every dotted
nvscope name that the pages, results READMEs and docstrings or comments cite must exist.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import itertools
import os
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages that other work in progress is writing: their marked blocks run, but markers are not required there yet.
NOT_YET_MARKED = {"docs/search.md", "docs/failures.md", "docs/distributed.md"}
SHELL = {"console", "bash", "sh", "shell"}
MARKER = re.compile(r"<!--\s*(test:\s*cpu|ran:\s*ci|ran:\s*H200|sketch)((?:\s+[\w=]+)*)\s*-->")
FENCE = re.compile(r"(`{3,})([\w-]*)\s*")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TIMEOUT = 180


class Block(NamedTuple):
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str | None  # "test: cpu", "ran: ci", "ran: H200", "sketch"
    exit_code: int

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks = []
    i = 0
    while i < len(lines):
        opening = FENCE.fullmatch(lines[i])
        if opening is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != opening[1]:
            end += 1
        marker, exit_code = None, 0
        found = MARKER.fullmatch(lines[i - 1].strip()) if i > 0 else None
        if found is not None:
            marker = re.sub(r"\s*:\s*", ": ", found[1])
            for option in found[2].split():
                key, _, value = option.partition("=")
                if key != "exit" or not value.isdigit():
                    raise ValueError(f"{page}:{i}: unknown marker option {option!r} (only exit=N)")
                exit_code = int(value)
        blocks.append(Block(page, i + 1, opening[2], "\n".join(lines[i + 1:end]), marker, exit_code))
        i = end + 1
    return blocks


BLOCKS = [block for path in PAGES for block in _blocks(path)]
CPU_BLOCKS = [block for block in BLOCKS if block.marker == "test: cpu"]


def test_the_pages_have_blocks_of_every_kind() -> None:
    # Guards the parser: a convention that silently matched nothing would make every test below vacuous.
    assert {b.marker for b in BLOCKS} >= {"test: cpu", "ran: ci", "ran: H200", "sketch"}
    assert {b.language for b in CPU_BLOCKS} >= {"console", "python"}


def test_every_block_says_how_it_was_run() -> None:
    problems = []
    for block in BLOCKS:
        if block.marker is None and block.page not in NOT_YET_MARKED:
            problems.append(f"{block.where}: no marker before the block (docs/README.md lists them)")
        elif block.marker == "sketch" and block.language in SHELL:
            problems.append(f"{block.where}: a shell block cannot be a sketch: it must have run")
        elif block.marker == "test: cpu" and block.language not in ("console", "python"):
            problems.append(f"{block.where}: `test: cpu` runs console and python blocks, not {block.language!r}")
    assert not problems, "\n".join(problems)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {_slug(m[1]) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.MULTILINE)}


def test_links_between_pages_resolve() -> None:
    problems = []
    for path in PAGES:
        text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # an address outside the repository
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                problems.append(f"{path.relative_to(ROOT)}: link to a missing file: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                problems.append(f"{path.relative_to(ROOT)}: link to a missing heading: {target}")
    assert not problems, "\n".join(problems)


def test_setup_commands_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for b in BLOCKS if b.marker == "ran: ci" for line in b.text.splitlines()
                if line.strip() and not line.startswith("#")]
    assert commands
    missing = [command for command in commands if command not in ci]
    assert not missing, f".ci/run does not run these documented commands verbatim: {missing}"


# --- running the `test: cpu` blocks -------------------------------------------------------------------------------

def _nvfuser_installed() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in ("nvfuser_direct", "nvfuser"))


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a documented command: `nvscope` and `python` are this checkout's, run by this Python."""
    bin_dir = tmp_path_factory.mktemp("bin")
    launchers = {
        "nvscope": f'exec "{sys.executable}" -c "import sys; from nvscope.cli import main; sys.exit(main())" "$@"',
        "python": f'exec "{sys.executable}" "$@"',
    }
    for name, body in launchers.items():
        launcher = bin_dir / name
        launcher.write_text(f"#!/bin/sh\n{body}\n")
        launcher.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "80"
    return env


def _match(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` has the shown lines, a ``...`` line standing for any number of lines."""
    segments: list[list[str]] = [[]]
    for line in expected:
        if line == "...":
            segments.append([])
        else:
            segments[-1].append(line)
    if len(segments) == 1:
        return actual == segments[0]
    first, *middle, last = segments
    if actual[:len(first)] != first:
        return False
    position = len(first)
    for segment in middle:
        for start in range(position, len(actual) - len(segment) + 1):
            if actual[start:start + len(segment)] == segment:
                position = start + len(segment)
                break
        else:
            return False
    return not last or (len(actual) - len(last) >= position and actual[len(actual) - len(last):] == last)


def _commands(text: str) -> list[tuple[str, list[str]]]:
    commands: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line.rstrip())
        elif line.strip():
            raise ValueError(f"output before the first `$ ` command: {line!r}")
    return commands


def _run_console(block: Block, env: dict[str, str]) -> None:
    commands = _commands(block.text)
    assert commands, f"{block.where}: a console block without a `$ ` command"
    for command, shown in commands:
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        actual = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
        context = f"{block.where}: `$ {command}` exited with {done.returncode}; its output:\n{done.stdout}"
        assert done.returncode == block.exit_code, context
        while shown and not shown[-1]:
            shown.pop()
        if shown and not _nvfuser_installed():  # with nvFuser installed, the catalog (and so output) differs
            assert _match(shown, actual), f"{context}\nexpected (`...`: any lines):\n" + "\n".join(shown)


def _run_python(block: Block, env: dict[str, str], tmp_path: Path) -> None:
    if block.text.lstrip().startswith(">>>"):
        page = tmp_path / "block.txt"
        page.write_text(block.text + "\n", encoding="utf-8")
        argv = [sys.executable, "-m", "doctest", "-o", "ELLIPSIS", str(page)]
    else:
        argv = [sys.executable, "-c", block.text]
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == block.exit_code, f"{block.where}: exited with {done.returncode}:\n{done.stdout}"


@pytest.mark.parametrize("block", CPU_BLOCKS, ids=[b.where for b in CPU_BLOCKS])
def test_documented_example_runs(block: Block, shell_env: dict[str, str], tmp_path: Path) -> None:
    if block.language == "console":
        _run_console(block, shell_env)
    else:
        _run_python(block, shell_env, tmp_path)


def test_the_quickstart_runs_without_a_warning_and_says_what_it_showed(shell_env: dict[str, str]) -> None:
    """The README's first example is the first thing a newcomer runs (and .ci/run runs it on CPU): no warning, and
    plain words on what it showed, with or without a GPU stack (issue 27 item 12)."""
    done = subprocess.run([sys.executable, "-W", "error", "examples/quickstart.py"], cwd=ROOT, env=shell_env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("GPU stack (CUDA, nvFuser, Thunder): ")
    if "GPU stack (CUDA, nvFuser, Thunder): not here (" in done.stdout:
        assert "Real fusions:\n  skipped: " in done.stdout
        assert "Not shown here: options changing kernels" in done.stdout
    else:
        assert "nvscope audit:" in done.stdout or "fusion executions" in done.stdout, done.stdout
    assert "nv_options(**" not in done.stdout  # a call is shown as written: nv_options(enable=[...])


def test_the_examples_say_what_they_cannot_do_here(shell_env: dict[str, str]) -> None:
    """Without the GPU stack: ab_compare says there is nothing to compare (no table of noise); ddp_train started
    with plain python says how to launch it (argparse's exit 2, no traceback); calls read as they are written."""
    if "not here (" not in subprocess.run([sys.executable, "examples/quickstart.py"], cwd=ROOT, env=shell_env,
                                          capture_output=True, text=True, timeout=TIMEOUT).stdout:
        pytest.skip("the GPU stack is here: the examples run for real")
    done = subprocess.run([sys.executable, "-W", "error", "examples/ab_compare.py"], cwd=ROOT, env=shell_env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "Nothing to compare here" in done.stdout and "ratio:" not in done.stdout and "median ms" not in done.stdout
    done = subprocess.run([sys.executable, "examples/matmul_codegen.py"], cwd=ROOT, env=shell_env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert "nv_options(enable=['fuse_matmul'], disable=['matmul_expr_eval'])" in done.stdout, done.stdout
    env = {k: v for k, v in shell_env.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "examples/ddp_train.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "error: launch it with torchrun, one process per rank: torchrun --standalone --nproc-per-node 2" in \
        done.stderr


def test_output_matching_follows_the_convention() -> None:
    actual = ["a", "b", "c", "d"]
    assert _match(["a", "b", "c", "d"], actual)
    assert not _match(["a", "b"], actual)  # no `...`: the whole output
    assert _match(["a", "..."], actual)
    assert _match(["...", "c", "d"], actual)
    assert not _match(["...", "c"], actual)  # the last segment ends the output
    assert _match(["a", "...", "c", "..."], actual)
    assert not _match(["b", "..."], actual)  # the first segment starts it
    assert not _match(["...", "c", "...", "b", "..."], actual)  # segments in order


def test_the_module_map_names_every_module() -> None:
    """The module map is the map of the package: a module missing from it is a module a newcomer cannot place."""
    page = (ROOT / "docs" / "modules.md").read_text(encoding="utf-8")
    modules = sorted(p.relative_to(ROOT).as_posix() for p in [*(ROOT / "nvscope").rglob("*.py"), *ROOT.glob("*.py")])
    assert [m for m in modules if f"| `{m}` |" not in page] == []


def test_every_module_is_under_400_lines() -> None:
    """A module a reader can hold in mind; the catalog's data table is data, not code."""
    modules = [*(ROOT / "nvscope").rglob("*.py"), *ROOT.glob("*.py")]
    long = {p.name: n for p in modules if p.name != "_catalog_data.py"
            and (n := len(p.read_text(encoding="utf-8").splitlines())) >= 400}
    assert long == {}


# --- citations: the paths and dotted names the pages and docstrings cite exist ----------------------------------------

# A path is cited when it starts with one of these folders (`tests/exec/test_shared.py`, `docs/how-it-works.md`,
# `benchmarks/results/`); `{a,b}` stands for each choice and `<name>` for any name, as the pages write them. A path
# followed by "at <commit>" names a file as it was then (a removed script): not checked.
TOP_DIRS = (".ci", "benchmarks", "docs", "examples", "nvscope", "tests", "tools")
_DIRS = "|".join(re.escape(d) for d in TOP_DIRS)
REPO_PATH = re.compile(rf"(?<![\w./~$-])((?:{_DIRS})/[\w./*{{}},<>-]*)")
AS_IT_WAS = re.compile(r"`? at [0-9a-f]{7,40}\b")
# A dotted name: `nvscope.thunder.partitions`, `nvscope._exec._shared.SharedDefinitions.adopt`,
# `_nvscope_pytestplugin.pytest_configure`.
DOTTED = re.compile(r"(?<![\w./-])((?:nvscope|_nvscope\w*)(?:\.\w+)+)(?![\w-])")
FILE_SUFFIXES = {"py", "md", "txt", "json", "png", "sh", "toml"}  # `_nvscope_pytestplugin.py` is a file, not a name
# CHANGELOG.md is history: it names files and names as they were when each entry was written.
CITING = sorted({*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/**/*.md"), *ROOT.glob("*.py"),
                 *(path for top in TOP_DIRS for path in (ROOT / top).rglob("*.py"))} - {ROOT / "CHANGELOG.md"})


def _cited_text(path: Path) -> str:
    """A page's text; of a Python file, its comments and docstrings only (code is checked by running it)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    pieces = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            pieces.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(pieces)


def _citations(pattern: re.Pattern[str]) -> Iterator[tuple[str, str]]:
    for path in CITING:
        text = _cited_text(path)
        for found in pattern.finditer(text):
            if pattern is REPO_PATH and AS_IT_WAS.match(text, found.end()):
                continue
            yield path.relative_to(ROOT).as_posix(), found[1].rstrip(".,;:")


def _path_exists(cited: str) -> bool:
    pattern = re.sub(r"<[^>/]*>", "*", cited)
    pieces = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(pieces)]
    paths = ["".join(c) for c in itertools.product(*choices)]
    return all(any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists() for p in paths)


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for file in (base / "__init__.py", base.with_suffix(".py")):
        if file.is_file():
            return file
    return None


def _defined(body: list[ast.stmt], into: dict[str, ast.AST]) -> dict[str, ast.AST]:
    """The names a module or class body defines (under `if`/`try` too), with the node that defines each."""
    for node in body:
        if isinstance(node, ast.If | ast.Try):
            handlers = [s for h in getattr(node, "handlers", []) for s in h.body]
            _defined([*node.body, *node.orelse, *getattr(node, "finalbody", []), *handlers], into)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            into[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                into[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                into.update((n.id, node) for n in ast.walk(target) if isinstance(n, ast.Name))
            if isinstance(node.value, ast.List | ast.Tuple):  # __all__ (lazy names) and __slots__ list names too
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if any(isinstance(t, ast.Name) and t.id in ("__all__", "__slots__") for t in ast.walk(node)):
                    into.update((name, node) for name in names if name not in into)
    return into


def _module_names(file: Path) -> dict[str, ast.AST]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    names = _defined(tree.body, {})
    for node in ast.walk(tree):  # `global x` in a function defines a module-level x
        if isinstance(node, ast.Global):
            names.update((name, node) for name in node.names if name not in names)
    return names


def _class_names(node: ast.ClassDef) -> set[str]:
    names = set(_defined(node.body, {}))
    names.update(n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                 and isinstance(n.value, ast.Name) and n.value.id == "self")
    return names


def _resolves(name: str) -> bool:
    """Whether a dotted name is a module, or a name a module defines or imports, or a class member, read from the
    source (nothing is imported: a module that needs torch is checked without it)."""
    parts = name.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return True
    cut = next((n for n in range(len(parts), 0, -1) if _module_file(parts[:n]) is not None), 0)
    if not cut:
        return False
    file, rest = _module_file(parts[:cut]), parts[cut:]
    while rest and file is not None:
        node = _module_names(file).get(rest[0])
        if node is None and file.with_suffix(".pyi").exists():  # a face that lists its names in its stub
            node = _module_names(file.with_suffix(".pyi")).get(rest[0])
        if node is None and file.name == "__init__.py":  # a submodule of a package
            file, rest = _module_file([*file.parent.relative_to(ROOT).parts, rest[0]]), rest[1:]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "nvscope":
            alias = next(a for a in node.names if (a.asname or a.name) == rest[0])
            module = (node.module or "").split(".")
            submodule = _module_file([*module, alias.name])  # `from nvscope._core import _scope`
            file, rest = (submodule, rest[1:]) if submodule else (_module_file(module), [alias.name, *rest[1:]])
        elif isinstance(node, ast.ClassDef):
            return len(rest) == 1 or (len(rest) == 2 and rest[1] in _class_names(node))
        else:
            return node is not None and len(rest) == 1
    return file is not None


def test_citations_are_found() -> None:
    # Guards the extractors: patterns that matched nothing would make the two tests below vacuous.
    assert all((ROOT / d).is_dir() for d in TOP_DIRS)
    for found in (set(_citations(REPO_PATH)), set(_citations(DOTTED))):
        assert len({page for page, _ in found if page.endswith(".md")}) >= 5, found  # pages
        assert len({page for page, _ in found if page.startswith("nvscope/")}) >= 5, found  # docstrings, comments


def test_the_citation_checks_tell_a_missing_citation() -> None:
    assert _resolves("nvscope._exec._shared.SharedDefinitions.adopt") and _resolves("nvscope.thunder.partitions")
    assert _resolves("nvscope._core._scope.Frame.policy") and _resolves("nvscope.search")  # a member; a lazy name
    for wrong in ("nvscope._exec._shared.SharedDefinitions.adopted", "nvscope.thunder.partition",
                  "nvscope._core._scope.Frame.policies", "nvscope._core._nothing", "nvscope.Search"):
        assert not _resolves(wrong), wrong
    assert _path_exists("tests/exec/test_shared.py")
    assert _path_exists("benchmarks/results/search_{mlp,block}-next-2026-12-03-257f82b.json")
    assert not _path_exists("tests/test_shared.py") and not _path_exists("benchmarks/results/search_{mlp,nope}.json")
    text = "`benchmarks/gone.py` at 00d11dd, tests/here.py"
    assert [m[1] for m in REPO_PATH.finditer(text) if not AS_IT_WAS.match(text, m.end())] == ["tests/here.py"]


def test_cited_paths_exist() -> None:
    missing = sorted(f"{page}: {path}" for page, path in set(_citations(REPO_PATH)) if not _path_exists(path))
    assert not missing, "cited paths that do not exist (a file moved? say where it is now):\n" + "\n".join(missing)


def test_cited_names_exist() -> None:
    missing = sorted(f"{page}: {name}" for page, name in set(_citations(DOTTED)) if not _resolves(name))
    assert not missing, "cited nvscope names that do not exist (renamed? cite the new one):\n" + "\n".join(missing)
