"""tools/regen_catalog.py, the generator of nvscope/_core/_catalog_data.py: run on nvFuser's own files (a trimmed copy
of their history in tests/data/fuser, replayed with git) and on small histories built here; the committed module
checked against the renderer and tools/catalog_notes.py. With ``NVSCOPE_FUSER_GIT`` set to a clone or mirror of
NVIDIA/Fuser, the committed module is also regenerated from the whole history."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest

from nvscope._core import _catalog_data as data

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"nvscope_tools_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regen = load("regen_catalog")


# --- the committed module --------------------------------------------------------------------------------------------

def test_the_committed_module_is_what_the_renderer_writes_from_the_notes() -> None:
    # Catches a hand edit of nvscope/_core/_catalog_data.py, or notes changed without regenerating.
    notes = load("catalog_notes")
    found = re.search(r"through (\S+) \(commit (\w+),\nthe newest commit read, ([\d-]+)", data.__doc__ or "")
    assert found is not None and found[1] == data.VERSIONS[-1][0]
    table = regen.Table(versions=list(data.VERSIONS), last_commits={}, enums={},
                        options={(k, n): (since, until) for k, n, _, since, until, _, _ in data.OPTIONS})
    gates = {(kind, name): (regen.gate_ops(notes, nodes), ", ".join(sources))
             for (kind, name), (nodes, sources) in notes.GATES.items()}
    nightly = regen.check_nightly(None, [], table, notes)  # no history here: the dates are checked for form only
    text = regen.render(table, found[2], found[3], notes, gates, nightly)
    assert text == (ROOT / "nvscope" / "_core" / "_catalog_data.py").read_text(encoding="utf-8")


def test_every_gated_op_is_a_frontend_op_the_notes_trace() -> None:
    notes = load("catalog_notes")
    for op, (nodes, files) in notes.FRONTEND_OPS.items():
        assert op.isidentifier() and op == op.lower(), op
        assert nodes and all(node.endswith("Op") for node in nodes), op
        assert files and all(path.startswith("python/") for path in files), op
    for kind, name, ops, _ in data.OP_GATES:
        assert set(ops) <= set(notes.FRONTEND_OPS), (kind, name, set(ops) - set(notes.FRONTEND_OPS))


@pytest.mark.skipif(not os.environ.get("NVSCOPE_FUSER_GIT"), reason="set NVSCOPE_FUSER_GIT to a clone of NVIDIA/Fuser")
def test_the_committed_module_is_regenerated_exactly_from_nvfuser() -> None:
    # Only where a clone or mirror of nvFuser is at hand (the data module's docstring names the commit it read).
    newest = re.search(r"\(commit (\w+),\nthe newest commit read", data.__doc__ or "")
    assert newest is not None
    text = regen.generate(Path(os.environ["NVSCOPE_FUSER_GIT"]), newest[1])
    assert text == (ROOT / "nvscope" / "_core" / "_catalog_data.py").read_text(encoding="utf-8")


# --- nvFuser's own files: tests/data/fuser ---------------------------------------------------------------------------

FIXTURE = ROOT / "tests" / "data" / "fuser"
FROM = "0.2.35"  # the fixture's first version bump (tests/data/fuser/README.md)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvFuser's history from 0.2.35's bump to the catalog's newest commit, trimmed to what the regenerator reads,
    replayed commit by commit with their dates."""
    repo = tmp_path_factory.mktemp("upstream") / "Fuser"
    repo.mkdir()
    env = {**os.environ, "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull}
    for args in (["init", "-q", "-b", "main"],
                 ["am", "-q", "--keep", "--committer-date-is-author-date", str(FIXTURE / "history.mbox")]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return repo


def test_the_regenerator_reads_nvfusers_own_files(upstream: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed catalog, narrowed to the versions the fixture covers, is what the regenerator writes from
    nvFuser's own options.cpp, options.h, version file, gate read sites and frontend files (their real layout:
    entries split over lines, enums with a base type and comments)."""
    order = [version for version, _ in data.VERSIONS]
    start = order.index(FROM)

    def narrowed(row: tuple[Any, ...]) -> tuple[Any, ...] | None:
        kind, name, effect, since, until, requires_args, description = row
        if until is not None and order.index(until) < start:
            return None
        return kind, name, effect, order[max(order.index(since), start)], until, requires_args, description

    expected = tuple(row for row in map(narrowed, data.OPTIONS) if row is not None)
    held = {(kind, name) for kind, name, *_ in expected}
    real = load("catalog_notes")
    window = notes(OPTIONS={k: v for k, v in real.OPTIONS.items() if k in held},
                   GATES={k: v for k, v in real.GATES.items() if k in held},
                   FRONTEND_OPS=real.FRONTEND_OPS, NIGHTLY=real.NIGHTLY)
    monkeypatch.setattr(regen, "FIRST", FROM)
    text = regen.generate(upstream, notes=window)
    # The replayed commits have hashes of their own; each names its upstream commit in its message.
    for line in git(upstream, "log", "--format=%H %b").split("\n"):
        if line.strip():
            replayed, upstream_commit = re.fullmatch(r"(\w+) upstream (\w+)", line.strip()).groups()  # type: ignore[union-attr]
            text = text.replace(replayed[:12], upstream_commit[:12])
    found: dict[str, Any] = {}
    exec(compile(text, "generated", "exec"), found)
    assert found["VERSIONS"] == data.VERSIONS[start:]
    assert found["OPTIONS"] == expected
    assert found["OP_GATES"] == tuple(row for row in data.OP_GATES if (row[0], row[1]) in held)
    assert found["NIGHTLY_DATES"] == data.NIGHTLY_DATES
    source = re.search(r"through .*?\)\.", data.__doc__ or "", re.DOTALL)
    assert source is not None and source[0] in found["__doc__"]


def test_the_fixture_says_where_it_comes_from() -> None:
    # Fuser is BSD-3-Clause: its license travels with the copy, and every copied file keeps its own header.
    readme = (FIXTURE / "README.md").read_text(encoding="utf-8")
    assert "BSD-3-Clause" in readme and "81c4b22fd750" in readme
    assert "Redistribution and use in source and binary forms" in (FIXTURE / "LICENSE").read_text(encoding="utf-8")
    mbox = (FIXTURE / "history.mbox").read_text(encoding="utf-8")
    created = re.findall(r"^\+\+\+ b/(\S+)\n@@ -0,0 \+1,?\d* @@\n((?:\+.*\n){5})", mbox, re.MULTILINE)
    sources = [(path, head) for path, head in created if path.endswith((".cpp", ".h"))]
    assert sources and all("SPDX-License-Identifier: BSD-3-Clause" in head for _, head in sources), sources


# --- a small nvFuser history ---------------------------------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_COMMITTER_DATE": "2026-01-02T03:04:05", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def commit(repo: Path, version: str, enable: dict[str, str], disable: dict[str, str],
           files: dict[str, str] | None = None, message: str = "c") -> None:
    """Write the version file, options.cpp/options.h with these names (name -> enumerator), and ``files``; commit."""
    (repo / "python").mkdir(parents=True, exist_ok=True)
    (repo / "python" / "version.txt").write_text(version + "\n")
    entries = [f'  {{"{n}", EnableOption::{e}}},' for n, e in enable.items()]
    entries += [f'  {{"{n}",\n   DisableOption::{e}}},' for n, e in disable.items()]  # split over lines, as nvFuser
    (repo / "csrc").mkdir(exist_ok=True)
    (repo / "csrc" / "options.cpp").write_text("const map available_options = {\n" + "\n".join(entries) + "\n};\n")
    (repo / "csrc" / "options.h").write_text(
        "enum class EnableOption {\n" + "".join(f"  {e}, //! doc\n" for e in enable.values()) + "  EndOfOption\n};\n"
        "enum class DisableOption {\n" + "".join(f"  {e},\n" for e in disable.values()) + "  EndOfOption\n};\n")
    for path, text in (files or {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


TRANSLATE = 'printer_.generateOperation("fd.ops.matmul", ...); "fd.ops.linear"'
READS = "if (isOptionEnabled(EnableOption::FuseMatmul)) {}"


@pytest.fixture
def fuser(tmp_path: Path) -> Path:
    """0.2.22 (ignored), 0.2.23, 0.2.24 (a name moves between lists mid-range), 0.2.25, then a commit that removes a
    name without a version bump."""
    repo = tmp_path / "Fuser"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = {"fuse_matmul": "FuseMatmul"}
    files = {"python/python_direct/python_translate.cpp": TRANSLATE, "csrc/scheduler/matmul_utils.cpp": READS}
    commit(repo, "0.2.22", {**base, "ancient": "Ancient"}, {}, files)
    commit(repo, "0.2.23", {**base, "old_opt": "OldOpt", "moved": "Moved"}, {"fma": "Fma"})
    commit(repo, "0.2.24", {**base, "moved": "Moved"}, {"fma": "Fma"})
    commit(repo, "0.2.24", {**base, "mid_opt": "MidOpt"}, {"fma": "Fma", "moved": "Moved"}, message="move")
    commit(repo, "0.2.24", {**base, "mid_opt": "MidOpt"}, {"fma": "Fma", "moved": "Moved"},
           {"csrc/unrelated.cpp": "int x;"}, message="a commit that touches neither options nor versions")
    commit(repo, "0.2.25", {**base, "mid_opt": "MidOpt"}, {"fma": "Fma", "moved": "Moved"})
    commit(repo, "0.2.25", base, {"fma": "Fma", "moved": "Moved"}, message="remove mid_opt")
    return repo


def notes(**changes: object) -> types.ModuleType:
    module = types.ModuleType("notes")
    module.OPTIONS = {  # type: ignore[attr-defined]
        ("enable", "fuse_matmul"): ("codegen", False, "Fuse matmuls"),
        ("enable", "old_opt"): ("debug", False, "Old"),
        ("enable", "moved"): ("runtime", False, 'Moved to "disable"'),
        ("enable", "mid_opt"): ("runtime", True, "Added mid-range " + "x" * 80),
        ("disable", "fma"): ("codegen", False, "No FMA"),
        ("disable", "moved"): ("runtime", False, "Moved"),
    }
    module.FRONTEND_OPS = {"linear": (("LinearOp",), ("python/python_direct/python_translate.cpp",)),  # type: ignore[attr-defined]
                           "matmul": (("MatmulOp",), ("python/python_direct/python_translate.cpp",))}
    module.LEGACY = "python/python_frontend/python_bindings.cpp"  # type: ignore[attr-defined]
    module.GATES = {  # type: ignore[attr-defined]
        ("enable", "fuse_matmul"): (("LinearOp", "MatmulOp", "MmaOp"), ("csrc/scheduler/matmul_utils.cpp",)),
    }
    module.NIGHTLY = {("enable", "mid_opt"): ("2026-01-02", "2026-01-02")}  # type: ignore[attr-defined]
    for name, value in changes.items():
        setattr(module, name, value)
    return module


def generated(repo: Path, module: types.ModuleType) -> dict[str, object]:
    text = regen.generate(repo, notes=module)
    namespace: dict[str, object] = {}
    exec(compile(text, "generated", "exec"), namespace)
    return namespace


def test_versions_and_ranges_from_the_history(fuser: Path) -> None:
    found = generated(fuser, notes())
    bumps = git(fuser, "log", "--reverse", "--format=%H %s", "main").split("\n")
    assert [v for v, _ in found["VERSIONS"]] == ["0.2.23", "0.2.24", "0.2.25"]  # type: ignore[attr-defined]
    assert found["VERSIONS"][0][1] == bumps[1][:12]  # type: ignore[index]
    assert found["OPTIONS"] == (
        ("disable", "fma", "codegen", "0.2.23", None, False, "No FMA"),
        ("disable", "moved", "runtime", "0.2.24", None, False, "Moved"),
        ("enable", "fuse_matmul", "codegen", "0.2.23", None, False, "Fuse matmuls"),
        ("enable", "mid_opt", "runtime", "0.2.24", "0.2.25", True, "Added mid-range " + "x" * 80),
        ("enable", "moved", "runtime", "0.2.23", "0.2.24", False, 'Moved to "disable"'),
        ("enable", "old_opt", "debug", "0.2.23", "0.2.23", False, "Old"),
    )
    assert found["OP_GATES"] == (("enable", "fuse_matmul", ("linear", "matmul"), "csrc/scheduler/matmul_utils.cpp"),)
    assert found["NIGHTLY_DATES"] == (("enable", "mid_opt", "2026-01-02", "2026-01-02"),)
    assert "FRONTEND_OPS" not in found  # the tools' notes keep it; nvscope does not use it
    doc = str(found["__doc__"])
    newest = git(fuser, "rev-parse", "HEAD").strip()
    assert f"through 0.2.25 (commit {newest[:12]},\nthe newest commit read, 2026-01-02; no version bump" in doc


def test_the_output_keeps_the_files_layout(fuser: Path) -> None:
    text = regen.generate(fuser, notes=notes())
    assert all(len(line) <= 120 for line in text.splitlines())
    assert '    ("disable", "fma", "codegen", "0.2.23", None, False, "No FMA"),\n' in text  # fits: one line
    assert '    (\n        "enable",\n        "mid_opt",\n' in text  # too long: one element per line
    assert "\"Moved to \\\"disable\\\"\"" in text
    assert regen.generate(fuser, notes=notes()) == text  # deterministic


@pytest.mark.parametrize(("change", "message"), [
    ({"OPTIONS": {k: v for k, v in notes().OPTIONS.items() if k != ("enable", "mid_opt")}},
     r"does not describe; add them to its OPTIONS: enable mid_opt"),
    ({"OPTIONS": {**notes().OPTIONS, ("enable", "ancient"): ("debug", False, "Older than 0.2.23")}},
     r"no covered nvFuser version has; remove them: enable ancient"),
    ({"OPTIONS": {**notes().OPTIONS, ("disable", "fma"): ("fast", False, "No FMA")}}, r"disable fma: bad effect"),
    ({"OPTIONS": {**notes().OPTIONS, ("disable", "fma"): ("codegen", False, "y" * 111)}},
     r'too long for a 120-character line: "y+", \(shorten it in tools/catalog_notes.py\)'),
    ({"GATES": {("enable", "fuse_matmul"): (("MatmulOp",), ("csrc/elsewhere.cpp",))}},
     r"EnableOption::FuseMatmul\) is read in csrc/scheduler/matmul_utils.cpp at \w+, which .* does not cite"),
    ({"GATES": {("enable", "nope"): (("MatmulOp",), ("csrc/scheduler/matmul_utils.cpp",))}}, r"not an option"),
    ({"GATES": {("disable", "fma"): (("MmaOp",), ("csrc/x.cpp",))}}, r"no frontend op in FRONTEND_OPS makes"),
    ({"FRONTEND_OPS": {"matmul": (("MatmulOp",), ("python/python_direct/python_translate.cpp",)),
                       "sum": (("ReductionOp",), ("python/python_direct/python_translate.cpp",))}},
     r"frontend op 'sum': python/python_direct/python_translate.cpp does not name it"),
    ({"FRONTEND_OPS": {"matmul": (("MatmulOp",), ("python/gone.cpp",))}}, r"no covered nvFuser version has python/"),
    ({"NIGHTLY": {("enable", "mid_opt"): ("2026-01-03", None)}},
     r"NIGHTLY \('enable', 'mid_opt'\): added on 2026-01-03, but nvFuser's history has it from \w+, committed "
     r"2026-01-02"),
    ({"NIGHTLY": {("enable", "mid_opt"): (None, "2026-02-01")}}, r"removed on 2026-02-01, but nvFuser's history "
                                                                 r"removes it on 2026-01-02"),
    ({"NIGHTLY": {("disable", "fma"): (None, "2026-01-02")}}, r"removed on 2026-01-02, but the newest commit read "
                                                              r"still has it"),
    ({"NIGHTLY": {("enable", "nope"): ("2026-01-02", None)}}, r"NIGHTLY dates \('enable', 'nope'\), which is not an"),
    ({"NIGHTLY": {("enable", "mid_opt"): ("20260102", None)}}, r"'20260102' is not a day as YYYY-MM-DD"),
    ({"NIGHTLY": {("enable", "mid_opt"): (None, None)}}, r"give a date, or remove the entry"),
])
def test_what_the_notes_must_say(fuser: Path, change: dict[str, object], message: str) -> None:
    with pytest.raises(regen.RegenError, match=message):
        regen.generate(fuser, notes=notes(**change))


def test_a_new_read_site_stops_the_regeneration(fuser: Path) -> None:
    # nvFuser starts reading a gated option somewhere else: the gate must be read again before it is trusted.
    commit(fuser, "0.2.25", {"fuse_matmul": "FuseMatmul"}, {"fma": "Fma", "moved": "Moved"},
           {"csrc/scheduler/pointwise.cpp": READS})
    with pytest.raises(regen.RegenError, match=r"read in csrc/scheduler/pointwise.cpp"):
        regen.generate(fuser, notes=notes())


def test_a_name_missing_in_a_middle_version_is_refused(fuser: Path) -> None:
    commit(fuser, "0.2.26", {"fuse_matmul": "FuseMatmul", "old_opt": "OldOpt"}, {"fma": "Fma", "moved": "Moved"})
    with pytest.raises(regen.RegenError, match=r"'old_opt' is missing in 0.2.24, 0.2.25 between 0.2.23 and 0.2.26"):
        regen.generate(fuser, notes=notes())


def test_a_name_mapped_to_an_undeclared_enumerator_is_refused(fuser: Path) -> None:
    (fuser / "csrc" / "options.cpp").write_text('{"typo", EnableOption::NotDeclared},\n')
    git(fuser, "commit", "-q", "-am", "bad")
    with pytest.raises(regen.RegenError, match=r"maps 'typo' to EnableOption::NotDeclared, which options.h does not"):
        regen.generate(fuser, notes=notes())


def test_main_prints_and_checks(fuser: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    real = regen.generate
    monkeypatch.setattr(regen, "generate", lambda path, ref: real(path, ref, notes()))
    target = tmp_path / "nvscope" / "_core" / "_catalog_data.py"
    target.parent.mkdir(parents=True)
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "DATA", target)
    assert regen.main([str(fuser)]) == 0
    text = capsys.readouterr().out
    target.write_text(text)
    assert regen.main([str(fuser), "--check"]) == 0
    assert capsys.readouterr().out == "nvscope/_core/_catalog_data.py is up to date\n"
    target.write_text(text.replace('"No FMA"', '"edited by hand"'))
    assert regen.main([str(fuser), "--check"]) == 1
    diff = capsys.readouterr().out
    assert '-    ("disable", "fma", "codegen", "0.2.23", None, False, "edited by hand"),' in diff
    assert '+    ("disable", "fma", "codegen", "0.2.23", None, False, "No FMA"),' in diff


def test_main_reports_a_bad_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert regen.main([str(tmp_path / "nowhere")]) == 2
    assert "regen_catalog: git rev-parse" in capsys.readouterr().err
