"""Layer 5, the search family: the option sets that make a step fastest, whole (`search`) or per fusion."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
