"""Precedence: which options one fusion gets, said in one place (docs/how-it-works.md, Precedence).

A scope's *policy* is an `OptionSet` when no scope in the stack selects fusions (the fast case), else a `Policy`: the
scopes' layers, outermost first, with sharing and ``on_error="torch"``. Policies are interned: compared by identity.
"""

from __future__ import annotations

import threading

from nvscope._core import _state
from nvscope._core._catalog_cache import catalog
from nvscope._core._errors import NvscopeError
from nvscope._core._fusion import FusionInfo, Selector
from nvscope._core._optionset import EMPTY, OptionSet

__all__ = ["Policy", "compose", "effective_split", "escapes", "escaping", "over", "resolve", "routed", "sharing"]

Layer = tuple[OptionSet, "Selector | None", bool, "str | None"]


class Policy:
    """Scopes with selectors or routes: ``layers`` outermost first, each ``(options, selector, inherit, run)``.
    Interned by `over`, so compared by identity."""

    __slots__ = ("__weakref__", "escape", "layers", "share")

    def __init__(self, layers: tuple[Layer, ...], share: bool = False, escape: bool = False) -> None:
        self.layers = layers
        self.share = share
        self.escape = escape


_interned: dict[tuple[object, ...], Policy] = {}
_intern_lock = threading.Lock()
_MAX_INTERNED = 4096
_state.register(__name__, "_interned", _interned.clear, step="caches")
_state.keep(__name__, "_intern_lock", "a lock")


def sharing(policy: OptionSet | Policy | None) -> bool:
    """Whether ``policy`` shares the compiled definitions of the fusions it leaves alone."""
    return isinstance(policy, Policy) and policy.share


def escapes(policy: OptionSet | Policy | None) -> bool:
    """Whether fusions under ``policy`` run in PyTorch where nvFuser fails them (``on_error="torch"``)."""
    return isinstance(policy, Policy) and policy.escape


def escaping(policy: OptionSet | Policy | None) -> Policy:
    """``policy`` with ``on_error="torch"``."""
    if isinstance(policy, Policy):
        if policy.escape:
            return policy
        layers, share = policy.layers, policy.share
    else:
        layers, share = (() if policy is None else ((policy, None, True, None),)), False
    return _intern(("torch", layers, share), layers, share, escape=True)


def over(parent: OptionSet | Policy | None, own: OptionSet, chosen: Selector | None,
         inherit: bool, share: bool | None = None, run: str | None = None) -> OptionSet | Policy | None:
    """The policy of a scope (``own`` options for the fusions ``chosen`` selects) entered over ``parent``; None
    means no options for any fusion. ``share``/``run`` None: as ``parent``."""
    shared = sharing(parent) if share is None else share
    if shared:
        return _interned_policy(parent, own, chosen, inherit, True, run=run)
    if isinstance(parent, Policy) and parent.share:
        parent = _unshared(parent)
    if run is None and chosen is None and not isinstance(parent, Policy):
        merged = own if not inherit or parent is None else parent.override(own)
        return merged if merged else None
    if run is None and chosen is None and not inherit:
        return own if own else None
    return _interned_policy(parent, own, chosen, inherit, False, run=run)


def _unshared(parent: Policy) -> OptionSet | Policy | None:
    """``parent``'s layers without its sharing."""
    if all(chosen is None and run is None for _, chosen, _, run in parent.layers):
        merged: OptionSet | Policy | None = None
        for options, _, inherit, _ in parent.layers:
            merged = over(merged, options, None, inherit, False)
        return merged
    return _intern(("unshared", parent.layers), parent.layers, False)


def _interned_policy(parent: OptionSet | Policy | None, own: OptionSet, chosen: Selector | None, inherit: bool,
                     share: bool, run: str | None = None) -> Policy:
    if isinstance(parent, Policy):
        below = parent.layers
    else:
        below = () if parent is None else ((parent, None, True, None),)
    layers = (*below, (own, chosen, inherit, run))
    return _intern((parent, own, chosen, inherit, share, layers), layers, share)


def _intern(key: tuple[object, ...], layers: tuple[Layer, ...], share: bool, escape: bool = False) -> Policy:
    """The one `Policy` for ``key``, made the first time under the lock."""
    policy = _interned.get(key)
    if policy is None:
        with _intern_lock:
            policy = _interned.get(key)
            if policy is None:
                if len(_interned) >= _MAX_INTERNED:
                    _interned.clear()
                policy = _interned[key] = Policy(layers, share, escape)
    return policy


def compose(outer: OptionSet | Policy | None, inner: OptionSet | Policy | None,
            share: bool | None = None) -> OptionSet | Policy | None:
    """``inner`` (a backward's forward policy) laid over ``outer`` (its thread's); sharing: ``share`` where given,
    else ``inner``'s where it shares, else ``outer``'s."""
    if share is None and sharing(inner):
        share = True
    if inner is None:
        return outer if share is None else over(outer, EMPTY, None, True, share)
    if isinstance(inner, OptionSet):
        return over(outer, inner, None, True, share)
    result = outer
    for options, chosen, inherit, run in inner.layers:
        result = over(result, options, chosen, inherit, share, run)
    return result


def resolve(policy: OptionSet | Policy | None, info: FusionInfo | None) -> OptionSet:
    """The scopes' options for one fusion (step 3 above); ``info=None`` matches no selector."""
    return _layered(policy, info)[0]


def _layered(policy: OptionSet | Policy | None, info: FusionInfo | None) -> tuple[OptionSet, OptionSet]:
    """`resolve`, and what it is without the innermost layer."""
    if policy is None:
        return EMPTY, EMPTY
    if isinstance(policy, OptionSet):
        return policy, policy
    result = below = EMPTY
    for options, chosen, inherit, _ in policy.layers:
        below = result
        if chosen is not None and (info is None or not _matches(chosen, info)):
            continue
        result = result.override(options) if inherit else options
    return result, below


def routed(policy: OptionSet | Policy | None, info: FusionInfo) -> bool:
    """Whether ``policy`` sends this fusion to PyTorch: the innermost layer that selects it and says ``run=``."""
    if not isinstance(policy, Policy) or all(run is None for *_, run in policy.layers):
        return False
    torch = False
    for _, chosen, inherit, run in policy.layers:
        if chosen is not None and not _matches(chosen, info):
            continue
        if not inherit:
            torch = False
        if run is not None:
            torch = run == "torch"
    return torch


def _matches(chosen: Selector, info: FusionInfo) -> bool:
    try:
        return chosen(info)
    except NvscopeError:
        raise
    except Exception as error:
        raise NvscopeError(f"fusions={chosen!r} raised {type(error).__name__} on fusion {info.id} ({error}): a "
                           "selector must return True or False for every FusionInfo") from error


def effective_split(own_options: OptionSet, policy: OptionSet | Policy | None,
                    info: FusionInfo) -> tuple[OptionSet, bool]:
    """What one fusion executes with under ``policy`` (its own options, the scopes, the gates), and whether the
    innermost scope changed it, so that a selective scope that matched nothing can say so."""
    scope, below = _layered(policy, info)
    options = _gated(own_options, scope, info)
    if not isinstance(policy, Policy) or len(policy.layers) < 2 or policy.layers[-1][1] is None:
        return options, True
    return options, _gated(own_options, below, info) != options


def _gated(own_options: OptionSet, scope: OptionSet, info: FusionInfo) -> OptionSet:
    ops = info.ops
    if scope and ops is not None:
        gate = catalog().can_affect
        scope = scope.only(lambda kind, name: gate(kind, name, ops))
    return own_options.override(scope)
