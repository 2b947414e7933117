"""The rescue's long-lived probe workers: child processes that load the target once and run many probes.

A worker reads one probe's spec per line from ``requests``, runs `observe` and writes a line to ``replies``; one
whose probe dies, times out or sees a CUDA error is replaced by a fresh one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["Signalled", "Workers", "kill", "serve", "signals_interrupt"]

# What a probe's failure says when the CUDA context is lost to it (a sticky error): its worker is not used again.
_CUDA = re.compile(r"CUDA error|CUDA_ERROR|cudaError|CUBLAS_STATUS|illegal memory access|device-side assert|"
                   r"misaligned address|unspecified launch failure", re.IGNORECASE)

# judge(spec, exit status or None (timed out), stdout, stderr, args): the probe's observation.
Judge = Callable[[dict[str, Any], int | None, str, str, Any], dict[str, Any]]


def serve(observe: Callable[..., Any], step: Callable[[], Any], reference: Callable[[], Any] | None,
          spec: dict[str, Any]) -> None:
    """The worker's loop (module docstring): one probe per line of ``spec["requests"]``, until it ends."""
    with os.fdopen(spec["requests"], encoding="utf-8") as requests:
        for line in requests:
            probe = json.loads(line)
            observe(step, reference, probe, probe.get("tolerance"))
            os.write(spec["replies"], b"\n")


def kill(child: subprocess.Popen[str]) -> None:
    """Kill the child's whole process group (it started its own session), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


class _Worker:
    """One worker process: its pipes, its output files, the probe it runs (index, spec, deadline, output offsets)."""

    def __init__(self, command: list[str], spec: dict[str, Any], env: dict[str, str], stem: str) -> None:
        requests_in, self.requests = os.pipe()
        self.replies, replies_out = os.pipe()
        with open(stem + ".spec", "w", encoding="utf-8") as file:
            json.dump({**spec, "requests": requests_in, "replies": replies_out}, file)
        self.files = (stem + ".stdout", stem + ".stderr")
        with open(self.files[0], "w", encoding="utf-8") as out, open(self.files[1], "w", encoding="utf-8") as err:
            self.process = subprocess.Popen([*command, stem + ".spec"], stdout=out, stderr=err, text=True, env=env,
                                            start_new_session=True, pass_fds=(requests_in, replies_out))
        os.close(requests_in)
        os.close(replies_out)
        self.probe: tuple[int, dict[str, Any], float, tuple[int, int]] | None = None

    def send(self, index: int, spec: dict[str, Any], timeout: float) -> bool:
        """Start a probe; False when the worker is gone already."""
        at = (os.path.getsize(self.files[0]), os.path.getsize(self.files[1]))
        self.probe = (index, spec, time.monotonic() + timeout, at)
        try:
            os.write(self.requests, (json.dumps(spec) + "\n").encode())
        except BrokenPipeError:
            return False
        return True

    def output(self) -> tuple[str, str]:
        """What the worker printed since its probe started (its stdout, its stderr)."""
        assert self.probe is not None
        found = []
        for path, at in zip(self.files, self.probe[3], strict=True):
            with open(path, encoding="utf-8", errors="replace") as file:  # its own offset: the worker's stays
                file.seek(at)
                found.append(file.read())
        return found[0], found[1]

    def close(self) -> None:
        if self.process.poll() is None:
            kill(self.process)
        else:
            self.process.wait()
        for fd in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                os.close(fd)


class Workers:
    """Up to ``jobs`` workers, each ``command`` and the path of its ``spec`` (JSON; the pipes added), run with
    ``env``; each probe has ``timeout`` seconds and is judged by ``judge`` (module docstring)."""

    def __init__(self, jobs: int, command: list[str], spec: dict[str, Any], env: dict[str, str], timeout: float,
                 judge: Judge) -> None:
        self.jobs, self.command, self.spec, self.env = jobs, command, spec, env
        self.timeout, self.judge = timeout, judge
        self.idle: list[_Worker] = []
        self.directory: str | None = None
        self.started = 0

    def run(self, probes: Sequence[tuple[int, dict[str, Any]]]) -> dict[int, dict[str, Any]]:
        """Run ``probes`` (index, spec), ``jobs`` at a time; their observations by index."""
        queue = deque(probes)
        busy: list[_Worker] = []
        results: dict[int, dict[str, Any]] = {}
        try:
            while queue or busy:
                while queue and len(busy) < self.jobs:
                    reused = bool(self.idle)
                    worker = self.idle.pop() if reused else self._start()
                    index, spec = queue.popleft()
                    busy.append(worker)
                    if worker.send(index, spec, self.timeout):
                        continue
                    if reused:  # it died while idle: the probe never ran, a new worker runs it
                        busy.remove(worker)
                        worker.close()
                        queue.appendleft((index, spec))
                    else:
                        results[index] = self._end(worker, busy, self._wait(worker))
                wait = min((w.probe[2] for w in busy if w.probe), default=0.0) - time.monotonic()
                ready, _, _ = select.select([w.replies for w in busy], [], [], max(wait, 0.0))
                for worker in list(busy):
                    assert worker.probe is not None
                    index = worker.probe[0]
                    if worker.replies in ready:
                        said = os.read(worker.replies, 64)
                        results[index] = self._end(worker, busy, 0 if said else self._wait(worker))
                    elif time.monotonic() >= worker.probe[2]:
                        kill(worker.process)
                        results[index] = self._end(worker, busy, None)
            return results
        except BaseException:  # Ctrl-C or an error: no worker outlives the rescue
            for worker in busy:
                worker.close()
            self.close()
            raise

    def close(self) -> None:
        """Kill every idle worker and remove their files."""
        while self.idle:
            self.idle.pop().close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _start(self) -> _Worker:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="nvscope-rescue-workers-")
        self.started += 1
        return _Worker(self.command, self.spec, self.env, os.path.join(self.directory, f"worker{self.started}"))

    def _end(self, worker: _Worker, busy: list[_Worker], code: int | None) -> dict[str, Any]:
        """Judge the worker's probe (``code``: 0 when it answered, else its exit status, or None when it hung);
        keep the worker only when it answered and its probe saw no CUDA error."""
        assert worker.probe is not None
        busy.remove(worker)
        stdout, stderr = worker.output()
        result = self.judge(worker.probe[1], code, stdout, stderr, worker.process.args)
        failure = result.get("failure") or {}
        if code == 0 and worker.process.poll() is None and not _CUDA.search(
                f"{failure.get('line', '')}\n{failure.get('detail', '')}"):
            worker.probe = None
            self.idle.append(worker)
        else:
            worker.close()
        return result

    @staticmethod
    def _wait(worker: _Worker) -> int | None:
        """The exit status of a worker whose reply pipe closed (it is exiting); killed if it lingers."""
        try:
            return worker.process.wait(30)
        except subprocess.TimeoutExpired:
            kill(worker.process)
            return worker.process.returncode


class Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a rescue, raised in the main thread so that every ``finally`` on the way out kills
    its probes; a KeyboardInterrupt, so that an in-process probe does not take it for the step's failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """For the rescue's duration in the main thread, SIGTERM and SIGHUP with their default handler raise
    `Signalled`; after the cleanup the signal is sent again, so the process ends as the sender meant."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_it(signum: int, frame: object) -> None:
        raise Signalled(signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL:
            previous[number] = signal.signal(number, raise_it)
    caught: Signalled | None = None
    try:
        yield
    except Signalled as signalled:
        caught = signalled
        raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught is not None:
            os.kill(os.getpid(), caught.signum)  # the default handler ends the process here
