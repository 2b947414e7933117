"""`nvscope.check` on what users write: environments built in a name and given later, argument lists that run `env`
or a shell, shell defaults, literal parameter defaults, Dockerfile and Makefile variants; allowances only in real
comments; a tree with no file to read said plainly. Each case found, and the near miss that sets nothing is not."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import nvscope
from nvscope import CheckResult
from nvscope.cli import main

RANGE = "==0.2.36"  # results do not depend on an installed nvFuser


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run(*paths: Path | str) -> CheckResult:
    return nvscope.check(list(paths), nvfuser=RANGE)


def found(result: CheckResult) -> list[tuple[str, int, str, tuple[str, ...], str]]:
    """(path, line, construct, options, kind) of the uses found."""
    return [(f.path, f.line, f.construct, f.options, f.kind) for f in result.findings if f.kind != "name"]


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # paths are shown relative to the working folder; no pyproject.toml above


CASES = [
    # An environment built in a name, then given to the program: reported where it is written.
    ("env-name", """
        import subprocess
        env = {"NVFUSER_ENABLE": "fuse_matmul"}
        subprocess.run(["python", "t.py"], env=env)
        """, [(2, "env= mapping", ("enable:fuse_matmul",))]),
    ("update-const", """
        import os
        CONST = {"PATH": "/bin", "NVFUSER_DISABLE": "fma"}

        def setup():
            os.environ.update(CONST)
        """, [(2, "os.environ.update", ("disable:fma",))]),
    ("spread-extra", """
        import os, subprocess
        extra = {"NVFUSER_ENABLE": "fuse_matmul"}
        subprocess.run(["python", "t.py"], env={**os.environ, **extra})
        """, [(2, "env= mapping", ("enable:fuse_matmul",))]),
    ("spread-extra-bound", """
        import os, subprocess
        extra = {"NVFUSER_DISABLE": "kernel_reuse"}
        env = {**os.environ, **extra}
        """, [(2, "{**os.environ, ...}", ("disable:kernel_reuse",))]),
    ("copy-update", """
        import os
        OPTIONS = {"NVFUSER_ENABLE": "fast_math"}
        env = os.environ.copy()
        env.update(OPTIONS)
        """, [(2, "env.update", ("enable:fast_math",))]),
    ("patch-dict-name", """
        import os
        from unittest import mock
        ENV = {"NVFUSER_DISABLE": "fma"}

        @mock.patch.dict(os.environ, ENV)
        def test_a(): ...
        """, [(3, "mock.patch.dict", ("disable:fma",))]),
    # Argument lists that run `env` or a shell.
    ("argv-env", """
        import subprocess
        subprocess.run(["env", "-i", "NVFUSER_ENABLE=fuse_matmul", "OTHER=1", "NVFUSER_DISABLE=fma", "python", "t.py"])
        subprocess.run(["/usr/bin/env", "NVSCOPE_DEV=1", "python", "t.py", "NVFUSER_ENABLE=not_env_s"])
        """, [(2, "env command", ("enable:fuse_matmul",)), (2, "env command", ("disable:fma",)),
              (3, "env command", ("NVSCOPE_DEV=1",))]),
    ("argv-shell", """
        import subprocess
        subprocess.run(["bash", "-c", "NVFUSER_ENABLE=fuse_matmul python t.py"])
        subprocess.check_call(("sh", "-ec", "export NVFUSER_DISABLE=fma; nvscope run --enable fast_math t.py"))
        """, [(2, "shell assignment", ("enable:fuse_matmul",)), (3, "shell export", ("disable:fma",)),
              (3, "nvscope run", ("enable:fast_math",))]),
]


@pytest.mark.parametrize(("source", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_python_settings_users_write_are_found(tmp_path: Path, source: str, expected: list[tuple[object, ...]]) \
        -> None:
    write(tmp_path, "mod.py", source)
    result = run(tmp_path)
    assert [(line, construct, options) for _, line, construct, options, _ in found(result)] == expected
    assert result.exit_code == 1


def test_a_literal_default_is_a_setting_a_callers_value_plumbing(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", """
        import os
        from nvscope import nv_options

        def bench(step, enable=("fuse_matmul",)):
            with nv_options(enable=enable):
                step()

        def launch(*, disable="fma"):
            os.environ["NVFUSER_DISABLE"] = disable

        def forward(enable=None, disable=()):
            return nv_options(enable=enable, disable=disable)

        def rebound(enable=("fast_math",)):
            enable = [e for e in enable if e]
            return nv_options(enable=enable)
        """)
    result = run(tmp_path)
    assert [(line, options, kind) for _, line, _, options, kind in found(result)] == [
        (5, ("enable:fuse_matmul",), "option"), (9, ("disable:fma",), "option"), (12, (), "plumbing"),
        (16, (), "plumbing")]  # the body rebinds the parameter: not the default that reaches the call
    assert [f.line for f in result.failing] == [5, 9]


NOT_SETTING = [
    # A dict holding the variables that never reaches an environment is a table, not a setting.
    """
    import os
    NAMES = {"NVFUSER_ENABLE": "enable", "NVFUSER_DISABLE": "disable"}
    table = {}
    table.update(NAMES)
    print(NAMES, os.environ.get("NVFUSER_ENABLE"))
    """,
    # `env` and a shell that only print the setting; a list that is not a command.
    """
    import subprocess
    subprocess.run(["echo", "NVFUSER_ENABLE=fuse_matmul"])
    subprocess.run(["bash", "-c", "echo NVFUSER_DISABLE=fma"])
    subprocess.run(["env", "python", "t.py", "NVFUSER_ENABLE=fuse_matmul"])
    WORDS = ["NVFUSER_ENABLE=fuse_matmul"]
    """,
    # Defaults that set nothing: the caller's value is forwarded (plumbing, never failing).
    """
    import os
    import thunder
    from nvscope import nv_options

    def f(fn, enable=(), disable=None, dev="", linear=True):
        os.environ["NVSCOPE_DEV"] = dev
        thunder.jit(fn, nv_enable_linear=linear)
        return nv_options(enable=enable, disable=disable)
    """,
]


@pytest.mark.parametrize("source", NOT_SETTING)
def test_near_misses_are_not_findings(tmp_path: Path, source: str) -> None:
    write(tmp_path, "mod.py", source)
    result = run(tmp_path)
    assert [f for f in result.findings if f.kind != "plumbing"] == [] and result.exit_code == 0


def test_shell_defaults_assign_and_a_fallback_does_not(tmp_path: Path) -> None:
    write(tmp_path, "bench.sh", """
        #!/bin/bash
        : "${NVFUSER_DISABLE:=fma}"
        : ${NVFUSER_ENABLE=fuse_matmul,fast_math}
        echo "${NVFUSER_ENABLE:-fuse_matmul}" "${NVSCOPE_DEV:-1}"
        python t.py --x "${NVFUSER_DISABLE:=${OLD}}"
        """)
    assert [(line, construct, options, kind) for _, line, construct, options, kind in found(run(tmp_path))] == [
        (2, "shell default", ("disable:fma",), "option"),
        (3, "shell default", ("enable:fuse_matmul", "enable:fast_math"), "option"),
        (5, "shell default", (), "dynamic")]


VARIANTS = [
    ("Dockerfile-gpu", "FROM x\nENV NVFUSER_ENABLE=fuse_matmul\n", "Dockerfile ENV"),
    ("Dockerfile_cuda", "FROM x\nENV NVFUSER_ENABLE=fuse_matmul\n", "Dockerfile ENV"),
    ("docker/Containerfile.dev", "FROM x\nENV NVFUSER_ENABLE=fuse_matmul\n", "Dockerfile ENV"),
    ("Makefile.inc", "NVFUSER_ENABLE := fuse_matmul\n", "Makefile variable"),
    ("GNUmakefile-local", "NVFUSER_ENABLE := fuse_matmul\n", "Makefile variable"),
]


@pytest.mark.parametrize(("name", "text", "construct"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_dockerfile_and_makefile_variants_are_read_walked_or_named(tmp_path: Path, name: str, text: str,
                                                                   construct: str) -> None:
    write(tmp_path, name, text)
    expected = [(name, text.count("\n"), construct, ("enable:fuse_matmul",), "option")]
    assert found(run(tmp_path)) == expected
    assert found(run(name)) == expected  # named on the command line


def test_a_python_module_or_a_document_named_like_a_makefile_is_not_read_as_one(tmp_path: Path) -> None:
    write(tmp_path, "makefile_gen.py", "RULE = 'NVFUSER_ENABLE := fuse_matmul'\n")
    write(tmp_path, "Dockerfile.md", "Set it with `ENV NVFUSER_ENABLE=fuse_matmul`.\n")
    assert found(run(tmp_path)) == []


def test_an_allowance_inside_a_string_literal_allows_nothing(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", '''
        import os
        note = "# nvscope: allow"; os.environ["NVFUSER_ENABLE"] = "fuse_matmul"
        DOC = """
        # nvscope: allow
        """; os.environ["NVFUSER_DISABLE"] = "fma"
        os.environ["NVFUSER_DISABLE"] = "kernel_reuse"  # nvscope: allow a real comment, "quoted"
        class Step:
            HELP = """
            # nvscope: allow
            """
            os.environ["NVFUSER_DISABLE"] = "fma"
        x = ("""
        """); os.environ["NVFUSER_ENABLE"] = "fast_math"  # nvscope: allow after a string
        ''')
    write(tmp_path, "run.sh", 'echo "# nvscope: allow"; export NVFUSER_ENABLE=fast_math\n'
                              "export NVFUSER_DISABLE=fma  # nvscope: allow real\n")
    result = run(tmp_path)
    assert [(f.path, f.line, f.allowed) for f in result.findings] == [
        ("mod.py", 2, None), ("mod.py", 5, None), ("mod.py", 6, "comment"), ("mod.py", 11, None),
        ("mod.py", 13, "comment"), ("run.sh", 1, None), ("run.sh", 2, "comment")]
    assert [f.reason for f in result.findings if f.allowed] == ['a real comment, "quoted"', "after a string", "real"]


def test_a_tree_with_no_file_to_read_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    write(tmp_path, "docs/README.md", "NVFUSER_ENABLE=fuse_matmul\n")
    for folder in ("empty", "docs"):
        assert main(["check", folder]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"nvscope check: no files to check in {folder}: none is Python, a notebook, ")
        assert "0 files" not in out
    write(tmp_path, "docs/a.py", "x = 1\n")  # a file read, with nothing in it: the usual summary
    assert main(["check", "docs"]) == 0
    assert capsys.readouterr().out.endswith("; 1 files (0 read), 0 notes\n")


def test_github_annotations_and_json_on_stdout_are_refused_together(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "bench.py", "import nvscope\nnvscope.nv_options(enable=['fuse_matmul'])\n")
    for json_flag in (["--json", "-"], ["--json"], ["--json=-"]):
        assert main(["check", "--format", "github", "bench.py", *json_flag]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == ("nvscope check: error: --format github and --json both print to standard "
                                     "output: write the JSON to a file (--json=report.json)\n")
    assert main(["check", "--format", "github", f"--json={tmp_path / 'report.json'}", "bench.py"]) == 1
    assert capsys.readouterr().out.startswith("::error file=bench.py,line=2,col=1,")
    assert (tmp_path / "report.json").is_file()
