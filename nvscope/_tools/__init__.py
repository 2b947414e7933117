"""Layer 4, the tools' common ground: compare, running a program under a scope, shared helpers of the families."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
