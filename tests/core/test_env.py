"""The NVSCOPE_* environment variables: one parser; a bad value warns (naming the variable, the value and what is
accepted) and the default applies; never an error at import, so never a dead pytest session; `nvscope doctor` (in
test_cli.py) and ``problems()`` report them.

The parser is nvscope's internal ``nvscope._core._env`` (imported inside the tests); where a variable has a public
effect (``NVSCOPE_DEV`` and `nvscope.is_development_mode`) that is asserted too.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import nvscope

REPO = Path(__file__).resolve().parents[2]
FLAG_ACCEPTED = "1/true/yes/on or 0/false/no/off"
_unique = itertools.count()


def env_module() -> ModuleType:
    from nvscope._core import _env

    return _env


def fresh(value: str) -> str:
    """``value`` made unique to this call, since a refused value warns once per process."""
    return f"{value}{next(_unique)}"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "PYTHON", "NVFUSER_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


@pytest.mark.parametrize("value", ["0", "-3", "abc", "8.5", ""])
def test_a_bad_value_breaks_neither_import_nor_a_pytest_session(tmp_path: Path, value: str) -> None:
    env = clean_env(NVSCOPE_MAX_PARTITIONS=value, NVSCOPE_DEV="maybe", NVSCOPE_AUTOINSTALL="sometimes",
                    NVSCOPE_SHARE="sometimes")  # NVSCOPE_SHARE is read at import (for =all): quietly
    imported = subprocess.run([sys.executable, "-W", "error", "-c",
                               "import nvscope, nvscope.pytest_plugin, nvscope.cli"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr == ""  # nothing read the values yet: nothing to say
    (tmp_path / "test_plain.py").write_text("def test_it():\n    pass\n")
    session = subprocess.run([sys.executable, "-m", "pytest", "-p", "nvscope.pytest_plugin", "-p", "no:cacheprovider",
                              "-q", "test_plain.py"], env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert session.returncode == 0, session.stdout + session.stderr
    assert "1 passed" in session.stdout


def test_a_refused_value_prints_as_one_line_located_in_the_environment(tmp_path: Path) -> None:
    used = subprocess.run([sys.executable, "-c", "import nvscope\nwith nvscope.nv_options(share=True): pass"],
                          env=clean_env(NVSCOPE_SHARE="sometimes"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert used.returncode == 0, used.stderr
    assert used.stderr.splitlines() == ["<environment>:0: ConfigWarning: NVSCOPE_SHARE='sometimes' is not "
                                        "1/true/yes/on, 0/false/no/off or all; using the default (True)"]


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("False", False), ("no", False), ("OFF", False),
])
def test_flag_values(monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool) -> None:
    monkeypatch.setenv("NVSCOPE_DEV", raw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env_module().flag("NVSCOPE_DEV") is expected
        with nvscope.dev_mode(None):  # follow the environment
            assert nvscope.is_development_mode() is expected


def test_an_empty_flag_is_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_AUTOINSTALL", "")  # default on
    monkeypatch.setenv("NVSCOPE_STRICT", "")  # default off
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env_module().flag("NVSCOPE_AUTOINSTALL") is True
        assert env_module().flag("NVSCOPE_STRICT") is False


@pytest.mark.parametrize("name", ["NVSCOPE_DEV", "NVSCOPE_STRICT", "NVSCOPE_AUTOINSTALL", "NVSCOPE_REPRO",
                                  "NVSCOPE_TRUST_NVFUSER"])
@pytest.mark.parametrize("bad", ["maybe", "2", "of", "yes please"])
def test_a_bad_flag_warns_and_its_default_applies(monkeypatch: pytest.MonkeyPatch, name: str, bad: str) -> None:
    _env = env_module()
    default = _env.VARIABLES[name][1]
    value = fresh(bad)
    monkeypatch.setenv(name, value)
    with pytest.warns(nvscope.ConfigWarning) as caught:
        assert _env.flag(name) is default  # not "off" for anything unrecognised
    (warning,) = caught
    assert str(warning.message) == f"{name}={value!r} is not {FLAG_ACCEPTED}; using the default ({default!r})"


@pytest.mark.parametrize(("raw", "expected"), [("1", 1), ("8", 8), (" 32 ", 32)])
def test_count_values(monkeypatch: pytest.MonkeyPatch, raw: str, expected: int) -> None:
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", raw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env_module().integer("NVSCOPE_MAX_PARTITIONS") == expected


# Values no other test uses: a refused value warns once per process, so sharing one would make tests order-dependent.
@pytest.mark.parametrize("bad", ["000", "-37", "abc_env", "8.25", "1e3", "+4", "   ", "\t"])
def test_a_bad_count_warns_and_its_default_applies(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    _env = env_module()
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", bad)
    message = f"NVSCOPE_MAX_PARTITIONS={bad!r} is not a positive integer; using the default (8)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _env.integer("NVSCOPE_MAX_PARTITIONS") == 8
    assert [str(w.message) for w in caught] == [message]
    assert ("NVSCOPE_MAX_PARTITIONS", message) in _env.problems()


# Non-ASCII digits: str.isdigit() accepts them all; int() refuses '²' (a crash, not a warning) and reads '٣' as 3.
@pytest.mark.parametrize("bad", ["\u00b2", "\u0663", "\uff13", "1\u00b2", "\u0968"])
def test_a_count_takes_ascii_digits_only(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    _env = env_module()
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", bad)
    message = f"NVSCOPE_MAX_PARTITIONS={bad!r} is not a positive integer; using the default (8)"
    assert ("NVSCOPE_MAX_PARTITIONS", message) in _env.problems()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _env.integer("NVSCOPE_MAX_PARTITIONS") == 8
    assert [str(w.message) for w in caught] == [message]


def test_doctor_and_search_survive_a_superscript_count(tmp_path: Path) -> None:
    env = clean_env(NVSCOPE_MAX_PARTITIONS="\u00b2", PYTHONIOENCODING="utf-8")
    doctor = subprocess.run([sys.executable, "-m", "nvscope", "doctor"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, encoding="utf-8", timeout=120)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    assert "warn  NVSCOPE_MAX_PARTITIONS='\u00b2' is not a positive integer; using the default (8)" in \
        doctor.stdout.splitlines(), doctor.stdout
    # A step that runs no fusion: the search reads NVSCOPE_MAX_PARTITIONS on the way and then refuses the step in
    # one line (its ValueError), which is as far as a CPU machine without nvFuser can take it.
    search = subprocess.run([sys.executable, "-c", "import nvscope, warnings\n"
                             "warnings.simplefilter('ignore')\n"
                             "try:\n"
                             "    nvscope.search(lambda: None, candidates=['fast_math'], rounds=6, "
                             "steps_per_round=1, warmup=0, progress=False)\n"
                             "except ValueError as error:\n"
                             "    print('refused:', error)\n"],
                            env=env, cwd=tmp_path, capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert search.returncode == 0, search.stderr
    assert "Traceback" not in search.stderr, search.stderr
    assert search.stdout.startswith("refused: search: no nvFuser fusion ran"), search.stdout


def test_a_refused_value_warns_once_and_a_new_one_warns_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _env = env_module()
    first, second = fresh("bogus"), fresh("bogus")
    monkeypatch.setenv("NVSCOPE_STRICT", first)
    with pytest.warns(nvscope.ConfigWarning, match=first):
        _env.flag("NVSCOPE_STRICT")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _env.flag("NVSCOPE_STRICT") is False  # the same value again: silent
    monkeypatch.setenv("NVSCOPE_STRICT", second)
    with pytest.warns(nvscope.ConfigWarning, match=second):
        _env.flag("NVSCOPE_STRICT")


def test_a_long_value_is_cut_in_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_DEV", "x" * 5000 + fresh(""))
    with pytest.warns(nvscope.ConfigWarning) as caught:
        env_module().flag("NVSCOPE_DEV")
    assert len(str(caught[0].message)) < 200


def test_text_takes_any_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_REPRO_DIR", " /tmp/some where ")
    assert env_module().text("NVSCOPE_REPRO_DIR") == "/tmp/some where"


def test_problems_lists_refused_values_and_unknown_names(monkeypatch: pytest.MonkeyPatch) -> None:
    _env = env_module()
    for name in list(os.environ):
        if name.startswith("NVSCOPE_"):
            monkeypatch.delenv(name)
    assert _env.problems() == []
    monkeypatch.setenv("NVSCOPE_DEV", "1")
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "4")
    assert _env.problems() == []  # valid values are no problem
    monkeypatch.setenv("NVSCOPE_MAX_PARTITIONS", "-3")
    monkeypatch.setenv("NVSCOPE_DEVV", "1")
    found = dict(_env.problems())
    assert set(found) == {"NVSCOPE_MAX_PARTITIONS", "NVSCOPE_DEVV"}
    assert found["NVSCOPE_MAX_PARTITIONS"] == ("NVSCOPE_MAX_PARTITIONS='-3' is not a positive integer; "
                                               "using the default (8)")
    assert found["NVSCOPE_DEVV"].startswith("NVSCOPE_DEVV is not a variable nvscope reads (known: NVSCOPE_DEV, ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _env.problems()  # reporting does not warn


def test_every_variable_is_declared_with_a_kind_a_default_and_a_description() -> None:
    for name, (kind, default, description) in env_module().VARIABLES.items():
        assert name.startswith("NVSCOPE_") and name.isupper()
        assert kind in ("flag", "count", "text", "share")
        assert isinstance(default, {"flag": bool, "count": int, "text": str, "share": bool}[kind])
        assert description.strip()


def test_every_variable_nvscope_reads_is_documented() -> None:
    """docs/environment.md claims to list every NVSCOPE_* variable: each one declared or read in nvscope/ has a row."""
    import re

    _env = env_module()
    read = set(_env.VARIABLES)
    for path in (REPO / "nvscope").glob("*.py"):
        read |= set(re.findall(r"_env\.(?:flag|integer|text)\(\s*\"(NVSCOPE_\w+)\"", path.read_text()))
    assert {"NVSCOPE_DEV", "NVSCOPE_MAX_PARTITIONS", "NVSCOPE_REPRO_DIR"} <= read  # the scan finds them
    assert read <= set(_env.VARIABLES), read - set(_env.VARIABLES)  # a variable read is a variable declared
    rows = set(re.findall(r"^\| `(NVSCOPE_\w+)` \|", (REPO / "docs" / "environment.md").read_text(), re.M))
    assert read - rows == set(), f"docs/environment.md lacks {sorted(read - rows)}"
    assert rows - read == set(), f"docs/environment.md lists variables nvscope does not read: {sorted(rows - read)}"


@pytest.mark.parametrize(("raw", "all_"), [("all", True), ("ALL", True), ("1", False), ("0", False), ("", False)])
def test_share_takes_a_flag_or_all(monkeypatch: pytest.MonkeyPatch, raw: str, all_: bool) -> None:
    _env = env_module()
    monkeypatch.setenv("NVSCOPE_SHARE", raw)
    assert _env.share_all() is all_ and _env.flag("NVSCOPE_SHARE") is (raw != "0")
    monkeypatch.setenv("NVSCOPE_SHARE", "most")
    assert dict(_env.problems())["NVSCOPE_SHARE"] == ("NVSCOPE_SHARE='most' is not 1/true/yes/on, 0/false/no/off or "
                                                      "all; using the default (True)")
