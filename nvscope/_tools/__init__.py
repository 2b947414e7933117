"""Layer 4, the tools, in families: compare; search and search_fusions (`_search`); profile (`_profile`); bisect and
minimize (`_bisect`); rescue (`_rescue`); with `_common` (what they share) and `_program` (running a program as
``nvscope run`` does). The source check is not here: it needs only the core (`nvscope._check`). Each family's
``__init__`` names what it offers, and no family imports another's modules. The names below are in ``__init__.pyi``;
they load on first use."""

from nvscope._core import lazy_face

__all__, __getattr__, __dir__ = lazy_face(__name__, __file__)
del lazy_face
