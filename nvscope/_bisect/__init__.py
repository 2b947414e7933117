"""Layer 5, the bisect family: the options and fusions that make a step go wrong, found by binary search."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
