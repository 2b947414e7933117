"""``NVSCOPE_SHARE=all`` in a plain Python process that imports nvscope (issue 38): read at import, it shares the
defaults of every fusion, in every thread, whether Thunder (the double) was imported before nvscope or after it.

Black box: a fresh interpreter runs `PROGRAM`, with the doctors on ``sys.path`` (the test directory) and, for Thunder
imported after nvscope, a ``thunder`` package that builds the double when imported, so that nvscope sees a real
``import thunder``. The program never enters a scope; it prints what the fake nvFuser frontend saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# Six fusions that print one definition, two that print it under a compile-time option, and, run in a new thread,
# three more of another definition. argv[1]: which is imported first, Thunder (the double) or nvscope.
PROGRAM = """\
import json, sys, threading
import pytest

if sys.argv[1] == "thunder-first":
    from thunder_double import ThunderDouble

    double = ThunderDouble(pytest.MonkeyPatch())
    assert "nvscope" not in sys.modules
    import nvscope
else:
    import nvscope
    import thunder  # the site's package: it builds the double (and nvscope's import hook sees it)

    double = thunder.DOUBLE
fe = double.fe
plain = [double.make_wrapper(f"nvFusion{i}") for i in range(6)]
tuned = [double.make_wrapper(f"nvFusion{i + 6}", enable=["fuse_matmul"]) for i in range(2)]
other = [double.make_wrapper(f"nvFusion{i + 8}", ops=("linear", "add")) for i in range(3)]
for fusion in plain + tuned:
    assert fusion(fe.Tensor((1.0, 1.0))) == [fe.Tensor((2.0, 2.0))]
main = len(fe.COMPILES)

def in_thread():
    for fusion in other + plain:
        fusion(fe.Tensor((1.0, 1.0)))

thread = threading.Thread(target=in_thread, name="worker")
thread.start()
thread.join()
print(json.dumps({
    "options": nvscope.current_options().as_shell(),
    "main": main,
    "thread": len(fe.COMPILES) - main,
    "compiled": sorted((c.definition.count("ops."), list(c.enable)) for c in fe.COMPILES),
    "ran": [[list(e.enable or ()), e.thread] for e in fe.EXECUTIONS],
}))
"""

# A ``thunder`` package: importing it builds the Thunder double (which puts its own ``thunder`` module in place).
THUNDER_INIT = """\
import sys
import pytest
from thunder_double import ThunderDouble

