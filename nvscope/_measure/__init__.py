"""Layer 3, the measuring kit the tools share; its face is the list in ``__init__.pyi``, loaded on first use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
