"""Layer 5, the profile family: one step timed under each option set, per fusion and per kernel, with its numerics."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
