"""What the search tries: candidate specs parsed into option sets validated as a scope's, and the default list."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nvscope._core import OptionSet, UnknownOptionError, catalog, nv_options, shown

__all__ = ["default_candidates", "parse_candidate", "resolve", "spec"]

# fuse_matmul changes no kernel without -matmul_expr_eval (nvFuser hands the matmul back to ATen).
OPTION_PAIRS = ((("fuse_matmul",), ("matmul_expr_eval",)),)


def default_candidates() -> list[str]:
    """Each argument-free codegen option of the catalog alone, plus the pairs that work only together."""
    known = catalog()
    specs = [("-" if o.kind == "disable" else "") + o.name
             for o in sorted(known.options, key=lambda o: (o.kind != "enable", o.name))
             if o.effect == "codegen" and not o.requires_args]
    for enable, disable in OPTION_PAIRS:
        if all(known.get("enable", n) for n in enable) and all(known.get("disable", n) for n in disable):
            specs.append(",".join([*enable, *(f"-{n}" for n in disable)]))
    return specs


def spec(options: OptionSet) -> str:
    """An option set as a candidate spec (`parse_candidate`'s inverse), names sorted."""
    return ",".join([*options.enable_list(), *(f"-{n}" for n in options.disable_list())])


def parse_candidate(spec: object) -> OptionSet:
    """One candidate (``"fuse_matmul,-matmul_expr_eval"``, a mapping of enable/disable, an `OptionSet`
    or an ``nv_options``) -> its validated `OptionSet`."""
    if isinstance(spec, nv_options):
        extra = [f"{name}={value!r}" for name, value, default in (
            ("fusions", spec.fusions, None), ("on_error", spec.on_error, None), ("inherit", spec.inherit, True))
            if value != default]
        if extra:
            raise ValueError(f"candidate {shown(spec, 120)}: a candidate is an option set, tried on every fusion of "
                             f"the step, so its {', '.join(extra)} would be dropped: pass nv_options(enable=..., "
                             "disable=...) alone (nvscope.search_fusions finds the set for each fusion; "
                             "nvscope.profile(..., fusions=...) measures a set on some fusions)")
        options = spec.options
    elif isinstance(spec, OptionSet):
        options = nv_options(spec.enable, spec.disable).options
    elif isinstance(spec, Mapping):
        unknown = set(spec) - {"enable", "disable"}
        if unknown:
            raise TypeError(f"candidate {shown(dict(spec))}: unknown keys {shown(sorted(unknown, key=repr))}; use "
                            "'enable' and 'disable'")
        options = _validated(spec, spec.get("enable", ()), spec.get("disable", ()))
    elif isinstance(spec, str):
        enable: list[str] = []
        disable: list[str] = []
        for token in (t.strip() for t in spec.split(",")):
            if not token:
                raise ValueError(f"candidate {shown(spec)} has an empty name: separate names with single commas, e.g. "
                                 "'fuse_matmul,-matmul_expr_eval'")
            kind, _, name = token.partition(":") if token.startswith(("enable:", "disable:")) else ("", "", token)
            if not kind:
                kind, name = ("disable", token[1:]) if token[0] == "-" else ("enable", token.removeprefix("+"))
            name, other = name.strip(), "disable" if kind == "enable" else "enable"
            known = catalog()
            if known.get(kind, name) is None and known.get(other, name) is not None:  # type: ignore[arg-type]
                fix = name if other == "enable" else f"-{name}"
                raise UnknownOptionError(f"candidate {shown(spec)}: {name!r} is an nvFuser {other} option: write "
                                         f"{fix!r} (or '{other}:{name}')")
            (enable if kind == "enable" else disable).append(name)
        options = _validated(spec, enable, disable)
    else:
        raise TypeError(f"a candidate is a str like 'fuse_matmul,-matmul_expr_eval', a dict with 'enable'/'disable', "
                        f"an OptionSet or an nv_options object, not {type(spec).__name__}: {shown(spec)}")
    if not options:
        raise ValueError(f"candidate {shown(spec)} has no options: the default (no options) is always measured")
    return options


def _validated(spec: object, enable: Any, disable: Any) -> OptionSet:
    try:
        return nv_options(enable, disable).options
    except UnknownOptionError as error:
        raise UnknownOptionError(f"candidate {shown(spec)}: {error}") from None


def resolve(candidates: Iterable[object] | None) -> list[OptionSet]:
    if candidates is None:
        candidates = default_candidates()
    elif isinstance(candidates, (str, Mapping, OptionSet, nv_options)):
        raise TypeError(f"candidates= takes a list of candidates, e.g. candidates=[{shown(candidates)}]")
    resolved: dict[OptionSet, object] = {}
    for spec in candidates:
        options = parse_candidate(spec)
        if options in resolved:
            raise ValueError(f"candidates {shown(resolved[options])} and {shown(spec)} are the same option set")
        resolved[options] = spec
    if not resolved:
        raise ValueError("candidates= is empty: pass None for the catalog's codegen options, or a list of candidates")
    return list(resolved)
