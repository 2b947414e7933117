"""Layer 4, the tools, in families: compare, search, profile, bisect, rescue, with `_common` and `_program`. No family
imports another's modules; the names below are in ``__init__.pyi`` and load on first use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
