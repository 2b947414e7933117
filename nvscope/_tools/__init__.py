"""Layer 4, the tools: families that import no other family's modules; the names in ``__init__.pyi`` load on use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
