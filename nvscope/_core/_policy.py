"""Precedence: which options one fusion gets. The one place that says it, as JAX's ``trace_context`` says what enters
its compile key.

A scope's *policy* is what the ContextVar holds for it (`nvscope._core._scope.Frame.policy`):

* an `OptionSet` when no scope in the stack has a selector: every fusion gets it (the common case, and the fast one);
* a `Policy` otherwise: the scopes' layers, outermost first, each ``(options, selector, inherit, run)``.

For one fusion (`effective_split`), lowest to highest:

1. ``NVFUSER_ENABLE``/``NVFUSER_DISABLE``: nvFuser adds per-call options to them; nothing here can remove them.
2. The fusion's own options: Thunder's compile-time ``nv_enable_options``/``nv_disable_options``, or what a direct
   caller passed to ``execute`` (``own_options``).
3. The scopes, outermost to innermost (`resolve`): a scope whose selector does not match the fusion is skipped; one
   with ``inherit=False`` starts again from nothing (of the scopes; 1 and 2 stay); otherwise it is laid over what is
   below with `OptionSet.override`: a name requested the other way by an inner scope is the inner scope's. A
   backward pass runs under its forward's policy laid over the policy of the thread that runs it (`compose`).
4. The catalog's gates: a scope option that cannot affect this fusion (``fuse_matmul`` on a fusion without a matmul
   or linear; `nvscope.catalog`, ``can_affect``) is dropped, so the fusion keeps its default compiled kernels
   instead of recompiling for nothing.

Sharing (``nv_options(share=True)``, ``NVSCOPE_SHARE=all``) is a property of the policy, not an option: a policy
whose ``share`` is set (always a `Policy`, so the hot path's ``is None`` test sends its fusions to the execution path)
runs a fusion the scopes leave alone in a partition of its own options all the same, so that its compiled definition
is shared (`nvscope._exec._shared`). Nested scopes inherit it (``inherit=False`` too: it changes no option); a scope
with ``share=False`` ends it.

``on_error="torch"`` (`escaping`) is a property of the policy too, for the same reason: every fusion under it runs
through the execution path, its defaults included, so that a failure anywhere can run the region in PyTorch.

Policies are interned (`over`): re-entering the same scope object, or one built alike (equal options, equal selector:
`nvscope._core._fusion.Selector`), over the same parent gives the same object, so a fusion's table can remember what a
policy resolved to with one identity test.
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
    """Scopes with selectors or routes: ``layers`` outermost first, each ``(options, selector or None, inherit,
    run)`` (``run``: "torch" or "nvfuser" for the fusions the layer selects, None: as below).

    Hashed and compared by identity (interned by `over`), so it costs one identity test as a memo key.
    """

    __slots__ = ("__weakref__", "escape", "layers", "share")

    def __init__(self, layers: tuple[Layer, ...], share: bool = False, escape: bool = False) -> None:
        self.layers = layers
        self.share = share  # fusions left alone run their own options in a shared partition (module docstring)
        self.escape = escape  # on_error="torch": a fusion nvFuser fails runs its region in PyTorch

    def __repr__(self) -> str:
        parts = []
        for options, chosen, inherit, run in self.layers:
            where = f" for fusions={chosen!r}" if chosen is not None else ""
            cut = (" (inherit=False)" if not inherit else "") + (f" run={run!r}" if run is not None else "")
            parts.append(f"{options!r}{where}{cut}")
        extra = (", share=True" if self.share else "") + (", on_error='torch'" if self.escape else "")
        return f"Policy({'; '.join(parts)}{extra})"


_interned: dict[tuple[object, ...], Policy] = {}
_intern_lock = threading.Lock()
_MAX_INTERNED = 4096
# A memo: a policy built again after uninstall is equal to the old one, and costs each fusion one resolution.
_state.register(__name__, "_interned", _interned.clear, step="caches")
_state.keep(__name__, "_intern_lock", "a lock")


def sharing(policy: OptionSet | Policy | None) -> bool:
    """Whether ``policy`` shares the compiled definitions of the fusions it leaves alone (module docstring)."""
    return isinstance(policy, Policy) and policy.share


def escapes(policy: OptionSet | Policy | None) -> bool:
    """Whether fusions under ``policy`` run in PyTorch where nvFuser fails them (``on_error="torch"``)."""
    return isinstance(policy, Policy) and policy.escape


def escaping(policy: OptionSet | Policy | None) -> Policy:
    """``policy`` (the same options and sharing) with ``on_error="torch"``: a `Frame` whose choice it is makes one."""
    if isinstance(policy, Policy):
        if policy.escape:
            return policy
        layers, share = policy.layers, policy.share
    else:
        layers, share = (() if policy is None else ((policy, None, True, None),)), False
    key = ("torch", layers, share)
    escaped = _interned.get(key)
    if escaped is None:
        with _intern_lock:
            escaped = _interned.get(key)
            if escaped is None:
                if len(_interned) >= _MAX_INTERNED:
                    _interned.clear()
                escaped = _interned[key] = Policy(layers, share, escape=True)
    return escaped


def over(parent: OptionSet | Policy | None, own: OptionSet, chosen: Selector | None,
         inherit: bool, share: bool | None = None, run: str | None = None) -> OptionSet | Policy | None:
    """The policy of a scope (``own`` options for the fusions ``chosen`` selects) entered over ``parent``.

    None stands for "no options for any fusion" (the hot path tests it with ``is``). ``share``: the scope's
    ``share=`` (None: as ``parent``); ``run``: its ``run=`` (None: as ``parent``).
    """
    shared = sharing(parent) if share is None else share
    if shared:
        return _interned_policy(parent, own, chosen, inherit, True, run=run)
    if isinstance(parent, Policy) and parent.share:  # share=False over a sharing parent: its layers, not sharing
        parent = _unshared(parent)
    if run is None and chosen is None and not isinstance(parent, Policy):
        merged = own if not inherit or parent is None else parent.override(own)
        return merged if merged else None
    if run is None and chosen is None and not inherit:
        return own if own else None  # cuts every layer below, selective ones too
    return _interned_policy(parent, own, chosen, inherit, False, run=run)


def _unshared(parent: Policy) -> OptionSet | Policy | None:
    """``parent``'s layers without its sharing: an `OptionSet` where no layer selects (the fast case), else a Policy."""
    if all(chosen is None and run is None for _, chosen, _, run in parent.layers):
        merged: OptionSet | Policy | None = None
        for options, _, inherit, _ in parent.layers:
            merged = over(merged, options, None, inherit, False)
        return merged
    return _interned_policy(None, EMPTY, None, True, False, parent.layers)


