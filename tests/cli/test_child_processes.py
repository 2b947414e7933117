"""``nvscope run`` carries its options to the Python processes its program starts (nvscope/_cli/_child_carry.py).

Real child processes on CPU: ``subprocess``, multiprocessing (spawn, forkserver, fork), torchrun's workers. Children
run fusions through the fake nvFuser frontend (tests/fake_nvfuser_frontend.py, copied in as ``nvfuser_direct``), so
the per-process audit summary has rows to show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from nvscope import cli

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "nvscope" / "_child"
OPTIONS = "NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=fma"

# A child program: runs one fusion, then says what it saw.
CHILD = """\
import os
import nvscope
import nvfuser_direct as fe

with fe.FusionDefinition() as fd:
    fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
    fd.ops.linear(0)  # a fusion fuse_matmul can affect (the catalog gates it to matmul/linear)
fd.execute([1.0])
# One write per line (print writes the text and the newline apart): workers sharing a pipe cannot interleave it.
os.write(1, f"child {os.getpid()}: {nvscope.current_options().as_shell() or '(none)'} "
            f"dev={nvscope.is_development_mode()}\\n".encode())
"""


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def clean_env(path: Sequence[Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "PYTHON", "NVFUSER_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    env.update(extra)
    return env


def python(*args: str, cwd: Path, path: Sequence[Path], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=clean_env(path, **extra), cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory with the fake nvFuser frontend as ``nvfuser_direct`` and the child program as ``child.py``."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(REPO / "tests" / "fake_nvfuser_frontend.py", site / "nvfuser_direct.py")
    write(tmp_path / "child.py", CHILD)
    return site


def tagged(stderr: str, pid: str) -> list[str]:
    """The lines a child tagged with its pid, tag removed."""
    return [line.split("] ", 1)[1] for line in stderr.splitlines() if re.match(rf"\[pid {pid}( RANK=\d+)?\] ", line)]


def child_pids(stdout: str) -> dict[str, str]:
    """{pid: the rest of the line} for every "child PID: ..." line."""
    return dict(m.groups() for m in re.finditer(r"^child (\d+): (.*)$", stdout, flags=re.MULTILINE))


def assert_child_summary(stderr: str, pid: str) -> None:
    lines = tagged(stderr, pid)
    assert lines[0] == f"nvscope run: options {OPTIONS}", stderr
    assert re.fullmatch(rf"call/\S+ +{OPTIONS} +call +new +MainThread +1", lines[3]), lines
    assert lines[4] == "1 fusion executions, 1 new partitions compiled"


# --- subprocess ---------------------------------------------------------------------------------------------------

PARENT = """\
import os, subprocess, sys
import nvscope

