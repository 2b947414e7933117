"""nv_options as a context manager: validation, merging, restoring, re-entrancy, exit order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from typing import Any

import pytest

import nvscope
from nvscope import OptionSet, UnknownOptionError, current_options, nv_options

NONE = OptionSet()


def test_no_scope_by_default() -> None:
    assert current_options() == NONE
    assert current_options() is current_options()  # the hot path allocates nothing


def test_enter_activates_and_returns_the_effective_set() -> None:
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]) as active:
        assert active == OptionSet(enable=["fuse_matmul"], disable=["matmul_expr_eval"])
        assert current_options() == active
        assert isinstance(current_options(), OptionSet)
    assert current_options() == NONE


def test_a_str_is_one_option() -> None:
    with nv_options(enable="fuse_matmul", disable="matmul_expr_eval") as active:
        assert active.enable == frozenset({"fuse_matmul"})
        assert active.disable == frozenset({"matmul_expr_eval"})


def test_iterables_of_names_are_accepted() -> None:
    names = iter(["fuse_matmul", "kernel_profile"])
    scope = nv_options(enable=names, disable={"fallback"})
    assert scope.options == OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["fallback"])
    assert nv_options(enable=("fuse_matmul",)).options == OptionSet(enable=["fuse_matmul"])
    assert nv_options(enable=frozenset({"fuse_matmul"})).options == OptionSet(enable=["fuse_matmul"])


def test_surrounding_whitespace_is_not_part_of_the_name() -> None:
    assert nv_options(enable=[" fuse_matmul\n"]).options == OptionSet(enable=["fuse_matmul"])


def test_empty_scope() -> None:
    with nv_options() as active:
        assert active == NONE
        assert current_options() == NONE
    with nv_options(enable=[], disable=()) as active:
        assert active == NONE


def test_nesting_merges_per_list() -> None:
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        with nv_options(enable=["kernel_profile"], disable=["fallback"]) as inner:
            expected = OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["matmul_expr_eval", "fallback"])
            assert inner == expected
            assert current_options() == expected
            with nv_options(enable=["fuse_matmul"]) as same:  # adds nothing
                assert same == expected
        assert current_options() == OptionSet(enable=["fuse_matmul"], disable=["matmul_expr_eval"])
    assert current_options() == NONE


def test_empty_inner_scope_keeps_the_outer_options() -> None:
    with nv_options(enable=["fuse_matmul"]) as outer, nv_options() as inner:
        assert inner == outer
        assert current_options() == outer


def test_inherit_false_starts_empty() -> None:
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        with nv_options(enable=["kernel_profile"], inherit=False) as inner:
            assert inner == OptionSet(enable=["kernel_profile"])
            assert current_options() == inner
            with nv_options(disable=["fallback"]) as innermost:  # merges with the inherit=False scope only
                assert innermost == OptionSet(enable=["kernel_profile"], disable=["fallback"])
        with nv_options(inherit=False):
            assert current_options() == NONE
        assert current_options() == OptionSet(enable=["fuse_matmul"], disable=["matmul_expr_eval"])


@pytest.mark.parametrize("inherit", [0, 1, None, "no"])
def test_inherit_must_be_a_bool(inherit: Any) -> None:
    with pytest.raises(TypeError, match="inherit"):
        nv_options(enable=["fuse_matmul"], inherit=inherit)


def test_properties_and_repr() -> None:
    scope = nv_options(enable=["kernel_profile", "fuse_matmul"], disable="fallback", inherit=False)
    assert scope.options == OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["fallback"])
    assert scope.inherit is False
    assert repr(scope) == "nv_options(enable=['fuse_matmul', 'kernel_profile'], disable=['fallback'], inherit=False)"
    assert repr(nv_options(enable="fuse_matmul")) == "nv_options(enable=['fuse_matmul'], disable=[])"


class Boom(Exception):
    pass


def test_exit_restores_on_exception() -> None:
    with nv_options(enable=["fuse_matmul"]):
        with pytest.raises(Boom), nv_options(disable=["fallback"], enable=["kernel_profile"]):
            assert current_options().disable == {"fallback"}
            raise Boom
        assert current_options() == OptionSet(enable=["fuse_matmul"])
    assert current_options() == NONE


def test_exit_does_not_swallow_exceptions() -> None:
    scope = nv_options(enable=["fuse_matmul"])
    scope.__enter__()
    assert not scope.__exit__(Boom, Boom(), None)
    assert current_options() == NONE
    with pytest.raises(KeyboardInterrupt), scope:
        raise KeyboardInterrupt
    assert current_options() == NONE


def test_same_object_nested_in_itself() -> None:
    a = nv_options(enable=["fuse_matmul"])
    b = nv_options(disable=["fallback"])
    with a as first:
        with b, a as again:
            assert again == OptionSet(enable=["fuse_matmul"], disable=["fallback"])
            with a, a:
                assert current_options() == again
            assert current_options() == again
        assert current_options() == first
        with a:
            assert current_options() == first
        assert current_options() == first
    assert current_options() == NONE


def test_same_object_entered_again_after_exit() -> None:
    a = nv_options(enable=["fuse_matmul"])
    for _ in range(3):
        with a:
            assert current_options() == OptionSet(enable=["fuse_matmul"])
        assert current_options() == NONE


def test_out_of_order_exit_raises_and_changes_nothing() -> None:
    a = nv_options(enable=["fuse_matmul"])
    b = nv_options(enable=["kernel_profile"])
    a.__enter__()
    b.__enter__()
    both = current_options()
    with pytest.raises(RuntimeError, match="reverse order"):
        a.__exit__(None, None, None)
    assert current_options() == both  # nothing changed
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert current_options() == NONE


def test_exit_without_enter_raises() -> None:
    with pytest.raises(RuntimeError):
        nv_options(enable=["fuse_matmul"]).__exit__(None, None, None)
    a = nv_options(enable=["fuse_matmul"])
    with a:
        with pytest.raises(RuntimeError):
            nv_options(enable=["fuse_matmul"]).__exit__(None, None, None)  # an equal but different object
        assert current_options() == OptionSet(enable=["fuse_matmul"])


def test_exit_twice_raises() -> None:
    a = nv_options(enable=["fuse_matmul"])
    a.__enter__()
    a.__exit__(None, None, None)
    with pytest.raises(RuntimeError):
        a.__exit__(None, None, None)
    assert current_options() == NONE


BAD_INPUTS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"enable": b"fuse_matmul"}, TypeError, "bytes"),
    ({"enable": memoryview(b"fuse_matmul")}, TypeError, "memoryview (bytes-like"),
    ({"disable": memoryview(b"fallback")}, TypeError, "decode it first, e.g. disable='fallback'"),
    ({"enable": [memoryview(b"fuse_matmul")]}, TypeError, "decode bytes first"),
    ({"enable": "x" * 10_000}, UnknownOptionError, "10000-character name 'xxxx"),
    ({"enable": "id_model", "disable": ["id_model"]}, ValueError, "'id_model' in both enable= and disable="),
    ({"enable": ["id_model", "infer_contiguity"], "disable": ["infer_contiguity", "id_model"]}, ValueError,
     "'id_model', 'infer_contiguity' in both"),
    ({"disable": bytearray(b"fallback")}, TypeError, "bytearray"),
    ({"enable": {"fuse_matmul": True}}, TypeError, "dict"),
    ({"enable": 1}, TypeError, "int"),
    ({"enable": None}, TypeError, "None"),
    ({"disable": None}, TypeError, "None"),
    ({"enable": 1.5}, TypeError, "1.5"),
    ({"enable": [1]}, TypeError, "1"),
    ({"enable": ["fuse_matmul", None]}, TypeError, "None"),
    ({"enable": [b"fuse_matmul"]}, TypeError, "b'fuse_matmul'"),
    ({"enable": [""]}, ValueError, "''"),
    ({"disable": ["  "]}, ValueError, "'  '"),
    ({"enable": ""}, ValueError, "''"),
    ({"enable": ["a,b"]}, ValueError, "'a,b'"),
    ({"enable": "fuse_matmul,kernel_profile"}, ValueError, "fuse_matmul,kernel_profile"),
    ({"enable": "fuse_matmul matmul_expr_eval"}, ValueError, "fuse_matmul matmul_expr_eval"),
    ({"disable": ["matmul_expr_eval\tfallback"]}, ValueError, "matmul_expr_eval"),
    ({"enable": ["no_such_option"]}, UnknownOptionError, "no_such_option"),
    ({"enable": ["fuse_matmull"]}, UnknownOptionError, "fuse_matmull"),
    ({"enable": ["fuse_matmul", "fuse_matmull"]}, UnknownOptionError, "fuse_matmull"),
    ({"enable": ["matmul_expr_eval"]}, UnknownOptionError, "matmul_expr_eval"),
    ({"disable": ["fuse_matmul"]}, UnknownOptionError, "fuse_matmul"),
    ({"enable": ["p2p_protocol"]}, UnknownOptionError, "p2p_protocol"),
    ({"enable": ["wait_debugger"]}, UnknownOptionError, "wait_debugger"),
    ({"enable": ["p2p_protocol(put)"]}, UnknownOptionError, "p2p_protocol"),
    ({"enable": "FUSE_MATMUL"}, UnknownOptionError, "FUSE_MATMUL"),
]


def input_id(kwargs: dict[str, Any]) -> str:
    """A stable, short test id: no memory addresses (memoryview's repr), no 10,000 characters."""
    return re.sub(r"<memory at 0x[0-9a-f]+>", "memoryview", repr(kwargs))[:80]


@pytest.mark.parametrize(("kwargs", "error", "mention"), BAD_INPUTS, ids=[input_id(k) for k, _, _ in BAD_INPUTS])
@pytest.mark.parametrize("outer", [None, ("fuse_matmul",)], ids=["no-outer", "outer"])
def test_bad_input_raises_at_construction_and_changes_nothing(
    kwargs: dict[str, Any], error: type[Exception], mention: str, outer: tuple[str, ...] | None
) -> None:
    def check() -> None:
        before = current_options()
        with pytest.raises(error) as info:
            nv_options(**kwargs)
        assert type(info.value) is error or (error is ValueError and isinstance(info.value, ValueError))
        assert mention in str(info.value)
        assert current_options() == before
        # the same through the decorator factory
        with pytest.raises(error):
            nvscope.with_nv_options(**kwargs)
        assert current_options() == before

    if outer is None:
        check()
    else:
        with nv_options(enable=outer, disable=["fallback"]):
            check()
            assert current_options() == OptionSet(enable=outer, disable=["fallback"])


@pytest.mark.parametrize("value", ["x" * 10_000, ["fuse_matmul", "y" * 10_000], "a," * 5_000, [1.5] * 5_000,
                                   object.__new__(type("Huge", (), {"__repr__": lambda self: "z" * 10_000}))])
def test_messages_do_not_echo_huge_arguments(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        nv_options(enable=value)
    assert len(str(info.value)) < 400, str(info.value)


def test_memoryview_message_says_what_is_wrong() -> None:
    with pytest.raises(TypeError) as info:
        nv_options(enable=memoryview(b"fuse_matmul"))
    message = str(info.value)
    assert "int" not in message.replace("ints", "") and "102" not in message  # not "got int: 102" (the first byte)
    assert "enable='fuse_matmul'" in message
    with pytest.raises(TypeError, match=r"decode it first$"):  # not decodable: no example
        nv_options(enable=memoryview(b"\xff\xfe"))


def test_an_inner_scope_asking_the_opposite_of_an_outer_one_wins_for_that_name() -> None:
    """Only one scope's own lists must not overlap; an inner scope may ask the opposite of an outer one, and then the
    inner request replaces the outer one: nesting never produces what one scope refuses (both lists at once)."""
    with nv_options(enable=["id_model", "fuse_matmul"]) as outer:
        with nv_options(disable=["id_model"]) as inner:
            assert inner == OptionSet(enable=["fuse_matmul"], disable=["id_model"])
            with nv_options(enable=["id_model"]) as innermost:
                assert innermost == outer
        assert nvscope.current_options() == outer


def test_unknown_option_error_is_a_value_error() -> None:
    assert issubclass(UnknownOptionError, ValueError)


def test_several_names_error_suggests_a_list() -> None:
    with pytest.raises(ValueError, match=r"\['fuse_matmul', 'matmul_expr_eval'\]"):
        nv_options(enable="fuse_matmul matmul_expr_eval")


def test_validation_happens_before_enter() -> None:
    # an iterable that would be consumed at enter time would be too late; construction must consume it
    consumed = []

    def names() -> Any:
        consumed.append(True)
        yield "fuse_matmul"

    scope = nv_options(enable=names())
    assert consumed == [True]
    with scope:
        assert current_options() == OptionSet(enable=["fuse_matmul"])
    with scope:  # the generator is not consumed twice
        assert current_options() == OptionSet(enable=["fuse_matmul"])


def test_enter_hooks_run_for_non_empty_scopes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvscope._core import _scope as scope_module

    calls: list[OptionSet] = []
    monkeypatch.setattr(scope_module, "ENTER_HOOKS", [lambda: calls.append(current_options())])
    with nv_options():
        pass
    assert calls == []
    with nv_options(enable=["fuse_matmul"]):
        pass
    assert calls == [NONE]  # called before the scope is active


def test_a_hook_registered_twice_runs_once_per_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvscope._core import _lazy, _scope, on_enter

    calls: list[OptionSet] = []

    def hook() -> None:
        calls.append(current_options())

    hooks: list[object] = []
    monkeypatch.setattr(_lazy, "ENTER_HOOKS", hooks)
    monkeypatch.setattr(_scope, "ENTER_HOOKS", hooks)
    on_enter(hook)
    on_enter(hook)
    with nv_options(enable=["fuse_matmul"]):
        pass
    assert calls == [NONE]


def test_a_hook_registered_by_name_loads_at_the_first_non_empty_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvscope._core import _lazy, _scope, on_enter

    calls: list[OptionSet] = []
    module = types.ModuleType("nvscope_test_hooks")
    module.hook = lambda: calls.append(current_options())  # type: ignore[attr-defined]
    hooks: list[object] = []
    monkeypatch.setattr(_lazy, "ENTER_HOOKS", hooks)
    monkeypatch.setattr(_scope, "ENTER_HOOKS", hooks)
    on_enter("nvscope_test_hooks:hook")
    on_enter("nvscope_test_hooks:hook")
    with nv_options():
        pass  # an empty scope calls no hook: the module need not exist yet
    monkeypatch.setitem(sys.modules, "nvscope_test_hooks", module)
    with nv_options(enable=["fuse_matmul"]):
        pass
    assert calls == [NONE]


def test_import_nvscope_registers_the_adapters_installation_by_name() -> None:
    code = ("import sys, nvscope; from nvscope._core._lazy import ENTER_HOOKS, load; print(ENTER_HOOKS); "
            "print('nvscope._exec._autoinstall' in sys.modules); from nvscope._exec import _autoinstall; "
            "print(load(ENTER_HOOKS[0]) is _autoinstall.ensure_adapters)")
    env = {k: v for k, v in os.environ.items() if k != "NVSCOPE_SHARE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split("\n")[:3] == ["['nvscope._exec._autoinstall:ensure_adapters']", "False", "True"]


def test_a_failing_enter_hook_enters_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from nvscope._core import _scope as scope_module

    def hook() -> None:
        if current_options():
            raise Boom

    monkeypatch.setattr(scope_module, "ENTER_HOOKS", [hook])
    with nv_options(disable=["fallback"]):
        with pytest.raises(Boom), nv_options(enable=["fuse_matmul"]):
            pass
        assert current_options() == OptionSet(disable=["fallback"])


def test_share_true_under_share_0_warns_at_the_users_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSCOPE_SHARE", "0")
    nvscope.uninstall()  # the warning is said once until uninstall
    with pytest.warns(nvscope.ConfigWarning, match="NVSCOPE_SHARE=0 turns sharing off") as record:
        nv_options(share=True)
    nvscope.uninstall()
    with pytest.warns(nvscope.ConfigWarning, match="NVSCOPE_SHARE=0 turns sharing off") as decorated:
        nvscope.with_nv_options(share=True)
    assert [warning.filename for warning in (*record, *decorated)] == [__file__, __file__]
