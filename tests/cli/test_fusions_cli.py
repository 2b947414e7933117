"""``nvscope fusions script.py``: run a program and list the nvFuser fusions it ran (fake frontend, real process)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import thunder_double

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """\
import nvfuser_direct as fe

def define(*ops):
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        for op in ops:
            getattr(fd.ops, op)(0)
    return fd

matmul, pointwise = define("linear", "add"), define("mul")
for _ in range(3):
    matmul.execute([1.0])
pointwise.execute([1.0])
print("program done")
"""


def nvscope(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    shutil.copy(thunder_double.FRONTEND_FILE, site / "nvfuser_direct.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join((str(REPO), str(site)))
    return subprocess.run([sys.executable, "-m", "nvscope", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_fusions_lists_what_a_program_ran(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "program done\n"
    lines = done.stderr.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("nvscope fusions: 2 fusions (2 call)")))
    header, _rule, first, second = lines[start + 1:start + 5]
    assert header.split() == ["id", "ops", "function", "calls"]
    # The definition's digest; where it executed (the script's module, by its file's stem) is its function.
    assert re.fullmatch(r"call/FusionDefinition@[0-9a-f]{6} +add, linear +prog +3", first), first
    assert re.fullmatch(r"call/FusionDefinition@[0-9a-f]{6} +mul +prog +1", second), second
    assert first.split()[0] != second.split()[0]


def test_fusions_speaks_as_fusions_and_no_audit_leaves_the_listing_alone(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "prog.py")
    assert done.stderr.startswith("nvscope fusions: options (none)\n"), done.stderr
    assert not any(line.startswith("nvscope run:") for line in done.stderr.splitlines()), done.stderr
    quiet = nvscope(tmp_path, "fusions", "--no-audit", "prog.py")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.startswith("nvscope fusions: 2 fusions (2 call)"), quiet.stderr
    summary = ("nvscope audit:", "nvscope fusions: options")
    assert not any(line.startswith(summary) for line in quiet.stderr.splitlines()), quiet.stderr


# The program: a model's fusion and a loss's, the loss alone scoped when an id is given on the command line.
IDS = """import sys
import nvfuser_direct as fe
import nvscope

def define(*ops):
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        for op in ops:
            getattr(fd.ops, op)(0)
    return fd

model, loss = define("linear"), define("add")

def step():
    model.execute([1.0])
    loss.execute([1.0])

def scoped_loss():
    with nvscope.nv_options(enable=["static_fusion_count"], fusions=sys.argv[1]):
        loss.execute([1.0])

if len(sys.argv) > 1:
    nvscope.install()
    model.execute([1.0])  # unscoped and unaudited: nvscope does not see it
    with nvscope.audit() as log:
        scoped_loss()  # the loss first, from another function than in the listing
        step()
    for record in log.records:
        print(record.fusion, record.options.as_shell() or "-")
else:
    step()
