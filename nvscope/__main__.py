"""``python -m nvscope``: the same as the ``nvscope`` command (see `nvscope.cli`)."""

from nvscope.cli import main

raise SystemExit(main(prog="python -m nvscope"))