DOUBLE = ThunderDouble(pytest.MonkeyPatch())
sys.modules["thunder"].DOUBLE = DOUBLE
"""


def run(tmp_path: Path, order: str, share: str | None) -> dict[str, Any]:
    site = tmp_path / "site"
    (site / "thunder").mkdir(parents=True, exist_ok=True)
    (site / "thunder" / "__init__.py").write_text(THUNDER_INIT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (site, TESTS, REPO)))
    if share is not None:
        env["NVSCOPE_SHARE"] = share
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM), order], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr  # sharing changes no option: no development-mode warning
    seen: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return seen


def run_share_all(tmp_path: Path, program: str, site: Path | None = None) -> Any:
    """``program`` in a fresh interpreter under ``NVSCOPE_SHARE=all``, the doubles importable (and the packages in
    ``site`` first): its last line (JSON)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "NVFUSER_", "PYTHON"))}
    env.update(PYTHONPATH=os.pathsep.join(map(str, (*([site] if site else []), TESTS, REPO))), NVSCOPE_SHARE="all")
    result = subprocess.run([sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("order", ["thunder-first", "nvscope-first"])
def test_share_all_compiles_each_distinct_definition_once_in_every_thread(tmp_path: Path, order: str) -> None:
    seen = run(tmp_path, order, "all")
    assert seen["options"] == ""  # it changes no option
    assert seen["main"] == 2  # eight fusions, two (definition, options) keys: the plain one and the tuned one
    assert seen["thread"] == 1  # a new thread shares too: three fusions of another definition, and the plain six
    assert seen["compiled"] == [[1, []], [1, ["fuse_matmul"]], [2, []]]
    # Every fusion ran its own options: none for the plain ones, its compile-time one for the tuned ones.
    assert seen["ran"] == ([[[], "MainThread"]] * 6 + [[["fuse_matmul"], "MainThread"]] * 2
                           + [[[], "worker"]] * 9)


@pytest.mark.parametrize("share", [None, "1"])
def test_without_all_each_fusion_compiles_its_own(tmp_path: Path, share: str | None) -> None:
    seen = run(tmp_path, "thunder-first", share)
    assert seen["main"] == 8  # Thunder's path: one compile per fusion
    assert seen["thread"] == 3  # the three new fusions; the plain six are compiled already
    assert seen["ran"][:8] == [[[], "MainThread"]] * 6 + [[["fuse_matmul"], "MainThread"]] * 2


# Backward passes under NVSCOPE_SHARE=all: what each forward carries to its backward (`nvscope._core._frames.carried`).
BACKWARD = """\
import contextlib, json, threading
import pytest, torch
from thunder_double import ThunderDouble
import nvscope
import nvscope.thunder
from nvscope import nv_options

double = ThunderDouble(pytest.MonkeyPatch())
nvscope.thunder.install()
models = [double.make_model() for _ in range(3)]
seen = {}

def case(name, forward_scope=None, backward_scope=None, thread=False):
    with nvscope.audit() as log:
        losses = []
        for model, _, _ in models:
            with forward_scope or contextlib.nullcontext():
                losses.append(model(torch.ones(2, requires_grad=True)).sum())

        def backward():
            with backward_scope or contextlib.nullcontext():
                for loss in losses:
                    loss.backward()

        if thread:
            runner = threading.Thread(target=backward)
            runner.start()
            runner.join()
        else:
            backward()
    shared = {r.fusion.split("/")[0]: r.route != "default" for r in log.records}
    seen[name] = [shared["forward"], shared["backward"]]

case("program-wide")
case("forward share=False, backward outside it", nv_options(share=False))
case("forward share=False, backward in another thread", nv_options(share=False), thread=True)
case("forward outside, backward in share=False", None, nv_options(share=False))
case("forward outside, backward in share=False in another thread", None, nv_options(share=False), thread=True)
print(json.dumps(seen))
"""


def test_share_false_reaches_the_backward_under_share_all(tmp_path: Path) -> None:
    """A forward in ``share=False`` keeps its backward off the shared definitions wherever the backward runs, and a
    backward run in ``share=False`` does not share because the program-wide frame is no scope a forward carries."""
    pytest.importorskip("torch")
    seen = run_share_all(tmp_path, BACKWARD)
    assert seen == {
        "program-wide": [True, True],
        "forward share=False, backward outside it": [False, False],
        "forward share=False, backward in another thread": [False, False],
        "forward outside, backward in share=False": [True, False],
        "forward outside, backward in share=False in another thread": [True, False],
    }


# Tools under NVSCOPE_SHARE=all: share_defaults=False runs Thunder's own path (children too), and rescue's diagnosis
# sees Thunder's own path also in a thread the step starts.
TOOLS = """\
import json, threading
import pytest
from thunder_double import ThunderDouble
from fake_nvfuser_frontend import Tensor
import nvscope
from nvscope._rescue import rescue
from nvscope._search import search
from nvscope._bisect._process import _environment

double = ThunderDouble(pytest.MonkeyPatch())
layers = [double.make_wrapper(f"nvFusion{i}") for i in range(6)]

def step():
    x = Tensor((1.0, 2.0))
    for fusion in layers:
        (x,) = fusion(x)
    return x

seen = {}
result = search(step, candidates=["fuse_matmul"], share_defaults=False, rounds=5, steps_per_round=1, warmup=1,
                progress=False)
seen["search's defaults compiled"] = sum(not c.enable for c in double.fe.COMPILES)
seen["bisect child"] = _environment(share=False).get("NVSCOPE_SHARE")
threaded = [double.make_wrapper(f"nvFusion{i + 6}", ops=("add",)) for i in range(3)]

def in_a_thread():
    out = []
    runner = threading.Thread(target=lambda: out.extend(f(Tensor((1.0,)))[0] for f in threaded))
    runner.start()
    runner.join()
    return out

with nvscope.audit() as log:
    rescue(in_a_thread, progress=False)
before = len(double.fe.COMPILES)
seen["rescue's routes"] = sorted({r.route for r in log.records})
seen["afterwards, shared again"] = (threaded[0](Tensor((1.0,))), len(double.fe.COMPILES) - before)
print(json.dumps(seen, default=str))
"""


def test_tools_asked_not_to_share_and_rescue_see_thunders_path_under_share_all(tmp_path: Path) -> None:
    seen = run_share_all(tmp_path, TOOLS)
    assert seen["search's defaults compiled"] == 6  # one per fusion: Thunder's own path, not the shared one
    assert seen["bisect child"] == "1"  # its children do not inherit the program-wide sharing either
    assert seen["rescue's routes"] == ["default"]  # the thread the step started ran Thunder's path too
    # After rescue the program-wide sharing is back: the first threaded fusion runs shared, compiling one definition.
    assert seen["afterwards, shared again"][1] == 1


UNINSTALL = """\
import json
import pytest
from thunder_double import ThunderDouble
from fake_nvfuser_frontend import Tensor

double = ThunderDouble(pytest.MonkeyPatch())  # Thunder (the double) first: nvscope's import then installs
import nvscope

compiled = []
for _ in range(2):  # before and after nvscope.uninstall(): three new fusions of one definition each time
    before = len(double.fe.COMPILES)
    for fusion in [double.make_wrapper(f"nvFusion{i}", ops=("add",)) for i in range(3)]:
        fusion(Tensor((1.0,)))
    compiled.append(len(double.fe.COMPILES) - before)
    nvscope.uninstall()
print(json.dumps(compiled))
"""


def test_uninstall_under_share_all_is_a_fresh_import(tmp_path: Path) -> None:
    """After `nvscope.uninstall()` the program-wide sharing goes on, as it would in a freshly imported nvscope."""
    seen = run_share_all(tmp_path, UNINSTALL)
    assert seen == [1, 1]


# nvFuser imported before Thunder: nvscope's import hook installs the direct adapter, then Thunder's. The site's
# ``nvfuser_direct`` is the frontend double; its ``thunder`` builds the Thunder double over that very module.
NVFUSER_FIRST_SITE = {
    "nvfuser_direct/__init__.py": "from thunder_double import FRONTEND_FILE\n"
                                  "exec(compile(FRONTEND_FILE.read_text(), str(FRONTEND_FILE), 'exec'))\n",
    "thunder/__init__.py": """\
import sys
import pytest
import thunder_double

thunder_double.load_frontend = lambda monkeypatch, name: sys.modules[name]  # the frontend imported before Thunder
DOUBLE = thunder_double.ThunderDouble(pytest.MonkeyPatch())
sys.modules["thunder"].DOUBLE = DOUBLE
""",
}

NVFUSER_FIRST = """\
import json
import nvscope
import nvfuser_direct
import thunder
import nvscope.nvfuser

double = thunder.DOUBLE
layers = [double.make_wrapper(f"nvFusion{i}") for i in range(3)]
with nvscope.audit() as log:
    for fusion in layers:
        fusion(nvfuser_direct.Tensor((1.0, 1.0)))
print(json.dumps({
    "adapters": nvscope.nvfuser.frontends(),
    "fusions": [r.fusion.split("@")[0] for r in log.records],
    "ran Thunder's definitions": [e.fd for e in double.executions] == [f.last_used for f in layers],
    "compiles": len(double.fe.COMPILES),
}))
"""


def test_share_all_with_nvfuser_imported_before_thunder_runs_each_fusion_once(tmp_path: Path) -> None:
    """Both adapters are installed; each Thunder fusion call is one execution of the definition Thunder's tools see,
    through Thunder's adapter alone: no copy rebuilt by the direct adapter, no phantom fusion in the audit."""
    site = tmp_path / "site"
    for name, text in NVFUSER_FIRST_SITE.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    seen = run_share_all(tmp_path, NVFUSER_FIRST, site)
    assert seen == {"adapters": ["nvfuser_direct"], "fusions": [f"forward/nvFusion{i}" for i in range(3)],
                    "ran Thunder's definitions": True, "compiles": 1}