"""


def test_an_id_from_the_listing_selects_that_fusion_when_the_program_scopes_it_alone(tmp_path: Path) -> None:
    """`nvscope fusions ids.py` audits everything; `python ids.py <id>` scopes only the loss, which nvscope sees
    before the model there: the listed id of the loss selects the loss, and only it, and each keeps its id."""
    (tmp_path / "ids.py").write_text(IDS)
    done = nvscope(tmp_path, "fusions", "ids.py")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("nvscope fusions: 2 fusions")))
    model_id, loss_id = (line.split()[0] for line in lines[start + 3:start + 5])
    assert lines[start + 3].split()[1:] == ["linear", "ids:step", "1"]
    assert lines[start + 4].split()[1:] == ["add", "ids:step", "1"]
    run = python(tmp_path, "ids.py", loss_id)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{loss_id} NVFUSER_ENABLE=static_fusion_count", f"{model_id} -",
                                       f"{loss_id} -"]


def python(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The program run as ``python script.py ...``, with the fake frontend as nvfuser_direct."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join((str(REPO), str(tmp_path / "site")))
    env["NVSCOPE_DEV"] = "1"
    return subprocess.run([sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def test_fusions_with_options_and_a_selector(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "--enable", "fuse_matmul", "--fusions", "call/*", "prog.py")
    assert done.returncode == 0, done.stderr
    assert "nvscope fusions: 2 fusions" in done.stderr
    # fuse_matmul reaches the fusion holding a linear only (the catalog's gate), and compiles one partition for it
    assert "1 new partitions compiled" in done.stderr


def test_fusions_needs_a_program(tmp_path: Path) -> None:
    done = nvscope(tmp_path, "fusions")
    assert done.returncode == 2 and "nvscope fusions --help" in done.stderr


def test_json_dash_is_json_alone_whatever_the_program_prints(tmp_path: Path) -> None:
    """Issue 35 item 13: `nvscope fusions --json - prog.py` put the program's output before the JSON on stdout. What
    it prints (print, file descriptor 1, a process it starts) goes to standard error."""
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM) + textwrap.dedent("""\
        import os, subprocess, sys
        os.write(1, b"written to fd 1\\n")
        subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
        print("after the child", flush=True)
        """))
    done = nvscope(tmp_path, "fusions", "--json", "-", "prog.py")
    assert done.returncode == 0, done.stderr
    assert [f["ops"] for f in json.loads(done.stdout)["fusions"]] == [["add", "linear"], ["mul"]]  # nothing else
    for line in ("program done", "written to fd 1", "a child process", "after the child"):
        assert line in done.stderr.splitlines()
    plain = nvscope(tmp_path, "fusions", "prog.py")  # without --json -, the program's stdout is its own
    assert sorted(plain.stdout.splitlines()) == ["a child process", "after the child", "program done",
                                                 "written to fd 1"]  # (in the order its buffers were flushed)


def test_json_that_took_the_script_says_so(tmp_path: Path) -> None:
    """Issue 35 item 13: `--json prog.py` took the script as the JSON's path, then asked for the script."""
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "--json", "prog.py")
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.splitlines()[-1].endswith(
        "--json prog.py: did you mean --json - prog.py? (--json takes PATH or - before the script)")
    assert (tmp_path / "prog.py").read_text() == textwrap.dedent(PROGRAM)  # refused before anything is written



def test_json_into_a_missing_folder_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    done = nvscope(tmp_path, "fusions", "--json", "no/such/dir/f.json", "prog.py")
    assert done.returncode == 2 and "program done" not in done.stdout
    assert done.stderr.splitlines() == [
        "nvscope fusions: error: --json no/such/dir/f.json: the directory does not exist"]


# Two definitions, one broken under fuse_matmul; every other run of the program executes them in the other order.
ALTERNATING = """\
import os
import nvfuser_direct as fe

def define(op, breaks=False):
    with fe.FusionDefinition() as fd:
        fd.define_tensor(shape=[2], dtype=fe.DataType.Float)
        getattr(fd.ops, op)(0)
        if breaks:
            fd.define_scalar(fe.BREAKS_WITH + "fuse_matmul")
    return fd

broken, fine = define("linear", breaks=True), define("matmul")
counter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
runs = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(runs + 1))
for fd in ((fine, broken) if runs % 2 else (broken, fine)):
    fd.execute([1.0])
"""


def test_bisects_listing_ids_select_the_same_fusions_in_its_probes(tmp_path: Path) -> None:
    """bisect --subprocess lists the fusions in a child that audits everything, then runs each probe in a fresh
    process selecting fusions by those ids, here with the definitions executed in another order every other run:
    the culprit it names is the broken definition, as `nvscope fusions` lists it, and its command reproduces."""
    (tmp_path / "prog.py").write_text(ALTERNATING)
    listed = nvscope(tmp_path, "fusions", "prog.py")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stderr.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("nvscope fusions: 2 fusions")))
    ids = {line.split()[1]: line.split()[0] for line in lines[start + 3:start + 5]}  # op -> id
    done = nvscope(tmp_path, "bisect", "--subprocess", "--enable", "fuse_matmul,static_fusion_count", "prog.py")
    assert done.returncode == 0, done.stderr
    assert f"on fusions {ids['linear']} (of 2)" in done.stdout, done.stdout
    assert f"--fusions={ids['linear']} -- prog.py" in done.stdout
    assert "the given options on every fusion but the culprits': clean" in done.stdout
    for op, fails in (("linear", True), ("linear", True), ("matmul", False), ("matmul", False)):
        # Two runs each: one in either order. The culprit's line reproduces; the other fusion's runs clean.
        run = nvscope(tmp_path, "run", "--enable=fuse_matmul", f"--fusions={ids[op]}", "--", "prog.py")
        assert (run.returncode != 0 and "INTERNAL ASSERT" in run.stderr) if fails else run.returncode == 0, run.stderr
