"""`nvscope.check`: every construct that sets nvFuser developer options, found with its place and names; aliases;
reading and forwarding that are not setting; the catalog's judgement; allowances; files that cannot be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nvscope
from nvscope import CheckResult

# The range every test gives unless it tests the range: results do not depend on an installed nvFuser.
RANGE = "==0.2.36"


def write(root: Path, name: str, text: str | bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run(root: Path, **kwargs: object) -> CheckResult:
    kwargs.setdefault("nvfuser", RANGE)
    return nvscope.check([root], **kwargs)  # type: ignore[arg-type]


def found(result: CheckResult, kind: str | None = None) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, construct, options) of the findings of one kind (default: uses, that is option and dynamic)."""
    kinds = ("option", "dynamic") if kind is None else (kind,)
    return [(f.line, f.construct, f.options) for f in result.findings if f.kind in kinds]


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # paths are shown relative to the working folder; no pyproject.toml above


# --- Python constructs ----------------------------------------------------------------------------------------------

PYTHON_CASES = [
    ("import nvscope\nwith nvscope.nv_options(enable=['fuse_matmul']):\n    pass\n",
     [(2, "nv_options", ("enable:fuse_matmul",))]),
    ("import nvscope as ns\nns.nv_options(['fuse_matmul'], ('fma',))\n",
     [(2, "nv_options", ("enable:fuse_matmul", "disable:fma"))]),
    ("from nvscope import nv_options as opts\nwith opts(disable='fma'): pass\n",
     [(2, "nv_options", ("disable:fma",))]),
    ("from nvscope import *\nnv_options(enable=['fuse_matmul'])\n", [(2, "nv_options", ("enable:fuse_matmul",))]),
    ("from nvscope._core._scope import nv_options\nnv_options(enable=['fast_math'])\n",
     [(2, "nv_options", ("enable:fast_math",))]),
    ("from nvscope import with_nv_options\n@with_nv_options(enable=['static_fusion_count'])\ndef step(): ...\n",
     [(2, "with_nv_options", ("enable:static_fusion_count",))]),
    ("import nvscope\nnvscope.OptionSet(enable=['fuse_matmul'], disable=['fma'])\n",
     [(2, "OptionSet", ("enable:fuse_matmul", "disable:fma"))]),
    ("from nvscope import OptionSet\nOptionSet.parse('NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=fma')\n",
     [(2, "OptionSet.parse", ("enable:fuse_matmul", "disable:fma"))]),
    ("from nvscope import nv_options, OptionSet\nnv_options(OptionSet(enable=['fuse_matmul']))\n",
     [(2, "nv_options", ("enable:fuse_matmul",))]),  # the OptionSet is reported with the scope, once
    ("import pytest\n@pytest.mark.nv_options(enable=['fuse_matmul'])\ndef test_a(): ...\n",
     [(2, "pytest.mark.nv_options", ("enable:fuse_matmul",))]),
    ("from pytest import mark\npytestmark = [mark.nv_options(disable=['fma'])]\n",
     [(2, "pytest.mark.nv_options", ("disable:fma",))]),
    ("import nvscope\nnvscope.set_development_mode(True)\n",
     [(2, "set_development_mode", ("development mode",))]),
    ("from nvscope import dev_mode\nwith dev_mode():\n    pass\nwith dev_mode(True): pass\n",
     [(2, "dev_mode", ("development mode",)), (4, "dev_mode", ("development mode",))]),
    ("import thunder\nthunder.jit(f, nv_enable_options=['fuse_matmul'], nv_disable_options=['fma'])\n",
     [(2, "Thunder compile option", ("enable:fuse_matmul",)), (2, "Thunder compile option", ("disable:fma",))]),
    ("import thunder\nthunder.jit(f, nv_enable_linear=True, nv_skip_cache=True)\n",
     [(2, "Thunder compile option", ("nv_enable_linear=True",)),
      (2, "Thunder compile option", ("nv_skip_cache=True",))]),
    ("options = {'nv_enable_matmul': True, 'nv_enable_options': ['fuse_matmul']}\n",
     [(1, "Thunder compile option", ("nv_enable_matmul=True",)),
      (1, "Thunder compile option", ("enable:fuse_matmul",))]),
    ("fd.execute(inputs, _enable_options=['fuse_matmul'], _disable_options=['matmul_expr_eval'])\n",
     [(1, "nvFuser execute option", ("enable:fuse_matmul",)),
      (1, "nvFuser execute option", ("disable:matmul_expr_eval",))]),
    ("import os\nos.environ['NVFUSER_ENABLE'] = 'fuse_matmul,fast_math'\n",
     [(2, "os.environ[...]", ("enable:fuse_matmul", "enable:fast_math"))]),
    ("from os import environ as E\nE['NVFUSER_DISABLE'] = 'fma'\n", [(2, "os.environ[...]", ("disable:fma",))]),
    ("import os\nos.environ.setdefault('NVFUSER_DISABLE', 'fma')\n",
     [(2, "os.environ.setdefault", ("disable:fma",))]),
    ("import os\nos.environ.update({'NVFUSER_ENABLE': 'fuse_matmul'})\nos.environ.update(NVFUSER_DISABLE='fma')\n",
     [(2, "os.environ.update", ("enable:fuse_matmul",)), (3, "os.environ.update", ("disable:fma",))]),
    ("import os\nos.environ |= {'NVFUSER_ENABLE': 'fuse_matmul'}\n", [(2, "os.environ |=", ("enable:fuse_matmul",))]),
    ("import os\nos.putenv('NVFUSER_ENABLE', 'fuse_matmul')\n", [(2, "os.putenv", ("enable:fuse_matmul",))]),
    ("def test_a(monkeypatch):\n    monkeypatch.setenv('NVFUSER_DISABLE', 'fma')\n",
     [(2, "monkeypatch.setenv", ("disable:fma",))]),
    ("import subprocess\nsubprocess.run(['x'], env={'NVFUSER_ENABLE': 'fuse_matmul'})\n",
     [(2, "env= mapping", ("enable:fuse_matmul",))]),
    ("import os, subprocess\nenv = {**os.environ, 'NVFUSER_DISABLE': 'fma'}\n",
     [(2, "{**os.environ, ...}", ("disable:fma",))]),
    ("import os\nenv = dict(os.environ, NVFUSER_ENABLE='fuse_matmul')\n", [(2, "dict(...)", ("enable:fuse_matmul",))]),
    ("env = {}\nenv['NVFUSER_ENABLE'] = 'fuse_matmul'\n", [(2, "env[...]", ("enable:fuse_matmul",))]),
    ("import os\nos.environ['NVSCOPE_DEV'] = '1'\n", [(2, "os.environ[...]", ("NVSCOPE_DEV=1",))]),
    ("import subprocess\nsubprocess.run(['nvscope', 'run', '--enable', 'fuse_matmul', '--disable=fma', 't.py'])\n",
     [(2, "nvscope run", ("enable:fuse_matmul", "disable:fma"))]),
    ("import pytest\npytest.main(['-q', '--nv-enable', 'fuse_matmul,fast_math'])\n",
     [(2, "pytest --nv-enable", ("enable:fuse_matmul", "enable:fast_math"))]),
    # Imported, aliased or reached in other ways.
    ("import importlib\nns = importlib.import_module('nvscope')\nns.nv_options(enable=['fuse_matmul'])\n",
     [(3, "nv_options", ("enable:fuse_matmul",))]),
    ("__import__('nvscope').nv_options(disable=['fma'])\n", [(1, "nv_options", ("disable:fma",))]),
    ("import nvscope\ngetattr(nvscope, 'nv_options')(enable=['fuse_matmul'])\n",
     [(2, "nv_options", ("enable:fuse_matmul",))]),
    ("import nvscope\nopts = nvscope.nv_options\nwith opts(disable=['fma']): pass\n",
     [(3, "nv_options", ("disable:fma",))]),
    ("import os\nos.environ.__setitem__('NVFUSER_ENABLE', 'fuse_matmul')\n",
     [(2, "os.environ.__setitem__", ("enable:fuse_matmul",))]),
    ("import os\nKEY = 'NVFUSER_DISABLE'\n\ndef f():\n    os.environ[KEY] = 'fma'\n",
     [(5, "os.environ[...]", ("disable:fma",))]),
    ("import os\nos.environb[b'NVFUSER_ENABLE'] = b'fuse_matmul'\n",
     [(2, "os.environb[...]", ("enable:fuse_matmul",))]),
    ("import os\nos.environ['NVFUSER_DISABLE'], n = 'fma', 1\n", [(2, "os.environ[...]", ("disable:fma",))]),
    ("import os\nfrom unittest import mock\n"
     "with mock.patch.dict(os.environ, {'NVFUSER_ENABLE': 'fuse_matmul'}):\n    pass\n",
     [(3, "mock.patch.dict", ("enable:fuse_matmul",))]),
    ("from unittest.mock import patch\n@patch.dict('os.environ', NVFUSER_DISABLE='fma')\ndef test_a(): ...\n",
     [(2, "mock.patch.dict", ("disable:fma",))]),
    ("import os\ndef test_a(mocker):\n    mocker.patch.dict(os.environ, {'NVFUSER_DISABLE': 'fma'})\n",
     [(3, "mock.patch.dict", ("disable:fma",))]),
    ("import os\ndef test_a(monkeypatch):\n    monkeypatch.setitem(os.environ, 'NVFUSER_ENABLE', 'fuse_matmul')\n",
     [(3, "monkeypatch.setitem", ("enable:fuse_matmul",))]),
    ("import os\nos.execve('/bin/x', ['x'], {'NVFUSER_ENABLE': 'fuse_matmul'})\n",
     [(2, "os.execve env", ("enable:fuse_matmul",))]),
    ("import os\nos.system('NVFUSER_DISABLE=fma python t.py')\n", [(2, "shell assignment", ("disable:fma",))]),
    ("import subprocess\nsubprocess.run('nvscope run --enable fuse_matmul t.py', shell=True)\n",
     [(2, "nvscope run", ("enable:fuse_matmul",))]),
    # A rebinding shadows the code after it only; one in an `except`/`if` may not run, and `os.x = ...` rebinds
    # nothing; a function body above the import reads the import.
    ("from nvscope import nv_options\nnv_options(enable=['fuse_matmul'])\ndef nv_options(**k): ...\n",
     [(2, "nv_options", ("enable:fuse_matmul",))]),
    ("from mylib import nv_options\nnv_options(enable=['fast_math'])\nfrom nvscope import nv_options\n"
     "nv_options(enable=['fuse_matmul'])\n", [(4, "nv_options", ("enable:fuse_matmul",))]),
    ("try:\n    from nvscope import nv_options\nexcept ImportError:\n    nv_options = None\n"
     "nv_options(enable=['fuse_matmul'])\n", [(5, "nv_options", ("enable:fuse_matmul",))]),
    ("import os\nos.x = 1\nos.environ['NVFUSER_DISABLE'] = 'fma'\n", [(3, "os.environ[...]", ("disable:fma",))]),
    ("def step():\n    with nv_options(enable=['fuse_matmul']): pass\nfrom nvscope import nv_options\n",
     [(2, "nv_options", ("enable:fuse_matmul",))]),
]