print("parent:", nvscope.current_options().as_shell() or "(none)", flush=True)
subprocess.run([sys.executable, "child.py"], check=True)
"""


def test_a_subprocess_gets_the_options_and_prints_its_own_summary(tmp_path: Path, site: Path) -> None:
    write(tmp_path / "parent.py", PARENT)
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "--disable", "fma", "parent.py",
                    cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    ((pid, seen),) = child_pids(result.stdout).items()
    assert result.stdout.startswith(f"parent: {OPTIONS}\n")
    assert seen == f"{OPTIONS} dev=True"
    assert_child_summary(result.stderr, pid)
    # The parent's own summary is as before: untagged, about its own process.
    assert result.stderr.endswith(f"nvscope run: options {OPTIONS}\nnvscope audit: no nvFuser fusion executed\n"
                                  "nvscope run: the program imported neither Thunder nor nvFuser, so no fusion could "
                                  "run in this process\n")
    # Without nvscope run, the same program's child gets no options and prints nothing of nvscope's.
    plain = python("parent.py", cwd=tmp_path, path=[site, REPO])
    assert plain.returncode == 0, plain.stderr
    assert list(child_pids(plain.stdout).values()) == ["(none) dev=False"]
    assert plain.stderr == ""


def test_a_child_given_an_environment_of_its_own_gets_no_options(tmp_path: Path, site: Path) -> None:
    write(tmp_path / "parent.py", f"""\
        import os, subprocess, sys
        subprocess.run([sys.executable, "child.py"], env=dict(os.environ, EXTRA="1"), check=True)  # inherited
        subprocess.run([sys.executable, "child.py"], env={{"PYTHONPATH": {str(site) + os.pathsep + str(REPO)!r}}},
                       check=True)  # a new environment
    """)
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "--disable", "fma", "parent.py",
                    cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    (inherited, inherited_seen), (fresh, fresh_seen) = child_pids(result.stdout).items()
    assert (inherited_seen, fresh_seen) == (f"{OPTIONS} dev=True", "(none) dev=False")
    assert_child_summary(result.stderr, inherited)
    assert tagged(result.stderr, fresh) == []


def test_no_audit_reaches_children(tmp_path: Path, site: Path) -> None:
    write(tmp_path / "parent.py", PARENT)
    result = python("-m", "nvscope", "run", "--no-audit", "--enable", "fuse_matmul", "--disable", "fma", "parent.py",
                    cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    assert list(child_pids(result.stdout).values()) == [f"{OPTIONS} dev=True"]
    assert result.stderr == ""


def test_a_child_that_imports_neither_thunder_nor_nvfuser_prints_nothing(tmp_path: Path) -> None:
    write(tmp_path / "parent.py", """\
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "import nvscope; print(nvscope.current_options().as_shell())"])
    """)
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "parent.py", cwd=tmp_path, path=[REPO])
    assert result.stdout == "NVFUSER_ENABLE=fuse_matmul\n"
    assert "[pid " not in result.stderr


# --- multiprocessing and torchrun ---------------------------------------------------------------------------------

def test_multiprocessing_children_get_the_options(tmp_path: Path, site: Path) -> None:
    write(tmp_path / "pool.py", """\
        import multiprocessing, runpy

        def work():
            runpy.run_path("child.py")

        if __name__ == "__main__":
            for method in ("spawn", "forkserver", "fork"):
                process = multiprocessing.get_context(method).Process(target=work)
                process.start()
                process.join()
                assert process.exitcode == 0
    """)
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "--disable", "fma", "pool.py",
                    cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    children = child_pids(result.stdout)
    assert list(children.values()) == [f"{OPTIONS} dev=True"] * 3
    spawned, forkserved, forked = children
    assert_child_summary(result.stderr, spawned)  # a fresh interpreter: its own scope and summary
    # A fork (of the parent, or of the fork server, itself a fresh interpreter) keeps the scope of the thread that
    # forked, and exits without running atexit handlers: no summary of its own.
    assert tagged(result.stderr, forkserved) == tagged(result.stderr, forked) == []


def test_torchrun_workers_get_the_options(tmp_path: Path, site: Path) -> None:
    pytest.importorskip("torch.distributed.run")
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "--disable", "fma",
                    "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", "child.py",
                    cwd=tmp_path, path=[site, REPO], OMP_NUM_THREADS="1")
    assert result.returncode == 0, result.stdout + result.stderr
    children = child_pids(result.stdout)
    assert sorted(children.values()) == [f"{OPTIONS} dev=True"] * 2
    for pid in children:
        assert_child_summary(result.stderr, pid)
    ranks = sorted(re.findall(r"^\[pid \d+ RANK=(\d)\] nvscope run: options", result.stderr, flags=re.MULTILINE))
    assert ranks == ["0", "1"]


def test_nvscope_run_in_a_child_adds_its_options_and_prints_one_summary(tmp_path: Path, site: Path) -> None:
    write(tmp_path / "parent.py", """\
        import subprocess, sys
        subprocess.run([sys.executable, "-m", "nvscope", "run", "--disable", "fma", "inner.py"], check=True)
    """)
    write(tmp_path / "inner.py", """\
        import runpy, subprocess, sys
        runpy.run_path("child.py")
        subprocess.run([sys.executable, "child.py"], check=True)
    """)
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "parent.py", cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    inner, grandchild = child_pids(result.stdout).items()
    assert inner[1] == grandchild[1] == f"{OPTIONS} dev=True"  # the inner run's options over the outer's
    assert tagged(result.stderr, inner[0]) == []  # the inner nvscope run prints its own summary, untagged
    assert [line for line in result.stderr.splitlines() if line.startswith("nvscope run: options")] == [
        f"nvscope run: options {OPTIONS}", "nvscope run: options NVFUSER_ENABLE=fuse_matmul"]  # inner, outer
    assert_child_summary(result.stderr, grandchild[0])


def test_a_nested_run_keeps_the_outer_runs_fusions_options_for_its_children(tmp_path: Path, site: Path) -> None:
    """Issue 35 item 3: the outer run's options with a --fusions selector were dropped by a nested nvscope run: its
    children got the inner run's options only, and its header did not name the outer ones."""
    write(tmp_path / "outer.py", """\
        import subprocess, sys
        subprocess.run([sys.executable, "-m", "nvscope", "run", "--enable", "kernel_profile", "middle.py"], check=True)
    """)
    write(tmp_path / "middle.py", """\
        import subprocess, sys
        subprocess.run([sys.executable, "child.py"], check=True)
    """)
    result = python("-m", "nvscope", "run", "--enable", "static_fusion_count", "--fusions", "call/*", "outer.py",
                    cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    ((pid, seen),) = child_pids(result.stdout).items()
    assert seen == "NVFUSER_ENABLE=kernel_profile dev=True"  # the selector's options reach selected fusions only
    row = next(line for line in tagged(result.stderr, pid) if line.startswith("call/"))
    assert re.fullmatch(r"call/\S+ +NVFUSER_ENABLE=kernel_profile,static_fusion_count +call +new +MainThread +1",
                        row), row  # both runs' options, on the fusion the outer run's glob selects
    headers = [line for line in result.stderr.splitlines() if "nvscope run: options" in line]
    inner = [line for line in headers if not line.startswith("[pid") and "kernel_profile" in line]
    assert len(inner) == 1 and "static_fusion_count" in inner[0] and "call/*" in inner[0], headers
    assert any(line.startswith(f"[pid {pid}]") and "static_fusion_count" in line and "call/*" in line
               for line in headers), headers  # the grandchild's header says them too
    # A glob that selects none of the grandchild's fusions: it runs with the inner run's options only.
    elsewhere = python("-m", "nvscope", "run", "--enable", "static_fusion_count", "--fusions", "forward/*",
                       "outer.py", cwd=tmp_path, path=[site, REPO])
    assert elsewhere.returncode == 0, elsewhere.stderr
    ((pid, _),) = child_pids(elsewhere.stdout).items()
    row = next(line for line in tagged(elsewhere.stderr, pid) if line.startswith("call/"))
    assert re.fullmatch(r"call/\S+ +NVFUSER_ENABLE=kernel_profile +call +new +MainThread +1", row), row


# --- the variable and the hook, without nvscope run ------------------------------------------------------------------

PRINT_OPTIONS = "import nvscope; print(nvscope.current_options().as_shell() or '(none)', nvscope.is_development_mode())"


@pytest.mark.parametrize(("value", "why"), [
    ("enable=fuse_matmul", "is not JSON"),
    ('["fuse_matmul"]', "is not a JSON object"),
    ('{"enable": [], "disable": [], "colour": 1}', "has unknown keys ['colour'] (known: enable, disable, fusions, "),
    ('{"enable": "fuse_matmul", "disable": []}', "has 'enable' 'fuse_matmul', not a list of non-empty strings"),
    ('{"enable": []}', "has 'disable' None, not a list of non-empty strings"),
    ('{"enable": [], "disable": [], "fusions": [""]}', "has 'fusions' [''], not a list of non-empty strings"),
    ('{"enable": [], "disable": [], "on_error": "ignore"}', "has 'on_error' 'ignore', not one of 'raise', 'fallback'"),
    ('{"enable": [], "disable": [], "audit": "yes"}', "has 'audit' 'yes', not true or false"),
    ('{"enable": [], "disable": [], "outer": {}}', "has 'outer' {}, not a list of JSON objects"),
    ('{"enable":[],"disable":[],"outer":[{"enable":[],"disable":[],"audit":true}]}',
     "has unknown keys ['audit'] in 'outer' (known: enable, disable, fusions, on_error)"),
    ('{"enable": [], "disable": [], "outer": [{"enable": ["fma"]}]}', "has 'disable' None, not a list of"),
    ('{"enable":[],"disable":[],"outer":[{"enable":["fuse_matmull"],"disable":[]}]}',
     "is refused: unknown nvFuser enable option 'fuse_matmull'"),
    ('{"enable": ["fuse_matmull"], "disable": []}', "is refused: unknown nvFuser enable option 'fuse_matmull'; did "
                                                    "you mean 'fuse_matmul'"),
])
def test_a_bad_variable_warns_and_the_child_runs_without_options(tmp_path: Path, value: str, why: str) -> None:
    result = python("-c", PRINT_OPTIONS, cwd=tmp_path, path=[HOOK, REPO], NVSCOPE_RUN=value)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "(none) False\n"
    assert f"ConfigWarning: NVSCOPE_RUN={value!r} {why}" in result.stderr
    assert ("this process runs without nvscope run's options. NVSCOPE_RUN is set by `nvscope run` for the Python "
            "processes its program starts: unset it, or let `nvscope run` set it") in result.stderr


def test_the_hook_runs_the_sitecustomize_it_hides(tmp_path: Path) -> None:
    other = write(tmp_path / "other" / "sitecustomize.py", "import builtins; builtins.OTHER_SITECUSTOMIZE = 'ran'")
    code = f"{PRINT_OPTIONS}; import sitecustomize; print(OTHER_SITECUSTOMIZE, sitecustomize.__file__)"
    without = python("-c", code, cwd=tmp_path, path=[HOOK, other.parent, REPO])
    assert without.stdout == f"(none) False\nran {other}\n", without.stderr
    carried = python("-c", code, cwd=tmp_path, path=[HOOK, other.parent, REPO],
                     NVSCOPE_RUN='{"enable": ["fuse_matmul"], "disable": []}')
    assert carried.stdout == f"NVFUSER_ENABLE=fuse_matmul True\nran {other}\n", carried.stderr
    other.write_text("raise RuntimeError('broken site')")
    broken = python("-c", PRINT_OPTIONS, cwd=tmp_path, path=[HOOK, other.parent, REPO],
                    NVSCOPE_RUN='{"enable": ["fuse_matmul"], "disable": []}')
    assert broken.stdout == "NVFUSER_ENABLE=fuse_matmul True\n"  # reported by `site` as before; the scope still on
    assert "Error in sitecustomize" in broken.stderr and "broken site" in broken.stderr


def test_a_child_that_cannot_import_nvscope_says_so_and_runs(tmp_path: Path) -> None:
    write(tmp_path / "broken" / "nvscope" / "__init__.py", "raise ImportError('not this one')")
    result = python("-c", "print('ran')", cwd=tmp_path, path=[HOOK, tmp_path / "broken"],
                    NVSCOPE_RUN='{"enable": ["fuse_matmul"], "disable": []}')
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert f"nvscope: NVSCOPE_RUN is set, but this Python ({sys.executable}) cannot import nvscope (not this one)" in (
        result.stderr)


def test_a_child_whose_thunder_nvscope_refuses_warns_and_runs(tmp_path: Path) -> None:
    from test_cli import _fake_thunder

    _fake_thunder(tmp_path / "site")  # with a wrapper field missing: the adapter refuses this Thunder
    impl = tmp_path / "site" / "thunder" / "executors" / "nvfuserex_impl.py"
    impl.write_text(impl.read_text().replace('"enable_options", "disable_options"', '"enable_options"'))
    hidden = write(tmp_path / "hidden" / "sitecustomize.py", "import thunder")  # imported before the hook's scope
    result = python("-c", PRINT_OPTIONS, cwd=tmp_path, path=[HOOK, hidden.parent, tmp_path / "site", REPO],
                    NVSCOPE_RUN='{"enable": ["fuse_matmul"], "disable": []}')
    assert result.returncode == 0, result.stderr
    assert result.stdout == "(none) False\n"
    assert ("NvscopeWarning: nvscope run's options cannot apply in this process: UnsupportedError('nvscope cannot "
            "drive Thunder 0.0.fake: its nvFuser executor lacks FusionDefinitionWrapper.disable_options.") in (
        result.stderr)


# --- --fusions and --on-error ----------------------------------------------------------------------------------------

# Stands in for the nv_options(fusions=..., on_error=...) the scope is gaining: records those, passes the rest on.
RECORDING_NV_OPTIONS = """\
import os, sys
import nvscope._core._scope as scope  # where nvscope run's carry takes nv_options from

real = scope.nv_options

def recording(enable=(), disable=(), **extra):
    with open(os.environ["RECORD"], "a") as record:
        record.write(f"{os.getpid()} {sorted(extra.items())}\\n")
    extra.pop("fusions", None)
    extra.pop("on_error", None)
    return real(enable, disable, **extra)

scope.nv_options = recording
"""


def test_fusions_and_on_error_reach_nv_options_in_the_program_and_its_children(tmp_path: Path, site: Path) -> None:
    stand_in = write(tmp_path / "stand_in" / "sitecustomize.py", RECORDING_NV_OPTIONS)
    write(tmp_path / "parent.py", PARENT)
    record = tmp_path / "record.txt"
    result = python("-m", "nvscope", "run", "--enable", "fuse_matmul", "--disable", "fma", "--fusions", "forward/*",
                    "--fusions=backward/nvFusion0, backward/nvFusion1", "--on-error", "fallback", "parent.py",
                    cwd=tmp_path, path=[stand_in.parent, site, REPO], RECORD=str(record))
    assert result.returncode == 0, result.stderr
    ((pid, seen),) = child_pids(result.stdout).items()
    assert seen == f"{OPTIONS} dev=True"
    expected = "[('fusions', ['forward/*', 'backward/nvFusion0', 'backward/nvFusion1']), ('on_error', 'fallback')]"
    calls = record.read_text().splitlines()
    assert calls == [f"{calls[0].split()[0]} {expected}", f"{pid} {expected}"]  # nvscope run's process, the child's


@pytest.mark.parametrize(("glob", "reached"), [("call/*", True), ("forward/*", False)])
def test_fusions_reach_the_selected_fusions_of_children_and_both_summaries_say_so(
        tmp_path: Path, site: Path, glob: str, reached: bool) -> None:
    """Issue 27 item 4: with --fusions the children got {"enable": [], "disable": []} and ran every fusion with its
    defaults, and both summaries said "options (none)"."""
    write(tmp_path / "parent.py", PARENT)
    result = python("-m", "nvscope", "run", "--fusions", glob, "--enable", "fuse_matmul", "--disable", "fma",
                    "parent.py", cwd=tmp_path, path=[site, REPO])
    assert result.returncode == 0, result.stderr
    ((pid, seen),) = child_pids(result.stdout).items()
    assert seen == "(none) dev=True"  # the options reach selected fusions only, not every fusion
    lines = tagged(result.stderr, pid)
    assert lines[0] == f"nvscope run: options {OPTIONS} on the fusions {glob}", lines
    row = rf"call/\S+ +{OPTIONS} +call +new +MainThread +1" if reached else \
        r"call/\S+ +\(none\) +call +default +MainThread +1"
    assert re.fullmatch(row, lines[3]), lines
    assert f"\nnvscope run: options {OPTIONS} on the fusions {glob}\nnvscope audit: no nvFuser fusion executed\n" in \
        result.stderr  # the parent's own summary, untagged


@pytest.mark.parametrize(("args", "message"), [
    (("--fusions", ""), "nvscope run: error: --fusions needs a glob over fusion ids, e.g. --fusions 'forward/*'"),
    (("--fusions", " , "), "nvscope run: error: --fusions needs a glob over fusion ids"),
    (("--on-error", "ignore"),
     "argument --on-error: invalid choice: 'ignore' (choose from 'raise', 'fallback', 'torch')"),
    (("--enable", ""), "nvscope run: error: --enable needs an option name, e.g. --enable fuse_matmul"),
    (("--enable", ","), "nvscope run: error: --enable needs an option name"),
    (("--enable", "fast_math", "--enable", " "), "nvscope run: error: --enable needs an option name"),
    (("--disable", ","), "nvscope run: error: --disable needs an option name, e.g. --disable fma"),
])
def test_bad_fusions_or_on_error_exit_2_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       args: tuple[str, ...], message: str) -> None:
    script = write(tmp_path / "script.py", f"open({str(tmp_path / 'ran')!r}, 'w').close()")
    try:
        code = cli.main(["run", *args, str(script)])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    if message.startswith("nvscope run: error:"):  # nvscope's own refusals: one line
        assert err.count("\n") == 1, err
    assert not (tmp_path / "ran").exists()


