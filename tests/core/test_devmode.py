"""Development mode: the warning (category, attribution to the user's line, once per call site), NVSCOPE_DEV,
set_development_mode, NVSCOPE_STRICT; and that ``import nvscope`` stays light.

Each policy case runs in a fresh interpreter with no NVSCOPE_* variables, so that the once-per-call-site warning
registry, the environment and the development-mode switch start clean.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import nvscope

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSCOPE_", "PYTHON", "NVFUSER_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_script(tmp_path: Path, source: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-W", "default", str(script)],
        env=clean_env(**env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def line_of(tmp_path: Path, marker: str) -> int:
    """The 1-based line of script.py that contains ``marker``."""
    lines = (tmp_path / "script.py").read_text().splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if marker in line]
    return number


def warning_sites(stderr: str) -> list[tuple[str, int]]:
    """(file name, line) of every DevelopmentModeWarning printed by the default warning formatter."""
    return [(Path(f).name, int(n)) for f, n in re.findall(r"^(.*?):(\d+): DevelopmentModeWarning", stderr, re.M)]


def test_warning_category_and_attribution(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope
        with nvscope.nv_options(enable=["fuse_matmul"]):  # HERE
            pass
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    line = line_of(tmp_path, "# HERE")
    assert f"script.py:{line}: DevelopmentModeWarning" in result.stderr, result.stderr
    assert warning_sites(result.stderr) == [("script.py", line)]
    assert "NVFUSER_ENABLE=fuse_matmul" in result.stderr
    assert "nvscope" + os.sep not in result.stderr.split("DevelopmentModeWarning")[0]
    assert "contextlib" not in result.stderr


def test_warning_is_a_user_warning_and_can_be_caught(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import warnings
        import nvscope
        assert issubclass(nvscope.DevelopmentModeWarning, UserWarning)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with nvscope.nv_options(disable="matmul_expr_eval"):  # HERE
                pass
        (w,) = caught
        assert w.category is nvscope.DevelopmentModeWarning, w.category
        print(w.filename, w.lineno)
    """)
    assert result.returncode == 0, result.stderr
    filename, lineno = result.stdout.split()
    assert Path(filename) == tmp_path / "script.py"
    assert int(lineno) == line_of(tmp_path, "# HERE")


