"""``nvscope run``: run an unmodified script or module under nvFuser options, audited, with a summary at exit."""

from __future__ import annotations

import contextlib
import sys

from nvscope._cli import _child_carry as _carry
from nvscope._cli._args import program_output_to_stderr
from nvscope._exec import AuditLog
from nvscope._tools import run_program

__all__ = ["run"]


def run(script: str | None, module: str | None, program_args: list[str], carried: _carry.Settings, *,
        listing: bool = False, json_to: str | None = None, summary: bool = True) -> int:
    """Run the program under ``carried`` as ``nvscope run`` (``listing``: ``nvscope fusions``, which also lists the
    fusions at exit, as JSON to ``json_to`` too) and print the summary (``summary=False``: the listing alone);
    returns the program's exit code, or 2 when it cannot start."""
    code, log = run_program(script, module, program_args, carried,
                            command="nvscope fusions" if listing else "nvscope run",
                            take_over=_carry.take_over, output=lambda: program_output_to_stderr(json_to))
    if log is not None:
        with contextlib.suppress(Exception):  # the program may have closed stdout
            sys.stdout.flush()
        if not (listing and not summary):
            print(_carry.summary(carried.layers(), log, "nvscope fusions" if listing else "nvscope run"),
                  file=sys.stderr)
        if listing:
            print(fusion_listing(log), file=sys.stderr)
            if json_to is not None:
                from nvscope._cli._args import write_json

                return write_json("fusions", json_to, fusion_json(log)) or code
    return code


def fusion_json(log: AuditLog) -> str:
    """``nvscope fusions --json``: ``{"fusions": [{id, phase, name, ops, function, calls}]}``, in first-run order."""
    import json
    from collections import Counter

    calls = Counter(record.fusion for record in log.records)
    return json.dumps({"fusions": [{"id": info.id, "phase": info.phase, "name": info.name,
                                    "ops": None if info.ops is None else list(info.ops), "function": info.function,
                                    "calls": calls[info.id]} for info in log.fusions()]}, indent=2)


def fusion_listing(log: AuditLog) -> str:
    """``nvscope fusions``: every fusion that ran, in first-run order, with what selects it and how often it ran."""
    from collections import Counter

    from nvscope._core import _text as _texttable

    fusions = log.fusions()
    if not fusions:
        return "nvscope fusions: no nvFuser fusion ran"
    calls = Counter(record.fusion for record in log.records)
    phases = Counter(info.phase for info in fusions)
    rows = [(info.id, "?" if info.ops is None else ", ".join(info.ops), info.function or "", str(calls[info.id]))
            for info in fusions]
    head = ", ".join(f"{n} {phase}" for phase, n in phases.items())
    return "\n".join([f"nvscope fusions: {len(fusions)} fusions ({head}); select them with "
                      "nv_options(fusions=[...]) or nvscope run --fusions GLOB",
                      _texttable.render(("id", "ops", "function", "calls"), rows, right=(3,))])