def test_the_environment_is_set_while_the_program_runs_and_restored_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen = tmp_path / "seen.json"
    script = write(tmp_path / "script.py", f"""\
        import json, os
        json.dump([os.environ.get("NVSCOPE_RUN"), os.environ.get("PYTHONPATH")], open({str(seen)!r}, "w"))
    """)
    monkeypatch.delenv("NVSCOPE_RUN", raising=False)
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    assert cli.main(["run", "--no-audit", "--enable", "fuse_matmul", str(script)]) == 0
    variable, path = json.loads(seen.read_text())
    assert json.loads(variable) == {"enable": ["fuse_matmul"], "disable": [], "audit": False}
    assert path == f"{HOOK}{os.pathsep}elsewhere"
    assert "NVSCOPE_RUN" not in os.environ and os.environ["PYTHONPATH"] == "elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    assert cli.main(["run", "--disable", "fma", str(script), "--fusions", "x"]) == 0  # the program's own --fusions
    variable, path = json.loads(seen.read_text())
    assert json.loads(variable) == {"enable": [], "disable": ["fma"], "audit": True}
    assert path == str(HOOK)
    assert "NVSCOPE_RUN" not in os.environ and "PYTHONPATH" not in os.environ
    err = capsys.readouterr().err  # a note that --fusions after the script is the script's, then the summary
    assert "nvscope run: note: --fusions after" in err and "\nnvscope run: options NVFUSER_DISABLE=fma\n" in err
