"""Default sharing for whole programs and test runs (issue 38): ``nvscope run --share-defaults``, the pytest plugin's
``--nv-share-defaults`` and ``@pytest.mark.nv_options(share=True)``, and what ``nvscope doctor`` says about
``NVSCOPE_SHARE=all``. Real processes over the Thunder double; observed: the fake nvFuser's compiles, the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.filterwarnings("default::nvscope.NvscopeWarning")

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (TESTS, REPO)))
    env.update(extra)
    return env


def nvscope_cmd(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nvscope", *args], env=clean_env(**extra), cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# --- nvscope run --share-defaults -----------------------------------------------------------------------------------

# Four fusions of one definition, on the main thread; then the same program as a child process (``--child``), which
# runs them in a new thread. Each process prints what its fake nvFuser compiled, as JSON.
PROGRAM = """\
import json, os, subprocess, sys, threading
import pytest
from thunder_double import ThunderDouble
import nvscope.thunder

double = ThunderDouble(pytest.MonkeyPatch())
nvscope.thunder.install()
fusions = [double.make_wrapper(f"nvFusion{i}") for i in range(4)]

def step():
    for fusion in fusions:
        fusion(double.fe.Tensor((1.0,)))

child = "--child" in sys.argv
if child:
    thread = threading.Thread(target=step)
    thread.start()
    thread.join()
else:
    step()
print(json.dumps({"child": child, "compiles": len(double.fe.COMPILES), "share": os.environ.get("NVSCOPE_SHARE"),
                  "options": nvscope.current_options().as_shell()}), flush=True)
if not child:
    subprocess.run([sys.executable, __file__, "--child"], check=True)
"""


def reports(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_run_share_defaults_shares_in_the_program_and_its_children(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = nvscope_cmd("run", "--share-defaults", "prog.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    parent, child = reports(result.stdout)
    # One compile for four fusions, on the main thread and in the child's new thread (NVSCOPE_SHARE=all there).
    assert parent == {"child": False, "compiles": 1, "share": "all", "options": ""}
    assert child == {"child": True, "compiles": 1, "share": "all", "options": ""}
    lines = result.stderr.splitlines()
    assert "nvscope run: fusions at their own options share compiled definitions (--share-defaults): each distinct " \
           "definition compiles once" in lines
    assert "4 fusion executions, 1 new partitions compiled, 3 shared a definition compiled for another fusion" in lines
    assert "Warning" not in result.stderr  # it changes no option


def test_run_without_share_defaults_compiles_per_fusion(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = nvscope_cmd("run", "prog.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [(r["compiles"], r["share"]) for r in reports(result.stdout)] == [(4, None), (4, None)]
    assert "share compiled definitions" not in result.stderr


def test_run_share_defaults_with_options_keeps_them_and_shares_the_rest(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    result = nvscope_cmd("run", "--share-defaults", "--enable", "fuse_matmul", "--fusions", "forward/nvFusion0*",
                         "prog.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # nvFusion0 under fuse_matmul (its own compile), the other three share one default definition. The child runs
    # them in a new thread: the run's options reach its main thread only, NVSCOPE_SHARE=all every thread, so all four
    # share one default definition there.
    assert [r["compiles"] for r in reports(result.stdout)] == [2, 1]


def test_run_share_defaults_under_share_0_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("raise SystemExit('ran')\n")
    result = nvscope_cmd("run", "--share-defaults", "prog.py", cwd=tmp_path, NVSCOPE_SHARE="0")
    assert result.returncode == 2
    assert result.stderr == ("nvscope run: error: --share-defaults needs compile sharing, which NVSCOPE_SHARE=0 in the "
                             "environment turns off: unset NVSCOPE_SHARE, or drop --share-defaults\n")


# --- the pytest plugin ------------------------------------------------------------------------------------------------

TESTS_UNDER_THE_PLUGIN = """
    import pytest
    import nvscope
    import nvscope.thunder
    from thunder_double import ThunderDouble, reset_nvscope


    @pytest.fixture
    def run(monkeypatch, request):
        reset_nvscope()
        double = ThunderDouble(monkeypatch)
        nvscope.thunder.install()
        fusions = [double.make_wrapper(f"nvFusion{i}") for i in range(4)]

        def compiles():
            for fusion in fusions:
                fusion(double.fe.Tensor((1.0,)))
            return len(double.fe.COMPILES)

        yield compiles
        reset_nvscope()


    @pytest.fixture
    def session(request):
        return request.config.getoption("nv_share_defaults")


    def test_unmarked(run, session):
        assert run() == (1 if session else 4)
        assert nvscope.current_options() == nvscope.OptionSet()
        assert not nvscope.is_development_mode()  # sharing alone leaves development mode as it was


    @pytest.mark.nv_options(share=True)
    def test_marked(run):
        assert run() == 1


    @pytest.mark.nv_options(share=False)
    def test_marked_off(run):
        assert run() == 4


    @pytest.mark.nv_options(enable=["fuse_matmul"], fusions=["forward/nvFusion0*"])
    def test_selective_marker(run, session):
        assert run() == (2 if session else 4)  # nvFusion0 under its option; the rest shared or Thunder's own