def _interned_policy(parent: OptionSet | Policy | None, own: OptionSet, chosen: Selector | None, inherit: bool,
                     share: bool, layers: tuple[Layer, ...] | None = None, run: str | None = None) -> Policy:
    if layers is None:
        if isinstance(parent, Policy):
            below = parent.layers
        elif parent is None:
            below = ()
        else:
            below = ((parent, None, True, None),)
        layers = (*below, (own, chosen, inherit, run))
    key = (parent, own, chosen, inherit, share, layers)
    policy = _interned.get(key)
    if policy is None:
        with _intern_lock:
            policy = _interned.get(key)
            if policy is None:
                if len(_interned) >= _MAX_INTERNED:  # a program building scopes in a loop: stay bounded
                    _interned.clear()
                policy = _interned[key] = Policy(layers, share)
    return policy


def compose(outer: OptionSet | Policy | None, inner: OptionSet | Policy | None,
            share: bool | None = None) -> OptionSet | Policy | None:
    """``inner`` (a backward's captured forward policy) laid over ``outer`` (the policy of the thread running it).

    Sharing: ``share`` where given (the forward ended sharing on purpose: `nvscope._core._frames.carried`), else
    ``inner``'s where it shares, else ``outer``'s."""
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
    """`resolve`, and what it is without the innermost layer (each selector matched once)."""
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
    """Whether ``policy`` sends this fusion to PyTorch (``nv_options(run="torch")``): the innermost layer that selects
    it and says ``run=`` decides; ``inherit=False`` starts again from nvFuser."""
    if not isinstance(policy, Policy) or all(run is None for *_, run in policy.layers):
        return False  # (no selector is matched again: a scope's selector runs once per fusion)
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
    except NvscopeError:  # a callable's non-bool result (SelectorError): already names the selector and the fusion
        raise
    except Exception as error:  # the user's callable: name it and the fusion, keep the cause
        raise NvscopeError(f"fusions={chosen!r} raised {type(error).__name__} on fusion {info.id} ({error}): a "
                           "selector must return True or False for every FusionInfo") from error


def effective_split(own_options: OptionSet, policy: OptionSet | Policy | None,
                    info: FusionInfo) -> tuple[OptionSet, bool]:
    """What one fusion executes with under ``policy`` (steps 2-4 above; nvFuser adds step 1 itself), and whether the
    innermost scope changed it: False when a selective innermost scope leaves the fusion what the scopes around it
    give (e.g. its selector matches nothing), so that scope can say it changed nothing as it would alone. Any other
    innermost scope counts as changing what its fusions ran with."""
    scope, below = _layered(policy, info)
    options = _gated(own_options, scope, info)
    if not isinstance(policy, Policy) or len(policy.layers) < 2 or policy.layers[-1][1] is None:
        return options, True
    return options, _gated(own_options, below, info) != options


def _gated(own_options: OptionSet, scope: OptionSet, info: FusionInfo) -> OptionSet:
    ops = info.ops
    if scope and ops is not None:  # unknown ops: no gate can be judged, so none drops anything
        gate = catalog().can_affect
        scope = scope.only(lambda kind, name: gate(kind, name, ops))
    return own_options.override(scope)
