"""The pytest plugin's implementation, as `_nvscope_pytestplugin` (what pytest registers) calls it.

``-p nvscope.pytest_plugin``, the older spelling, still works: importing this module registers
``_nvscope_pytestplugin``. The plugin's body is `nvscope._cli._pytest_plugin`.
"""

from nvscope._cli._pytest_plugin import header, item_scopes, scoped_call, session_scope

__all__ = ["header", "item_scopes", "scoped_call", "session_scope"]

# `-p nvscope.pytest_plugin` registers this module: it then registers the plugin itself (which has the hooks).
pytest_plugins = ("_nvscope_pytestplugin",)
