# The command line's face (nvscope/_core/_lazy.py reads this list).
from nvscope._cli._child_carry import start_child as start_child
from nvscope._cli._main import main as main
from nvscope._cli._pytest_plugin import header as header
from nvscope._cli._pytest_plugin import item_scopes as item_scopes
from nvscope._cli._pytest_plugin import scoped_call as scoped_call
from nvscope._cli._pytest_plugin import session_scope as session_scope