@pytest.mark.parametrize(("source", "expected"), PYTHON_CASES, ids=[c[1][0][1] + f"-{i}" for i, c in
                                                                   enumerate(PYTHON_CASES)])
def test_python_constructs_are_found_with_their_names(tmp_path: Path, source: str, expected: list[object]) -> None:
    write(tmp_path, "mod.py", source)
    result = run(tmp_path)
    assert found(result) == expected
    assert all(f.path == "mod.py" and f.col >= 1 for f in result.findings)
    assert result.exit_code == 1


def test_one_path_may_be_given_alone(tmp_path: Path) -> None:
    write(tmp_path, "src/bench.py", "import nvscope\nnvscope.nv_options(enable=['fuse_matmul'])\n")
    listed = found(nvscope.check([tmp_path / "src"], nvfuser=RANGE))
    assert listed == [(2, "nv_options", ("enable:fuse_matmul",))]
    for alone in (str(tmp_path / "src"), tmp_path / "src", "src"):  # one path, not the characters of a str
        assert found(nvscope.check(alone, nvfuser=RANGE)) == listed


def test_empty_paths_and_ranges_are_refused_not_read_as_everything(tmp_path: Path) -> None:
    write(tmp_path, "bench.py", "import nvscope\nnvscope.nv_options(enable=['p2p_transport'])\n")
    with pytest.raises(FileNotFoundError, match="an empty path names no file or folder: give existing files"):
        nvscope.check([""])  # Path("") is ".": an unset shell variable would check the current folder
    with pytest.raises(ValueError, match="is not a version range"):
        nvscope.check(["."], nvfuser="")  # SpecifierSet("") admits every version


