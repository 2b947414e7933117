"""OptionSet: the immutable, hashable value every scope and per-fusion cache is keyed by."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvscope import OptionSet

EMPTY = OptionSet()


def test_fields_are_frozensets_of_the_names() -> None:
    s = OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=("matmul_expr_eval",))
    assert s.enable == frozenset({"fuse_matmul", "kernel_profile"})
    assert s.disable == frozenset({"matmul_expr_eval"})
    assert isinstance(s.enable, frozenset)
    assert isinstance(s.disable, frozenset)


def test_defaults_are_empty_and_falsy() -> None:
    s = OptionSet()
    assert s.enable == frozenset()
    assert s.disable == frozenset()
    assert not s
    assert s == EMPTY
    assert OptionSet(enable=["a"])
    assert OptionSet(disable=["a"])


def test_a_str_is_one_name_not_its_characters() -> None:
    s = OptionSet(enable="fuse_matmul", disable="fallback")
    assert s.enable == frozenset({"fuse_matmul"})
    assert s.disable == frozenset({"fallback"})


def test_equality_ignores_order_and_duplicates() -> None:
    a = OptionSet(enable=["x", "y", "x"], disable=["z"])
    b = OptionSet(enable=("y", "x"), disable={"z"})
    assert a == b
    assert not (a != b)
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert {a: 1}[b] == 1


@pytest.mark.parametrize(
    "other",
    [
        OptionSet(enable=["x"]),  # missing y
        OptionSet(enable=["x", "y"], disable=["z", "w"]),
        OptionSet(enable=["z"], disable=["x", "y"]),  # lists swapped
        OptionSet(),
    ],
)
def test_inequality(other: OptionSet) -> None:
    s = OptionSet(enable=["x", "y"], disable=["z"])
    assert s != other
    assert other != s


def test_enable_and_disable_are_not_interchangeable() -> None:
    assert OptionSet(enable=["a"]) != OptionSet(disable=["a"])


def test_comparison_with_other_types() -> None:
    s = OptionSet(enable=["a"])
    assert s != {"a"}
    assert s != ({"a"}, set())
    assert s is not None and s != None  # noqa: E711
    assert s.__eq__(object()) is NotImplemented


@pytest.mark.parametrize("attr", ["enable", "disable", "_hash", "new_attribute"])
def test_setattr_raises(attr: str) -> None:
    s = OptionSet(enable=["a"], disable=["b"])
    with pytest.raises(AttributeError):
        setattr(s, attr, frozenset({"c"}))
    assert s == OptionSet(enable=["a"], disable=["b"])


@pytest.mark.parametrize("attr", ["enable", "disable"])
def test_delattr_raises(attr: str) -> None:
    s = OptionSet(enable=["a"], disable=["b"])
    with pytest.raises(AttributeError):
        delattr(s, attr)
    assert s.enable == frozenset({"a"})
    assert s.disable == frozenset({"b"})


def test_no_instance_dict() -> None:
    s = OptionSet(enable=["a"])
    assert not hasattr(s, "__dict__")


def test_input_iterable_is_copied() -> None:
    names = ["a"]
    s = OptionSet(enable=names)
    names.append("b")
    assert s.enable == frozenset({"a"})


def test_union_merges_per_list() -> None:
    a = OptionSet(enable=["e1"], disable=["d1"])
    b = OptionSet(enable=["e2"], disable=["d1", "d2"])
    expected = OptionSet(enable=["e1", "e2"], disable=["d1", "d2"])
    assert a.union(b) == expected
    assert a | b == expected
    assert b | a == expected
    # the operands are unchanged
    assert a == OptionSet(enable=["e1"], disable=["d1"])
    assert b == OptionSet(enable=["e2"], disable=["d1", "d2"])


def test_union_returns_self_when_other_adds_nothing() -> None:
    a = OptionSet(enable=["e1", "e2"], disable=["d1"])
    assert a.union(OptionSet(enable=["e1"])) is a
    assert a.union(OptionSet(disable=["d1"])) is a
    assert a.union(EMPTY) is a
    assert a.union(OptionSet()) is a
    assert a | OptionSet(enable=["e2"], disable=["d1"]) is a
    same_value = OptionSet(enable=["e2", "e1"], disable=["d1"])
    assert a.union(same_value) is a


def test_union_returns_other_when_self_adds_nothing() -> None:
    small = OptionSet(enable=["e1"])
    big = OptionSet(enable=["e1", "e2"], disable=["d1"])
    assert small.union(big) is big
    assert EMPTY.union(big) is big


def test_union_is_a_new_value_when_both_add_something() -> None:
    a = OptionSet(enable=["e1"])
    b = OptionSet(disable=["d1"])
    u = a | b
    assert u is not a and u is not b
    assert u == OptionSet(enable=["e1"], disable=["d1"])


def test_union_memo_is_by_value_and_bounded() -> None:
    a = OptionSet(enable=["base"])
    first = a | OptionSet(enable=["x"])
    assert a | OptionSet(enable=["x"]) is first  # memoised: an equal operand gives the same object back
    assert a.union(OptionSet(enable=["x"])) is first
    # Bounded: an operand used once is not kept alive for ever by the memo of a long-lived left operand.
    once = OptionSet(disable=["used_once"])
    gone = weakref.ref(once)
    assert a | once == OptionSet(enable=["base"], disable=["used_once"])
    del once
    # many distinct operands: the results stay correct however many there are
    for i in range(2000):
        assert a | OptionSet(disable=[f"d{i}"]) == OptionSet(enable=["base"], disable=[f"d{i}"])
    gc.collect()
    assert gone() is None
    assert a | OptionSet(enable=["x"]) == first


@pytest.mark.parametrize("other", [("x",), {"b"}, frozenset({"b"}), "fuse_matmul", None, 1])
def test_union_rejects_non_optionsets_with_a_type_error(other: object) -> None:
    s = OptionSet(enable=["a"])
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \|: 'OptionSet' and"):
        s | other  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \|"):
        other | s  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"OptionSet\.union takes an OptionSet, not .*OptionSet\(enable="):
        s.union(other)  # type: ignore[arg-type]
    assert s == OptionSet(enable=["a"])


def test_as_env_only_nonempty_keys_sorted_and_comma_joined() -> None:
    assert OptionSet().as_env() == {}
    assert OptionSet(enable=["b", "a"]).as_env() == {"NVFUSER_ENABLE": "a,b"}
    assert OptionSet(disable=["z", "c"]).as_env() == {"NVFUSER_DISABLE": "c,z"}
    assert OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["matmul_expr_eval"]).as_env() == {
        "NVFUSER_ENABLE": "fuse_matmul,kernel_profile",
        "NVFUSER_DISABLE": "matmul_expr_eval",
    }


def test_as_env_sorts_many_names() -> None:
    # with eight names a set's iteration order is very unlikely to be sorted by chance (hash seeds vary per run)
    names = ["h_opt", "c_opt", "a_opt", "g_opt", "e_opt", "b_opt", "f_opt", "d_opt"]
    env = OptionSet(enable=names, disable=reversed(names)).as_env()
    assert env["NVFUSER_ENABLE"] == ",".join(sorted(names))
    assert env["NVFUSER_DISABLE"] == ",".join(sorted(names))
    assert OptionSet(enable=names).as_shell() == "NVFUSER_ENABLE=" + ",".join(sorted(names))


def test_as_env_returns_a_fresh_dict() -> None:
    s = OptionSet(enable=["a"])
    env = s.as_env()
    env["NVFUSER_ENABLE"] = "mutated"
    assert s.as_env() == {"NVFUSER_ENABLE": "a"}


def test_as_shell() -> None:
    assert OptionSet().as_shell() == ""
    assert OptionSet(enable=["b", "a"], disable=["c"]).as_shell() == "NVFUSER_ENABLE=a,b NVFUSER_DISABLE=c"
    assert OptionSet(enable=["a"]).as_shell() == "NVFUSER_ENABLE=a"
    assert OptionSet(disable=["c", "b"]).as_shell() == "NVFUSER_DISABLE=b,c"


def test_label_is_the_short_form_for_messages() -> None:
    assert OptionSet(enable=["b", "a"], disable=["d", "c"]).label() == "+a +b -c -d"
    assert OptionSet(disable=["fma"]).label() == "-fma"
    assert OptionSet(enable=["fuse_matmul"]).label() == "+fuse_matmul"
    assert OptionSet().label() == "(none)"  # never an empty string in a message


def test_process_options_shell_quotes_each_value() -> None:
    from nvscope._core._optionset import process_options_shell

    assert process_options_shell({}) == ""
    assert process_options_shell({"NVFUSER_DISABLE": "", "PATH": "/bin"}) == ""  # empty is unset
    # Options with arguments are kept (the whole process has them), as one shell word each.
    environ = {"NVFUSER_DISABLE": "kernel_reuse", "NVFUSER_ENABLE": "p2p_protocol(put),fuse_matmul"}
    expected = "NVFUSER_ENABLE='p2p_protocol(put),fuse_matmul' NVFUSER_DISABLE=kernel_reuse"
    assert process_options_shell(environ) == expected


def test_sorted_lists() -> None:
    s = OptionSet(enable=["b", "a"], disable=["d", "c"])
    assert s.enable_list() == ["a", "b"]
    assert s.disable_list() == ["c", "d"]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_roundtrip(protocol: int) -> None:
    s = OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["matmul_expr_eval"])
    t = pickle.loads(pickle.dumps(s, protocol=protocol))
    assert type(t) is OptionSet
    assert t == s
    assert hash(t) == hash(s)
    assert t.enable == s.enable and t.disable == s.disable
    with pytest.raises(AttributeError):
        t.enable = frozenset()  # type: ignore[misc]


def test_pickle_empty() -> None:
    assert pickle.loads(pickle.dumps(OptionSet())) == OptionSet()


def test_copy_and_deepcopy() -> None:
    s = OptionSet(enable=["a"], disable=["b"])
    assert copy.copy(s) == s
    assert copy.deepcopy(s) == s


def test_repr_is_readable_and_sorted() -> None:
    s = OptionSet(enable=["kernel_profile", "fuse_matmul"], disable=["matmul_expr_eval"])
    assert repr(s) == "OptionSet(enable=['fuse_matmul', 'kernel_profile'], disable=['matmul_expr_eval'])"
    assert repr(OptionSet()) == "OptionSet(enable=[], disable=[])"


def test_repr_evaluates_back_to_an_equal_value() -> None:
    s = OptionSet(enable=["b", "a"], disable=["c"])
    assert eval(repr(s), {"OptionSet": OptionSet}) == s


# --- parse, from_env, thunder_kwargs --------------------------------------------------------------------------------

CODEGEN = OptionSet(enable=["fuse_matmul", "kernel_profile"], disable=["matmul_expr_eval"])
NAMES = st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True), max_size=4)


def test_parse_reads_a_shell_line() -> None:
    assert OptionSet.parse("NVFUSER_ENABLE=fuse_matmul,kernel_profile NVFUSER_DISABLE=matmul_expr_eval") == CODEGEN
    assert OptionSet.parse("  NVFUSER_DISABLE='matmul_expr_eval'\tNVFUSER_ENABLE=\"kernel_profile,fuse_matmul\"") == \
        CODEGEN
    assert OptionSet.parse("NVFUSER_ENABLE=fuse_matmul") == OptionSet(enable=["fuse_matmul"])
    assert OptionSet.parse("") == OptionSet() == OptionSet.parse("NVFUSER_ENABLE= NVFUSER_DISABLE=")


@given(enable=NAMES, disable=NAMES)
def test_parse_and_from_env_invert_as_shell_and_as_env(enable: list[str], disable: list[str]) -> None:
    options = OptionSet(enable, disable)
    assert OptionSet.parse(options.as_shell()) == options
    assert OptionSet.from_env(options.as_env()) == options


@pytest.mark.parametrize(("line", "message"), [
    ("NVFUSER_ENABLE=a NVFUSER_ENABLE=b", "NVFUSER_ENABLE is given twice in 'NVFUSER_ENABLE=a NVFUSER_ENABLE=b': give "
                                          "it once, with the names separated by commas"),
    ("NVFUSER_ENABLED=fuse_matmul", "'NVFUSER_ENABLED=fuse_matmul' is not an NVFUSER_ENABLE=... or "
                                    "NVFUSER_DISABLE=... assignment; the line holds only those, e.g. "
                                    "'NVFUSER_ENABLE=fuse_matmul NVFUSER_DISABLE=matmul_expr_eval'"),
    ("NVFUSER_ENABLE=fuse_matmul python train.py", "'python' is not an NVFUSER_ENABLE=... or NVFUSER_DISABLE=..."),
    ("export NVFUSER_ENABLE=fuse_matmul", "'export' is not an NVFUSER_ENABLE=... or NVFUSER_DISABLE=..."),
    ("NVFUSER_ENABLE 'fuse_matmul'", "'NVFUSER_ENABLE' is not an NVFUSER_ENABLE=... or NVFUSER_DISABLE=..."),
    ("NVFUSER_ENABLE='fuse_matmul", "is not a shell line (No closing quotation): close the quote"),
    ("NVFUSER_ENABLE=fuse_matmul,,kernel_profile", "NVFUSER_ENABLE='fuse_matmul,,kernel_profile' has an empty name: "
                                                   "separate names with single commas"),
    ("NVFUSER_DISABLE=matmul_expr_eval,", "NVFUSER_DISABLE='matmul_expr_eval,' has an empty name"),
    ("NVFUSER_ENABLE='fuse_matmul, kernel_profile'", "' kernel_profile' is not an option name (letters, digits and "
                                                     "underscores): separate names with commas and no spaces"),
    ("NVFUSER_ENABLE=fuse-matmul", "'fuse-matmul' is not an option name (letters, digits and underscores): "
                                   "nvFuser's option names use underscores"),
    ("NVFUSER_ENABLE='fuse_matmul,p2p_protocol(put)'", "'p2p_protocol' takes arguments, which an OptionSet (and so a "
                                                       "scope) cannot carry: set that option in the environment"),
])
def test_parse_refuses_a_malformed_line_naming_the_fix(line: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        OptionSet.parse(line)
    assert message in str(raised.value)


def test_parse_takes_a_str() -> None:
    with pytest.raises(TypeError, match=r"OptionSet\.parse takes a str such as 'NVFUSER_ENABLE=fuse_matmul"):
        OptionSet.parse(["NVFUSER_ENABLE=fuse_matmul"])  # type: ignore[arg-type]


def test_from_env_reads_the_two_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"NVFUSER_ENABLE": "kernel_profile,fuse_matmul", "NVFUSER_DISABLE": "matmul_expr_eval", "PATH": "/bin"}
    assert OptionSet.from_env(environ) == CODEGEN
    assert OptionSet.from_env({}) == OptionSet() == OptionSet.from_env({"NVFUSER_ENABLE": ""})
    monkeypatch.setenv("NVFUSER_ENABLE", "fuse_matmul")
    monkeypatch.delenv("NVFUSER_DISABLE", raising=False)
    assert OptionSet.from_env() == OptionSet(enable=["fuse_matmul"])  # None: os.environ, read at the call


@pytest.mark.parametrize(("environ", "message"), [
    ({"NVFUSER_DISABLE": "a,,b"}, "NVFUSER_DISABLE='a,,b' has an empty name"),
    ({"NVFUSER_ENABLE": "p2p_protocol(put)"}, "NVFUSER_ENABLE='p2p_protocol(put)': 'p2p_protocol' takes arguments"),
    ({"NVFUSER_ENABLE": "fuse_matmul kernel_profile"}, "separate names with commas and no spaces"),
])
def test_from_env_refuses_a_malformed_value_naming_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        OptionSet.from_env(environ)
    assert message in str(raised.value)


def test_from_env_takes_a_mapping() -> None:
    with pytest.raises(TypeError, match=r"OptionSet\.from_env takes a mapping such as os\.environ"):
        OptionSet.from_env("NVFUSER_ENABLE=fuse_matmul")  # type: ignore[arg-type]


def test_thunder_kwargs() -> None:
    assert CODEGEN.thunder_kwargs() == {"nv_enable_options": ["fuse_matmul", "kernel_profile"],
                                        "nv_disable_options": ["matmul_expr_eval"]}
    assert OptionSet().thunder_kwargs() == {"nv_enable_options": [], "nv_disable_options": []}
    first = CODEGEN.thunder_kwargs()
    first["nv_enable_options"].append("x")
    assert CODEGEN.thunder_kwargs()["nv_enable_options"] == ["fuse_matmul", "kernel_profile"]  # fresh lists
