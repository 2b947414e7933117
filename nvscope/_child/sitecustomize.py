"""``nvscope run``'s start-up hook for the Python processes its program starts (nvscope/_cli/_child_carry.py explains).

``nvscope run`` puts this directory first on ``PYTHONPATH`` and its options in ``NVSCOPE_RUN``; at start-up, Python's
``site`` module imports this module as ``sitecustomize``. It first runs the ``sitecustomize`` that it hides, if any
(the next one on ``sys.path``, which then stands in ``sys.modules``), then, only when ``NVSCOPE_RUN`` is set, imports
nvscope and enters the run's scope. Kept to the syntax of any Python 3, since any Python the program starts reads it.
"""

import os
import sys


def _chain() -> None:
    """Run the sitecustomize module this one hides, as ``site`` would have."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))
    rest = [entry for entry in sys.path if os.path.normcase(os.path.abspath(entry or os.curdir)) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        from nvscope._cli import start_child
    except ImportError as error:
        sys.stderr.write(f"nvscope: NVSCOPE_RUN is set, but this Python ({sys.executable}) cannot import nvscope "
                         f"({error}); this process runs without nvscope run's options\n")
        return
    start_child()


try:
    _chain()
finally:  # an error in the hidden sitecustomize still reaches `site`, which reports it as it would have
    if os.environ.get("NVSCOPE_RUN") is not None:
        _start()