def test_columns_point_at_the_construct(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", "import nvscope\nx = 1; nvscope.nv_options(disable=['fma'])\n")
    (finding,) = run(tmp_path).findings
    assert (finding.line, finding.col) == (2, 8)


NOT_SETTING = [
    "import os\nos.environ.get('NVFUSER_ENABLE')\n'NVFUSER_DISABLE' in os.environ\ndel os.environ['NVFUSER_ENABLE']\n",
    "import os\nos.environ.pop('NVFUSER_ENABLE', None)\nx = os.getenv('NVFUSER_DISABLE', '')\n",
    "def test_a(monkeypatch):\n    monkeypatch.delenv('NVFUSER_ENABLE', raising=False)\n",
    "import nvscope\nnvscope.nv_options()\nnvscope.nv_options(enable=[], disable=None)\n",
    "import nvscope\nnvscope.set_development_mode(False)\nnvscope.set_development_mode(None)\n",
    "from nvscope import dev_mode\nwith dev_mode(False): pass\n",
    "import os\nos.environ['NVSCOPE_DEV'] = '0'\nos.environ['NVFUSER_ENABLE'] = ''\n",
    "fd.execute(inputs, _enable_options=[])\nthunder.jit(f, nv_enable_linear=False, nv_skip_cache=None)\n",
    "def nv_options(enable):\n    return enable\nnv_options(enable=['fma'])\n",  # not nvscope's
    "DOCS = {'nv_enable_linear': 'let nvFuser take linear', 'nv_enable_options': 'NVFUSER_ENABLE names'}\n",
    "NAMES = {'NVFUSER_ENABLE': 'enable'}\nFLAGS = ('--nv-enable', '--nv-disable')\n",
    "import subprocess\nsubprocess.run(['python', 'x.py'], env={'PATH': '/bin'})\n",
    "def f(*, _enable_options: list[str] = [], nv_enable_options=None): ...\n",
    # Putting back the value read before sets nothing.
    "import os\nold = os.environ.get('NVFUSER_ENABLE')\ntry:\n    pass\nfinally:\n    if old is None:\n"
    "        os.environ.pop('NVFUSER_ENABLE', None)\n    else:\n        os.environ['NVFUSER_ENABLE'] = old\n",
    "import os\ndef test_a(monkeypatch):\n    monkeypatch.setenv('NVFUSER_DISABLE', os.environ['NVFUSER_DISABLE'])\n",
    "import subprocess\nsubprocess.run(['echo', 'NVFUSER_ENABLE=fuse_matmul'])\n"
    "print('nvscope run --enable fma t.py')\n",
    # A false or None list sets nothing (Thunder reads `... or []`), however it is spelled.
    "import thunder\nthunder.jit(f, nv_enable_options=False, nv_disable_options=None)\n"
    "kw = dict(nv_enable_options=False)\nCONFIG = {'nv_disable_options': False}\nOFF = False\n"
    "thunder.jit(f, nv_enable_options=OFF)\n",
    # A top-level def, class, assignment or import of something else shadows nvscope's name for the code after it.
    "from nvscope import nv_options\ndef nv_options(**k): ...\nnv_options(enable=['fuse_matmul'])\n",
    "from nvscope import *\nclass OptionSet: ...\nOptionSet(enable=['fuse_matmul'])\n",
    "from nvscope import nv_options\nnv_options = make_options()\nwith nv_options(enable=['fuse_matmul']): pass\n",
    "import nvscope as ns\nfrom mylib import nv_options as opts\nfrom nvscope import nv_options as opts\n"
    "from .local import nv_options as opts\nopts(enable=['fuse_matmul'])\nns, x = other, 1\n"
    "ns.nv_options(disable=['fma'])\n",
]


@pytest.mark.parametrize("source", NOT_SETTING)
def test_reading_removing_or_setting_nothing_is_not_a_finding(tmp_path: Path, source: str) -> None:
    write(tmp_path, "mod.py", source)
    result = run(tmp_path)
    assert result.findings == () and result.exit_code == 0


def test_values_are_resolved_through_names_bound_once(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", """
        import os
        import nvscope
        BASE = ["fuse_matmul"]
        MORE = BASE + ["fast_math"]

        def step():
            extra = "static_fusion_count"
            with nvscope.nv_options(enable=[*MORE, extra]):
                pass
            new = "fuse_multiple_matmuls"
            os.environ["NVFUSER_ENABLE"] = f"{os.environ.get('NVFUSER_ENABLE', '')},{new}"
            os.environ["NVFUSER_DISABLE"] = ",".join(["fma", "kernel_reuse"])
        """)
    result = run(tmp_path)
    assert [(f.line, f.kind, f.options) for f in result.findings] == [
        (8, "option", ("enable:fuse_matmul", "enable:fast_math", "enable:static_fusion_count")),
        (11, "dynamic", ("enable:fuse_multiple_matmuls",)),  # the value read from the environment is not known
        (12, "option", ("disable:fma", "disable:kernel_reuse")),
    ]


def test_forwarding_a_callers_value_is_plumbing_and_does_not_fail(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", """
        import nvscope

        class Executor:
            def __call__(self, fd, inputs):
                return fd.execute(inputs, _enable_options=self.enable_options)

        def scoped(enable, **kwargs):
            return nvscope.nv_options(enable=enable, **kwargs)

        def execute(fd, _enable_options=()):
            return fd.execute([], _enable_options=_enable_options)
        """)
    result = run(tmp_path)
    assert [(f.line, f.kind) for f in result.findings] == [(5, "plumbing"), (8, "plumbing"), (11, "plumbing")]
    assert result.exit_code == 0 and result.failing == ()
    assert "forwards options its caller gives" in result.render(verbose=True)
    assert result.render() == result.summary()  # listed with verbose only


def test_values_not_known_before_the_run_are_dynamic(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", """
        import nvscope, pytest

        def choose(): ...
        nvscope.nv_options(enable=choose())

        @pytest.mark.parametrize("names", [["fast_math"]])
        def test_a(names):  # a test's parameters are pytest's, not a caller's: setting, not forwarding
            with nvscope.nv_options(enable=names):
                pass

        for name in ["fma", "fuse_matmul"]:
            nvscope.nv_options(disable=[name])
        """)
    result = run(tmp_path)
    assert [(f.line, f.kind) for f in result.findings] == [(4, "dynamic"), (8, "dynamic"), (12, "dynamic")]
    assert result.exit_code == 1


# --- other formats --------------------------------------------------------------------------------------------------

TEXT_CASES = [
    ("run.sh", "#!/bin/sh\nexport NVFUSER_ENABLE=fuse_matmul\necho $NVFUSER_ENABLE\n# export NVFUSER_DISABLE=fma\n"
               "NVFUSER_DISABLE='fma,kernel_reuse' python train.py\n",
     [(2, "shell export", ("enable:fuse_matmul",)), (5, "shell assignment", ("disable:fma", "disable:kernel_reuse"))]),
    ("train", "#!/usr/bin/env bash\nnvscope run --enable fuse_matmul \\\n  --disable fma train.py --enable x\n",
     [(2, "nvscope run", ("enable:fuse_matmul", "disable:fma"))]),
    ("Dockerfile", "FROM base\nENV NVFUSER_ENABLE=fuse_matmul\nENV NVFUSER_DISABLE fma\n"
                   "RUN NVFUSER_ENABLE=fast_math python -c pass\n",
     [(2, "Dockerfile ENV", ("enable:fuse_matmul",)), (3, "Dockerfile ENV", ("disable:fma",)),
      (4, "Dockerfile RUN", ("enable:fast_math",))]),
    ("Makefile", "NVFUSER_ENABLE := fuse_matmul\nexport NVFUSER_DISABLE ?= fma\nbench:\n\tpython b.py\n",
     [(1, "Makefile variable", ("enable:fuse_matmul",)), (2, "Makefile variable", ("disable:fma",))]),
    (".github/workflows/ci.yml", "env:\n  NVFUSER_ENABLE: fuse_matmul  # for speed\n  name: NVFUSER_DISABLE\n"
                                 "steps:\n  - run: NVFUSER_DISABLE=${{ matrix.x }} pytest --nv-disable fma\n",
     [(2, "YAML env", ("enable:fuse_matmul",)), (5, "YAML run", ()), (5, "pytest --nv-disable", ("disable:fma",))]),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = [\"-q\", \"--nv-enable\", \"fuse_matmul\"]\n",
     [(2, "pytest --nv-enable", ("enable:fuse_matmul",))]),
    ("tox.ini", "[testenv]\nsetenv =\n    NVFUSER_DISABLE=fma\n; NVFUSER_ENABLE=commented\n",
     [(3, "INI setting", ("disable:fma",))]),
    ("setup.cfg", "[tool:pytest]\naddopts = --nv-enable=fuse_matmul\n",
     [(2, "pytest --nv-enable", ("enable:fuse_matmul",))]),
    (".env", "NVSCOPE_DEV=1\nNVSCOPE_DEV=0\nNVFUSER_ENABLE=p2p_protocol(put)\n",
     [(1, ".env", ("NVSCOPE_DEV=1",)), (3, ".env", ("enable:p2p_protocol(put)",))]),
    ("flow.yml", "jobs:\n  t:\n    env: {NVFUSER_ENABLE: fuse_matmul, OTHER: 1}\n",
     [(3, "YAML env", ("enable:fuse_matmul",))]),
    ("block.yml", "env:\n  NVFUSER_DISABLE: >-\n    fma,\n    kernel_reuse\n  OTHER: x\n",
     [(2, "YAML env", ("disable:fma", "disable:kernel_reuse"))]),
    ("named.yml", "steps:\n  - name: bench with NVFUSER_ENABLE=fuse_matmul\n    description: NVFUSER_DISABLE=fma\n",
     []),
    ("tool.toml", '[tool.pytest.ini_options]\nenv = ["NVFUSER_DISABLE=fma", "OTHER=1"]\n',
     [(2, "TOML setting", ("disable:fma",))]),
    ("print.sh", 'echo "try NVFUSER_ENABLE=fuse_matmul"\necho "NVFUSER_DISABLE=fma" >> "$GITHUB_ENV"\n'
                 'echo NVFUSER_ENABLE=fast_math | tee -a "$GITHUB_ENV"\n',
     [(2, "shell assignment", ("disable:fma",)), (3, "shell assignment", ("enable:fast_math",))]),
    ("compose.yml", "services:\n  a:\n    environment:\n      - NVFUSER_ENABLE=fuse_matmul\n"
                    "      - 'NVFUSER_DISABLE=fma'\n",
     [(4, "YAML env", ("enable:fuse_matmul",)), (5, "YAML env", ("disable:fma",))]),
    ("gitlab.yml", "test:\n  script:\n    - NVFUSER_ENABLE=fuse_matmul python t.py\n",  # a command, not a list
     [(3, "YAML run", ("enable:fuse_matmul",))]),
    ("k8s.yaml", "spec:\n  containers:\n    - env:\n        - name: NVFUSER_ENABLE\n          value: fuse_matmul\n"
                 "        - name: OTHER\n          value: fma\n        - value: 'fma'\n"
                 "          name: \"NVFUSER_DISABLE\"\n        - name: NVSCOPE_DEV\n          valueFrom:\n"
                 "            secretKeyRef: {name: s, key: k}\n        - name: NVFUSER_DISABLE\n          value: >-\n"
                 "            kernel_reuse,\n            fma\n        - {name: NVFUSER_ENABLE, value: fast_math}\n"
                 "        - name: NVFUSER_ENABLE\n          value: \"\"\n",
     [(4, "YAML env", ("enable:fuse_matmul",)), (9, "YAML env", ("disable:fma",)), (10, "YAML env", ()),
      (13, "YAML env", ("disable:kernel_reuse", "disable:fma")), (17, "YAML env", ("enable:fast_math",))]),
    ("steps.yml", "steps:\n  - name: NVFUSER_ENABLE\n    run: echo hi\n  - name: x\n    value: fuse_matmul\n",
     []),  # a step named after the variable has no value of it
    ("Dockerfile.multi", "FROM x\nENV A=b NVFUSER_DISABLE=fma \\\n    NVFUSER_ENABLE=fuse_matmul\n",
     [(2, "Dockerfile ENV", ("disable:fma",)), (2, "Dockerfile ENV", ("enable:fuse_matmul",))]),
]


@pytest.mark.parametrize(("name", "text", "expected"), TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_shell_docker_make_yaml_toml_ini_env_files(tmp_path: Path, name: str, text: str,
                                                  expected: list[object]) -> None:
    write(tmp_path, name, text)
    result = run(tmp_path)
    assert found(result) == expected
    assert found(result, "name") == []  # p2p_protocol(put) is valid in the environment, with its arguments


def test_a_kubernetes_name_value_pair_is_allowed_by_a_comment_on_either_line(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", """
        env:
          - name: NVFUSER_ENABLE  # nvscope: allow profiling pod
            value: fuse_matmul
          - name: NVFUSER_DISABLE
            value: fma  # nvscope: allow ablation pod
          - name: NVFUSER_DISABLE
            value: kernel_reuse
        """)
    result = run(tmp_path)
    assert [(f.line, f.allowed, f.reason) for f in result.findings] == [
        (2, "comment", "profiling pod"), (4, "comment", "ablation pod"), (6, None, "")]


def test_a_notebooks_cells_magics_and_lines(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "source": ["NVFUSER_ENABLE=not_code\n"]},
        {"cell_type": "code", "source": ["import nvscope as ns\n", "%env NVFUSER_DISABLE=fma\n",
                                         "!NVFUSER_ENABLE=fuse_matmul python t.py\n"]},
        {"cell_type": "code", "source": ["%%time\n", "with ns.nv_options(disable=['fma']):  # nvscope: allow demo\n",
                                         "    pass\n"]},
        {"cell_type": "code", "source": ["%%bash\n", "export NVFUSER_DISABLE=kernel_reuse\n"]},
    ]
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    lines = path.read_text().splitlines()
    result = run(tmp_path)
    where = {f.construct: f.line for f in result.findings}
    assert set(where) == {"notebook %env", "notebook assignment", "nv_options", "notebook export"}
    assert "%env NVFUSER_DISABLE=fma" in lines[where["notebook %env"] - 1]  # lines of the .ipynb file
    assert "fuse_matmul" in lines[where["notebook assignment"] - 1]
    assert "ns.nv_options" in lines[where["nv_options"] - 1]  # the alias of another cell resolved
    scope = next(f for f in result.findings if f.construct == "nv_options")
    assert scope.allowed == "comment" and scope.reason == "demo"


# --- the catalog ----------------------------------------------------------------------------------------------------

def test_unknown_names_get_a_did_you_mean_in_the_syntax_of_their_place(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", "import nvscope, os\nnvscope.nv_options(enable=['fuse_matmu'])\n"
                              "os.environ['NVFUSER_ENABLE'] = 'fma'\n"
                              "nvscope.nv_options(enable=['p2p_protocol(put)'])\n")
    messages = [f.message for f in run(tmp_path).findings if f.kind == "name"]
    assert len(messages) == 3
    assert "unknown nvFuser enable option 'fuse_matmu'; did you mean 'fuse_matmul'" in messages[0]
    assert "'fma' is an nvFuser disable option, not an enable option: pass it as NVFUSER_DISABLE=fma" in messages[1]
    assert "per-call options carry no arguments" in messages[2]


def test_names_outside_the_configured_range_are_findings_even_where_allowed(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", '[tool.nvscope.check]\nnvfuser = ">=0.2.35"\nallow = ["bench/**"]\n')
    write(tmp_path, "bench/b.py", "import os\nos.environ['NVFUSER_ENABLE'] = 'p2p_transport(x),fuse_matmul'\n")
    result = nvscope.check([tmp_path])
    (version,) = [f for f in result.findings if f.kind == "version"]
    assert "'p2p_transport' exists only in nvFuser 0.2.36+ (nightlies from 2026-04-01); 0.2.35 is in the range" \
        in version.message
    assert version.failing and result.exit_code == 1
    assert [f.allowed for f in result.findings if f.kind == "option"] == ["config: bench/**"]
    assert ">=0.2.35" in result.nvfuser
    assert nvscope.check([tmp_path], nvfuser=">=0.2.36").exit_code == 0  # the command line's range wins
    assert "nightlies" not in nvscope.check([tmp_path], nvfuser="==0.2.36").render()
    early = nvscope.check([tmp_path], nvfuser=">=0.2.36.dev20260301")  # a range with nightlies before the day
    assert [f.kind for f in early.failing] == ["version"]


def test_a_range_the_catalog_does_not_cover_checks_names_against_the_whole_catalog(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", "import nvscope\nnvscope.nv_options(enable=['fuse_matmul', 'fuse_matmu'])\n")
    result = run(tmp_path, nvfuser=">=9")
    assert "holds no version the bundled catalog covers" in result.nvfuser
    assert [f.kind for f in result.findings] == ["option", "name"]


# --- allowances -----------------------------------------------------------------------------------------------------

def test_comments_allow_uses_with_reasons_and_strict_ignores_them(tmp_path: Path) -> None:
    write(tmp_path, "mod.py", """
        import nvscope
        nvscope.nv_options(disable=["fma"])  # nvscope: allow the fma ablation
        # nvscope: allow
        nvscope.nv_options(enable=["fuse_matmul"])
        nvscope.nv_options(
            disable=["fma"],
        )  # nvscope: allow closing line
        nvscope.nv_options(enable=["fuse_matmu"])  # nvscope: allow
        nvscope.nv_options(enable=["fuse_matmu"])  # nvscope: allow[name] testing the did-you-mean
        nvscope.nv_options(disable=["kernel_reuse"])
        """)
    result = run(tmp_path)
    shown = [(f.line, f.kind, f.allowed, f.reason) for f in result.findings]
    assert shown == [
        (2, "option", "comment", "the fma ablation"),
        (4, "option", "comment", ""),
        (5, "option", "comment", "closing line"),
        (8, "option", "comment", ""),
        (8, "name", None, ""),  # a plain allowance does not cover a bad name
        (9, "option", "comment", "testing the did-you-mean"),
        (9, "name", "comment", "testing the did-you-mean"),
        (10, "option", None, ""),
    ]
    assert [(f.line, f.kind) for f in result.failing] == [(8, "name"), (10, "option")]
    strict = run(tmp_path, strict=True)
    assert len(strict.failing) == len(strict.findings) == 8 and strict.strict
    assert "--strict: allowances ignored" in strict.summary()


def test_config_globs_allow_allow_names_and_exclude(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", """
        [project]
        name = "x"

        [tool.nvscope.check]
        allow = ["experiments/", "*.sh", "tests/**/test_*.py"]
        allow-names = ["tests/unit/test_names.py"]
        exclude = ["third_party/**"]
        """)
    use = "import nvscope\nnvscope.nv_options(enable=['fuse_matmu'])\n"
    write(tmp_path, "experiments/deep/a.py", use)
    write(tmp_path, "tools/run.sh", "export NVFUSER_DISABLE=fma\n")
    write(tmp_path, "tests/unit/test_names.py", use)
    write(tmp_path, "third_party/lib.py", use)
    write(tmp_path, "src/model.py", use)
    result = nvscope.check(["."], nvfuser=RANGE)
    summary = sorted((f.path, f.kind, f.allowed) for f in result.findings)
    assert summary == [
        ("experiments/deep/a.py", "name", None),
        ("experiments/deep/a.py", "option", "config: experiments/"),
        ("src/model.py", "name", None),
        ("src/model.py", "option", None),
        ("tests/unit/test_names.py", "name", "config: tests/unit/test_names.py"),
        ("tests/unit/test_names.py", "option", "config: tests/**/test_*.py"),
        ("tools/run.sh", "option", "config: *.sh"),
    ]
    assert result.config is not None and result.config.endswith("pyproject.toml")
    # A nested folder finds the table above it, and the globs stay relative to the pyproject.toml's folder.
    assert nvscope.check([tmp_path / "experiments"], nvfuser=RANGE).failing[0].kind == "name"


def test_config_errors_name_the_fix(tmp_path: Path) -> None:
    write(tmp_path, "a/pyproject.toml", '[tool.nvscope.check]\nalow = ["x"]\n')
    write(tmp_path, "b/pyproject.toml", '[tool.nvscope.check]\nallow = "x"\n')
    write(tmp_path, "c/pyproject.toml", '[tool.nvscope.check]\nnvfuser = "0.2.35+"\n')
    with pytest.raises(ValueError, match="has no key 'alow'; it takes nvfuser, allow, allow-names, exclude"):
        nvscope.check([tmp_path / "a"])
    with pytest.raises(ValueError, match=r'allow must be a list of path globs, e\.g\. allow = \["experiments/\*\*"\]'):
        nvscope.check([tmp_path / "b"])
    with pytest.raises(ValueError, match="is not a version range"):
        nvscope.check([tmp_path / "c"])
    with pytest.raises(FileNotFoundError):
        nvscope.check([tmp_path / "missing"])


# --- files that cannot be read, and files that are not read -----------------------------------------------------

def test_bad_files_are_noted_and_skipped_never_a_crash(tmp_path: Path) -> None:
    write(tmp_path, "binary.py", b"NVFUSER_ENABLE\x00\x01\x02")
    write(tmp_path, "latin1.sh", "export NVFUSER_DISABLE=fma  # caf\xe9\n".encode("latin-1"))
    write(tmp_path, "broken.py", "import nvscope\nnvscope.nv_options(enable=[\n")
    write(tmp_path, "nb.ipynb", '{"cells": [NVFUSER_ENABLE')
    write(tmp_path, "cookie.py", "# -*- coding: latin-1 -*-\nimport nvscope\nnvscope.nv_options(disable=['fma'])"
                                 "  # caf\xe9\n".encode("latin-1"))
    result = run(tmp_path)
    notes = {n.path: n.message for n in result.notes}
    assert set(notes) == {"binary.py", "latin1.sh", "broken.py", "nb.ipynb"}
    assert "binary" in notes["binary.py"] and "not UTF-8" in notes["latin1.sh"]
    assert "line 2" in notes["broken.py"] and "skipped" in notes["nb.ipynb"]
    assert found(result) == [(3, "nv_options", ("disable:fma",))]  # its coding cookie is honoured
    assert "4 notes" in result.summary()


def _within(seconds: float, call: Callable[[], CheckResult]) -> CheckResult:
    """The call's result; fails (rather than hangs) when it takes longer, as a read of a FIFO would."""
    out: list[CheckResult | BaseException] = []

    def target() -> None:
        try:
            out.append(call())
        except BaseException as error:  # a crash is reported as the test's failure, not lost in the thread
            out.append(error)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"nvscope.check did not return within {seconds} s"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


USE = "import nvscope\nnvscope.nv_options(disable=['fma'])\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and symbolic links as on POSIX")
def test_odd_files_are_notes_never_a_crash_nor_a_hang(tmp_path: Path) -> None:
    write(tmp_path, "deep_sum.py", "import os\nos.environ['NVFUSER_ENABLE'] = " + " + ".join(["'a'"] * 30000) + "\n")
    write(tmp_path, "deep_attr.py", "import nvscope\nx = a" + ".b" * 20000 + "\n")
    write(tmp_path, "deep_lambda.py", "import nvscope\nf = " + "lambda: " * 400 + "nvscope.nv_options(disable=[])\n"
                                      "nvscope.nv_options(disable=['fma'])\n")
    write(tmp_path, "late_nul.py", b"import nvscope\n" + b"#" * 9000 + b"\x00\n")
    write(tmp_path, "crlf.py", b"import os\r\nos.environ['NVFUSER_DISABLE'] = 'fma'  # nvscope: allow crlf\r\n")
    write(tmp_path, "bom.sh", "\ufeffexport NVFUSER_DISABLE=fma\r\n".encode())
    write(tmp_path, "folder.py/inner.py", USE)  # a folder named like a module: walked
    os.mkfifo(tmp_path / "fifo.sh")
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    os.symlink("..", tmp_path / "folder.py" / "up")  # a link to a folder above: not followed
    result = _within(60, lambda: run(tmp_path))
    notes = {n.path: n.message for n in result.notes}
    # Python 3.10's parser takes a 20,000-deep attribute chain (3.11's refuses it): a module without a use is read.
    deep_attr = {"deep_attr.py"} if sys.version_info >= (3, 11) else set(notes) & {"deep_attr.py"}
    assert set(notes) == {"deep_sum.py", "late_nul.py", "fifo.sh"} | deep_attr
    assert "nested too deeply" in notes["deep_sum.py"] and "null bytes" in notes["late_nul.py"]
    assert "not a regular file" in notes["fifo.sh"]
    assert [(f.path, f.line, f.allowed) for f in result.findings] == [
        ("bom.sh", 1, None), ("crlf.py", 2, "comment"), ("deep_lambda.py", 3, None),
        (str(Path("folder.py/inner.py")), 2, None)]
    named = _within(30, lambda: nvscope.check([tmp_path / "fifo.sh", tmp_path / "loop_a.py", tmp_path / "folder.py"],
                                              nvfuser=RANGE))
    assert [n.message.split(" (")[0] for n in named.notes] == ["not a regular file",
                                                               "a symbolic link to nothing"]
    assert [f.path for f in named.findings] == [str(Path("folder.py/inner.py"))]


def test_a_large_tree_read_in_several_processes_gives_the_same_result(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """From PARALLEL files on, forked processes read the files: the result is the one a single process gives, in
    the same order, notes and allowances included."""
    from nvscope._check import _files as _check_files

    for i, (source, _) in enumerate(PYTHON_CASES * 3):
        write(tmp_path, f"pkg{i % 7}/m{i}.py", source + ("# nvscope: allow\n" if i % 5 == 0 else ""))
    for name, text, _ in TEXT_CASES:
        write(tmp_path, f"conf/{name}", text)
    write(tmp_path, "bad/broken.py", "import nvscope\nnvscope.nv_options(enable=[\n")
    write(tmp_path, "bad/binary.py", b"NVFUSER_ENABLE\x00")
    for i in range(40):
        write(tmp_path, f"plain/p{i}.py", "def f():\n    return 1\n")
    alone = run(tmp_path)
    monkeypatch.setattr(_check_files, "PARALLEL", 1)
    if sys.platform.startswith("linux") and len(os.sched_getaffinity(0)) >= 2:
        assert _check_files._jobs(2) >= 2  # the pool is used here, not skipped
    pooled = run(tmp_path)
    assert pooled.to_dict() == alone.to_dict()
    assert alone.files > 100 and len(alone.notes) == 2 and alone.findings


def test_files_without_a_word_a_finding_needs_are_not_parsed(tmp_path: Path) -> None:
    write(tmp_path, "broken_but_irrelevant.py", "def f(:\n")  # would be a syntax error note if parsed
    write(tmp_path, "notes.txt", "NVFUSER_ENABLE=fma\n")  # no reader reads .txt
    result = run(tmp_path)
    assert result.notes == () and result.findings == ()
    assert (result.files, result.read) == (1, 0)


def test_vcs_environment_and_build_folders_are_not_walked(tmp_path: Path) -> None:
    use = "import nvscope\nnvscope.nv_options(disable=['fma'])\n"
    for folder in (".git", "node_modules", "build", "dist", ".tox", "pkg.egg-info", "myenv"):
        write(tmp_path, f"{folder}/x.py", use)
    write(tmp_path, "myenv/pyvenv.cfg", "home = /usr\n")
    write(tmp_path, "src/x.py", use)
    assert [f.path for f in run(tmp_path).findings] == [str(Path("src/x.py"))]
    assert [f.path for f in nvscope.check([tmp_path / "build" / "x.py"], nvfuser=RANGE).findings] == \
        [str(Path("build/x.py"))]  # named explicitly: read


# --- the result's formats ---------------------------------------------------------------------------------------

def test_text_json_and_github_renderings(tmp_path: Path) -> None:
    write(tmp_path, "a b.py", "import nvscope\nnvscope.nv_options(enable=['fuse_matmu'])\n"
                              "nvscope.nv_options(disable=['fma'])  # nvscope: allow why: because\n")
    result = run(tmp_path)
    text = result.render().splitlines()
    assert text[0] == "a b.py:2:1: nv_options: enable:fuse_matmu: sets nvFuser developer options"
    assert text[1].startswith("a b.py:2:1: nv_options: enable:fuse_matmu: unknown nvFuser enable option")
    assert text[-1] == result.summary() == ("nvscope check: 2 failing (1 name, 1 option), 1 allowed, 0 plumbing; "
                                            "1 files (1 read), 0 notes")
    assert "[allowed by comment: why: because]" in result.render(verbose=True)
    document = json.loads(result.to_json())
    assert document["counts"]["by_construct"] == {"nv_options": {"failing": 1, "allowed": 1}}
    assert [f["failing"] for f in document["findings"]] == [True, True, False]
    github = result.render_github().splitlines()
    assert github[0] == ("::error file=a b.py,line=2,col=1,title=nvscope check (option)::nv_options: "
                         "enable:fuse_matmu: sets nvFuser developer options")
    assert github[1].startswith("::error file=a b.py,line=2,col=1,title=nvscope check (name)::")
    assert len(github) == 3


# --- properties -----------------------------------------------------------------------------------------------------

ENABLE = st.lists(st.sampled_from(["fuse_matmul", "fast_math", "static_fusion_count", "id_model"]), max_size=4,
                  unique=True)
DISABLE = st.lists(st.sampled_from(["fma", "kernel_reuse", "matmul_expr_eval", "id_model"]), max_size=4, unique=True)
IMPORTS = {
    "import nvscope\n": "nvscope.nv_options",
    "import nvscope as ns\n": "ns.nv_options",
    "from nvscope import nv_options as opts\n": "opts",
    "from nvscope import *\n": "nv_options",
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(style=st.sampled_from(sorted(IMPORTS)), enable=ENABLE, disable=DISABLE, by_name=st.booleans(),
       as_tuple=st.booleans())
def test_the_names_found_are_the_names_written(tmp_path: Path, style: str, enable: list[str], disable: list[str],
                                               by_name: bool, as_tuple: bool) -> None:
    """Model: whatever the import style and literal spelling, the finding lists exactly the names written (in
    order), or there is none when both lists are empty."""
    spell = (lambda names: repr(tuple(names))) if as_tuple else repr
    if by_name:
        source = f"{style}E = {spell(enable)}\nD = {spell(disable)}\n{IMPORTS[style]}(enable=E, disable=D)\n"
    else:
        source = f"{style}{IMPORTS[style]}({spell(enable)}, {spell(disable)})\n"
    write(tmp_path, "prop.py", source)
    expected = tuple(f"enable:{n}" for n in enable) + tuple(f"disable:{n}" for n in disable)
    assert [f.options for f in run(tmp_path).findings if f.kind == "option"] == ([expected] if expected else [])


# A module's top-level statements that bind `nv_options`, and a call of it; what the call is in the reference model.
BINDINGS = {
    "from nvscope import nv_options\n": "nvscope",
    "from nvscope import *\n": "nvscope",
    "import nvscope\nnv_options = nvscope.nv_options\n": "nvscope",
    "from mylib import nv_options\n": "other",
    "def nv_options(**kwargs): ...\n": "other",
    "class nv_options: ...\n": "other",
    "nv_options = make()\n": "other",
    "nv_options, n = make(), 1\n": "other",
    "if flag:\n    nv_options = None\n": None,  # may not run: shadows nothing
}
CALL = "nv_options(enable=['fuse_matmul'])\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(st.sampled_from([*BINDINGS, CALL]), min_size=1, max_size=8))
def test_a_call_counts_by_the_binding_in_force_where_it_is(tmp_path: Path, program: list[str]) -> None:
    """Model: top-level statements in order; a call counts when the last binding above it (before any: the first
    binding, as a function body above an import reads it) is nvscope's."""
    source, line, expected = "", 1, []
    bound = [BINDINGS[s] for s in program if s != CALL and BINDINGS[s] is not None]
    current = bound[0] if bound else None
    for statement in program:
        if statement == CALL and current == "nvscope":
            expected.append((line, "nv_options", ("enable:fuse_matmul",)))
        elif statement != CALL and BINDINGS[statement] is not None:
            current = BINDINGS[statement]
        source += statement
        line += statement.count("\n")
    write(tmp_path, "mod.py", source)
    assert found(run(tmp_path)) == expected


def test_importing_nvscope_does_not_import_the_checkers_modules() -> None:
    code = ("import sys, nvscope; heavy = [m for m in ('ast', 'tomllib', 'nvscope._check._check') "
            "if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("NVSCOPE_")})
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
