"""The pytest plugin's implementation (`nvscope._cli._pytest_plugin`), as `_nvscope_pytestplugin` calls it;
``-p nvscope.pytest_plugin`` registers that plugin too."""

from nvscope._cli._pytest_plugin import header, item_scopes, scoped_call, session_scope

__all__ = ["header", "item_scopes", "scoped_call", "session_scope"]

pytest_plugins = ("_nvscope_pytestplugin",)
