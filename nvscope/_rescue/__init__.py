"""Layer 5, the rescue family: per failing fusion the option sets that cure it, probed in crash-proof workers."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