def test_once_per_call_site_in_a_loop(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope
        scope = nvscope.nv_options(enable=["fuse_matmul"])
        for _ in range(3):
            with scope:  # HERE
                pass
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [("script.py", line_of(tmp_path, "# HERE"))]


def test_two_call_sites_two_warnings(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope
        for _ in range(3):
            with nvscope.nv_options(enable=["fuse_matmul"]):  # FIRST
                pass
            with nvscope.nv_options(enable=["fuse_matmul"]):  # SECOND
                pass
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [
        ("script.py", line_of(tmp_path, "# FIRST")),
        ("script.py", line_of(tmp_path, "# SECOND")),
    ]


def test_decorated_function_is_attributed_to_the_call_line(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope

        @nvscope.with_nv_options(enable=["fuse_matmul"])
        def step():
            return nvscope.current_options()

        for _ in range(2):
            step()  # CALL1
        step()  # CALL2
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [
        ("script.py", line_of(tmp_path, "# CALL1")),
        ("script.py", line_of(tmp_path, "# CALL2")),
    ]


def test_decorated_generator_is_attributed_to_the_consumer_line(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope

        @nvscope.with_nv_options(enable=["fuse_matmul"])
        def gen():
            yield 1

        it = gen()
        next(it)  # NEXT
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [("script.py", line_of(tmp_path, "# NEXT"))]


def test_decorated_coroutine_is_attributed_to_the_user(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import asyncio
        import nvscope

        @nvscope.with_nv_options(enable=["fuse_matmul"])
        async def step():
            return nvscope.current_options()

        async def main():
            await step()  # AWAIT

        asyncio.run(main())
        asyncio.run(step())  # TASK
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [
        ("script.py", line_of(tmp_path, "# AWAIT")),
        ("script.py", line_of(tmp_path, "# TASK")),  # not asyncio/events.py
    ]


def test_decorated_generator_warns_once_not_at_every_step_or_close(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope

        @nvscope.with_nv_options(enable=["fuse_matmul"])
        def gen():
            while True:
                yield 1

        it = gen()
        next(it)  # FIRST
        next(it)  # SECOND
        it.close()
        it = gen()
        next(it)  # THIRD
        # left open: closed at garbage collection, which must neither warn nor raise
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [
        ("script.py", line_of(tmp_path, "# FIRST")),
        ("script.py", line_of(tmp_path, "# THIRD")),
    ]
    assert "Exception ignored" not in result.stderr


def test_attribution_through_a_user_contextmanager(tmp_path: Path) -> None:
    """contextlib frames are skipped too: the warning names the user's generator line that enters the scope."""
    result = run_script(tmp_path, """\
        import contextlib
        import nvscope

        @contextlib.contextmanager
        def developer_flags():
            with nvscope.nv_options(enable=["fuse_matmul"]):  # ENTER
                yield

        with developer_flags():
            pass
    """)
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [("script.py", line_of(tmp_path, "# ENTER"))]


ENTER_ONCE = """\
    import warnings
    import nvscope
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with nvscope.nv_options(enable=["fuse_matmul"]) as active:
            assert nvscope.current_options() == active
    print(sum(issubclass(w.category, nvscope.DevelopmentModeWarning) for w in caught), nvscope.is_development_mode())
"""


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_nvscope_dev_env_silences_the_warning(tmp_path: Path, value: str) -> None:
    result = run_script(tmp_path, ENTER_ONCE, NVSCOPE_DEV=value)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0 True\n"


@pytest.mark.parametrize("value", ["0", "", "no"])
def test_nvscope_dev_env_off_values_still_warn(tmp_path: Path, value: str) -> None:
    result = run_script(tmp_path, ENTER_ONCE, NVSCOPE_DEV=value)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 False\n"


def test_set_development_mode_silences_the_warning_and_returns_the_previous_value(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import warnings
        import nvscope
        assert nvscope.set_development_mode(True) is None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", nvscope.NoFusionWarning)  # no adapter here: not the subject
            with nvscope.nv_options(enable=["fuse_matmul"]):
                pass
            assert caught == [], caught
            assert nvscope.set_development_mode(False) is True
            with nvscope.nv_options(enable=["fuse_matmul"]):
                pass
            assert len(caught) == 1
            assert nvscope.set_development_mode(None) is False
        print("ok")
    """, NVSCOPE_DEV="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_set_development_mode_false_overrides_the_env(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope
        nvscope.set_development_mode(False)
        with nvscope.nv_options(enable=["fuse_matmul"]):  # HERE
            pass
    """, NVSCOPE_DEV="1")
    assert result.returncode == 0, result.stderr
    assert warning_sites(result.stderr) == [("script.py", line_of(tmp_path, "# HERE"))]


def test_set_development_mode_rejects_non_bools() -> None:
    with pytest.raises(TypeError):
        nvscope.set_development_mode(1)  # type: ignore[arg-type]
    assert nvscope.is_development_mode() is True  # the conftest fixture's setting is intact


def test_strict_mode_raises_before_entering(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import warnings
        import nvscope
        warnings.simplefilter("error")  # strict mode must raise its own error, not a warning
        warnings.simplefilter("ignore", nvscope.NoFusionWarning)  # no adapter here: said once, not the subject
        assert issubclass(nvscope.DevelopmentModeError, Exception)
        outer = nvscope.OptionSet()
        with nvscope.nv_options():  # an empty scope is fine even under strict mode
            pass
        try:
            with nvscope.nv_options(enable=["fuse_matmul"]):
                raise SystemExit("the body ran")
        except nvscope.DevelopmentModeError as error:
            assert "NVSCOPE_STRICT" in str(error), error
        assert nvscope.current_options() == outer, nvscope.current_options()

        @nvscope.with_nv_options(disable=["matmul_expr_eval"])
        def f():
            raise SystemExit("the decorated body ran")
        try:
            f()
        except nvscope.DevelopmentModeError:
            pass
        assert nvscope.current_options() == outer
        nvscope.set_development_mode(True)
        with nvscope.nv_options(enable=["fuse_matmul"]) as active:
            assert active == nvscope.OptionSet(enable=["fuse_matmul"])
        print("ok")
    """, NVSCOPE_STRICT="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert "DevelopmentModeWarning" not in result.stderr


def test_strict_mode_inside_an_active_scope_leaves_it_unchanged(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import os
        import nvscope
        nvscope.set_development_mode(True)
        with nvscope.nv_options(disable=["fallback"]) as outer:
            nvscope.set_development_mode(None)  # follow the env again: NVSCOPE_STRICT=1, no NVSCOPE_DEV
            try:
                with nvscope.nv_options(enable=["fuse_matmul"]):
                    pass
            except nvscope.DevelopmentModeError:
                pass
            else:
                raise SystemExit("no DevelopmentModeError")
            assert nvscope.current_options() == outer
            with nvscope.nv_options():  # the outer scope can still be nested and exited normally
                assert nvscope.current_options() == outer
        assert nvscope.current_options() == nvscope.OptionSet()
        print("ok")
    """, NVSCOPE_STRICT="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_environment_is_read_at_each_entry(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import os
        import warnings
        import nvscope
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", nvscope.NoFusionWarning)  # no adapter here: not the subject
            with nvscope.nv_options(enable=["fuse_matmul"]):
                pass
            os.environ["NVSCOPE_DEV"] = "1"
            with nvscope.nv_options(enable=["fuse_matmul"]):
                pass
        print(len(caught))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1\n"


def test_empty_scopes_never_warn(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import nvscope
        with nvscope.nv_options():
            pass
        with nvscope.nv_options(enable=[], disable=[], inherit=False):
            pass

        @nvscope.with_nv_options()
        def f():
            return 1

        f()
        print("ok")
    """, NVSCOPE_STRICT="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    result = run_script(tmp_path, """\
        import nvscope
        with nvscope.nv_options():
            pass
    """)
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.no_development_mode
def test_in_process_warning_outside_development_mode() -> None:
    with nvscope.dev_mode(False):
        with pytest.warns(nvscope.DevelopmentModeWarning) as record:
            with nvscope.nv_options(enable=["fuse_matmul"]):
                pass
        assert len(record) == 1
        assert record[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with nvscope.nv_options():  # empty: no warning even when warnings are errors
                pass


def test_dev_mode_restores_the_previous_setting_also_on_error() -> None:
    assert nvscope.is_development_mode() is True  # the conftest fixture's setting
    with pytest.raises(KeyError), nvscope.dev_mode(False):
        assert nvscope.is_development_mode() is False
        with nvscope.dev_mode():  # nested, and on by default
            assert nvscope.is_development_mode() is True
        assert nvscope.is_development_mode() is False
        raise KeyError
    assert nvscope.is_development_mode() is True


@pytest.mark.no_development_mode
def test_dev_mode_is_context_local_over_the_process_wide_default() -> None:
    """``dev_mode`` sets this context's mode only: a thread running meanwhile and one started inside the block see
    the process-wide default; ``set_development_mode`` changes that default, which a ``dev_mode`` block overrides."""
    import threading

    def in_thread() -> bool:
        seen: list[bool] = []
        thread = threading.Thread(target=lambda: seen.append(nvscope.is_development_mode()))
        thread.start()
        thread.join(30)
        return seen[0]

    previous = nvscope.set_development_mode(False)
    try:
        go, done, during = threading.Event(), threading.Event(), []

        def running() -> None:
            go.wait(30)
            during.append(nvscope.is_development_mode())
            done.set()

        meanwhile = threading.Thread(target=running)
        meanwhile.start()
        with nvscope.dev_mode(True):
            go.set()
            done.wait(30)
            assert nvscope.is_development_mode() is True
            assert in_thread() is False
            assert nvscope.set_development_mode(True) is False  # the default changes; this block still says True
            assert in_thread() is True
            with nvscope.dev_mode(False):
                assert nvscope.is_development_mode() is False
                assert in_thread() is True
        meanwhile.join(30)
        assert during == [False]
        assert nvscope.is_development_mode() is True  # the process-wide default set inside the block stays
        with pytest.raises(TypeError, match="dev_mode takes True, False or None"):
            with nvscope.dev_mode(1):  # type: ignore[arg-type]
                pass
    finally:
        nvscope.set_development_mode(previous)


def test_import_is_light(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""\
            import sys
            import nvscope
            heavy = sorted(m for m in sys.modules
                           if m.split(".")[0] in ("torch", "thunder", "numpy") or m.startswith("nvfuser"))
            print(heavy)
        """)],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


def test_import_leaves_the_option_table_to_its_first_use(tmp_path: Path) -> None:
    """The catalog's table and class load at the first `catalog()` (or name check), not at ``import nvscope``."""
    result = run_script(tmp_path, """\
        import sys
        import nvscope
        table = ("nvscope._core._catalog", "nvscope._core._catalog_data", "nvscope._core._catalog_probe")
        print([m for m in table if m in sys.modules])
        print(nvscope.catalog().get("enable", "fuse_matmul").name, nvscope.OptionInfo.__name__)
        print([m for m in table[:2] if m not in sys.modules])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\nfuse_matmul OptionInfo\n[]\n"


def test_scopes_do_not_import_heavy_modules(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import sys
        import nvscope
        nvscope.set_development_mode(True)
        with nvscope.nv_options(enable=["fuse_matmul"]):
            pass
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "thunder") or m.startswith("nvfuser")))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


def test_no_adapter_is_said_once_per_process_not_at_every_scope(tmp_path: Path) -> None:
    result = run_script(tmp_path, """\
        import warnings
        import nvscope
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                with nvscope.nv_options(enable=["fuse_matmul"]):
                    pass
        print(sum("no nvscope adapter is installed" in str(w.message) for w in caught))
    """, NVSCOPE_DEV="1", NVSCOPE_AUTOINSTALL="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1\n"