"""




@pytest.mark.parametrize("flags", [(), ("--nv-share-defaults",)])
def test_pytest_share_defaults_flag_and_marker(plugin_pytester: pytest.Pytester, flags: tuple[str, ...]) -> None:
    plugin_pytester.makepyfile(TESTS_UNDER_THE_PLUGIN)
    result = plugin_pytester.runpytest_subprocess("-p", "_nvscope_pytestplugin", "-p", "no:cacheprovider", *flags)
    result.assert_outcomes(passed=4)
    header = [line for line in result.stdout.lines if line.startswith("nvscope:")]
    assert header == (["nvscope: fusions at their own options share compiled definitions (--nv-share-defaults, "
                       "around each test)"] if flags else ["nvscope: no options"])
    assert "DevelopmentModeWarning" not in result.stdout.str()


def test_pytest_share_defaults_under_share_0_is_a_usage_error(plugin_pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_SHARE", "0")
    plugin_pytester.makepyfile("def test_never(): raise AssertionError('ran')")
    result = plugin_pytester.runpytest_subprocess("-p", "_nvscope_pytestplugin", "--nv-share-defaults")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--nv-share-defaults needs compile sharing, which NVSCOPE_SHARE=0*"])


# --- nvscope doctor ---------------------------------------------------------------------------------------------------

def test_doctor_says_when_share_all_is_in_force(tmp_path: Path) -> None:
    shared = nvscope_cmd("doctor", cwd=tmp_path, NVSCOPE_SHARE="all")
    assert shared.returncode == 0, shared.stderr
    assert ("ok    NVSCOPE_SHARE=all: fusions at their own options share compiled definitions, program-wide (every "
            "thread; read when nvscope was imported)") in shared.stdout.splitlines()
    plain = nvscope_cmd("doctor", cwd=tmp_path)
    assert "NVSCOPE_SHARE=all" not in plain.stdout


def test_doctor_lists_what_share_all_could_not_install(tmp_path: Path) -> None:
    # A Thunder nvscope cannot drive, found by doctor's own `importlib.util.find_spec` before it imports it: the
    # install at its import (NVSCOPE_SHARE=all's import hook) is refused, and doctor says so.
    executors = tmp_path / "site" / "thunder" / "executors"
    executors.mkdir(parents=True)
    (executors.parent / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (executors / "__init__.py").write_text("")
    (executors / "nvfuserex_impl.py").write_text("")
    (executors / "torch_autograd.py").write_text("class ThunderFunction:\n    pass\n")
    env = clean_env(NVSCOPE_SHARE="all")
    env["PYTHONPATH"] = os.pathsep.join((str(tmp_path / "site"), env["PYTHONPATH"]))
    result = subprocess.run([sys.executable, "-m", "nvscope", "doctor"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr  # a warning: the core works
    lines = result.stdout.splitlines()
    (warn,) = [line for line in lines if line.startswith("warn  NVSCOPE_SHARE=all: an adapter could not install")]
    assert "UnsupportedError('nvscope cannot drive Thunder 0.0.1" in warn
    assert lines[lines.index(warn) + 1].startswith("fix:  the fusions it would reach run Thunder's own path, unshared")

