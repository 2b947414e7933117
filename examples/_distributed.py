"""Shared by the distributed examples: where each rank runs, a deadline for the whole process, one JSON line per rank.

Placement follows what the machine has, so one command line (``torchrun --nproc-per-node N ...``) fits all of them:

- every local rank has a GPU of its own: NCCL, rank ``r`` on ``cuda:r``;
- fewer GPUs than local ranks: gloo, ranks share GPUs (``cuda:r % gpus``). NCCL refuses two ranks on one GPU; gloo
  carries CUDA tensors by staging them through pinned host memory;
- no CUDA: gloo on the CPU.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

MARK = "nvscope-rank-result"  # each rank prints one line: MARK, a space, one JSON object (its result or its error)


@dataclass(frozen=True)
class Placement:
    backend: str  # "nccl" or "gloo"
    device: str  # "cuda:1", "cuda:0", "cpu"
    why: str


def placement(local_rank: int, local_world_size: int, gpus: int) -> Placement:
    """The backend and device of one rank, from how many GPUs this host has for how many local ranks."""
    if gpus >= local_world_size:
        return Placement("nccl", f"cuda:{local_rank}", f"{gpus} GPU(s) for {local_world_size} local rank(s): one each")
    if gpus > 0:
        return Placement("gloo", f"cuda:{local_rank % gpus}",
                         f"{gpus} GPU(s) for {local_world_size} local ranks: ranks share GPUs, NCCL cannot")
    return Placement("gloo", "cpu", "no CUDA device")


def init(timeout_s: float) -> tuple[Placement, int, int]:
    """Place this rank, set its CUDA device, join the default process group. Returns (placement, rank, world)."""
    import torch
    import torch.distributed as tdist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    where = placement(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")), gpus)
    if where.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(where.device))
    # The timeout bounds every collective on the default group (gloo and NCCL both honour it).
    tdist.init_process_group(where.backend, timeout=timedelta(seconds=timeout_s),
                             device_id=torch.device(where.device) if where.backend == "nccl" else None)
    return where, tdist.get_rank(), tdist.get_world_size()


def emit(payload: dict[str, Any]) -> None:
    # One write: ranks share stdout (and unbuffered, print's separate end="\n" write lets other output in between).
    sys.stdout.write(f"{MARK} {json.dumps(payload, sort_keys=True)}\n")
    sys.stdout.flush()


def error_report(error: BaseException) -> dict[str, Any]:
    """What failed and where, short enough for one line: the exception's first line and the innermost frames."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return {"ok": False, "error": f"{type(error).__name__}: {lines[0] if lines else ''}"[:500],
            "where": _where(traceback.extract_tb(error.__traceback__))}


def _where(frames: traceback.StackSummary) -> list[str]:
    """The innermost frames of the examples, then the innermost frames overall (in Thunder, torch, ...)."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [os.path.dirname(os.path.abspath(f.filename)) == here for f in frames]
    ours = [f for f, m in zip(frames, mine, strict=True) if m][-2:]
    inner = [f for f, m in zip(frames, mine, strict=True) if not m and not f.filename.startswith("<")][-3:]
    return [f"{'/'.join(f.filename.split(os.sep)[-2:])}:{f.lineno} in {f.name}" for f in ours + inner]


def deadline(seconds: float, header: dict[str, Any]) -> threading.Timer:
    """After ``seconds``, print this rank's JSON error line and every thread's stack, then end the process.

    Collectives in process groups that Thunder creates itself (``copy_default_process_group``) take torch's default
    timeout (30 min for gloo), so this is what bounds a hang. torchrun then stops the other ranks.
    """
    main = threading.main_thread()

    def expire() -> None:
        frame = sys._current_frames().get(main.ident or -1)
        stack = traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()
        emit({**header, "ok": False, "error": f"deadline: still running after {seconds:.0f} s (a hang?)",
              "where": _where(stack)})
        faulthandler.dump_traceback(all_threads=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer
