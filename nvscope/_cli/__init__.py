"""Layer 5, the command line: the ``nvscope`` command and its subcommands, ``nvscope run`` and its child-process
carry, doctor, wheels, and the pytest plugin's body. The top of the package below the public faces."""

# The interface: what the public faces use (``nvscope.cli``, ``nvscope.pytest_plugin``, the child's sitecustomize).
# Loaded on first use: the pytest plugin must not load the command line. ``_child_carry`` is a namespace.
from nvscope._core import lazy_attributes

__all__ = ["_child_carry", "header", "item_scopes", "main", "scoped_call", "session_scope"]

TYPE_CHECKING = False  # not typing's: `import nvscope` does not import typing (see nvscope/_core/_record.py)
if TYPE_CHECKING:  # what __getattr__ loads, spelled out for type checkers
    from . import _child_carry as _child_carry
    from ._main import main as main
    from ._pytest_plugin import header as header
    from ._pytest_plugin import item_scopes as item_scopes
    from ._pytest_plugin import scoped_call as scoped_call
    from ._pytest_plugin import session_scope as session_scope
else:  # hidden from type checkers, which then still report a misspelt name
    __getattr__ = lazy_attributes(__name__, {
        "main": "._main",
        **dict.fromkeys(("header", "item_scopes", "scoped_call", "session_scope"), "._pytest_plugin"),
    })
