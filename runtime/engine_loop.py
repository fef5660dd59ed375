"""The engine thread: one thread owns the backend (the GPU) and drives the
:class:`~ninferc.runtime.scheduler.Scheduler`; the server's asyncio side never touches the backend and talks to it only through the scheduler's thread-safe
``submit`` / ``cancel`` and the events each request's sink receives (DESIGN.md §6b).

States: ``loading`` (the backend is being built on the engine thread), ``ready``, ``failed`` (loading or a step
raised; every request in flight ended with :class:`~ninferc.runtime.scheduler.EngineFailed`), ``stopped``.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

from ninferc.runtime.scheduler import EngineFailed, Scheduler


class EngineLoop:
    """Builds the backend and the scheduler on its own thread, then runs scheduler iterations until stopped.

    Args:
        make_backend: called on the engine thread; returns the batched backend (may take seconds: ``/health``
            says 503 meanwhile).
        make_scheduler: ``backend -> Scheduler``.
        log: one-line messages (stderr in the server).
        idle_wait_s: how long the thread sleeps waiting for work when an iteration did nothing.
    """

    def __init__(self, make_backend: Callable[[], object], make_scheduler: Callable[[object], Scheduler], *,
                 log: Callable[[str], None] = lambda s: None, idle_wait_s: float = 0.02):
        self._make_backend, self._make_scheduler, self.log = make_backend, make_scheduler, log
        self.idle_wait_s = idle_wait_s
        self.state = "loading"
        self.error: str | None = None
        self.backend = None
        self.scheduler: Scheduler | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ninferc-engine", daemon=True)

    def start(self) -> "EngineLoop":
        """Start the thread (returns at once; :meth:`wait_ready` waits for the backend)."""
        self._thread.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the backend is built (or failed); True when ``ready``."""
        self._ready.wait(timeout)
        return self.state == "ready"

    def _run(self) -> None:
        try:
            self.backend = self._make_backend()
            self.scheduler = self._make_scheduler(self.backend)
        except BaseException as exc:  # noqa: BLE001 -- reported through /health and the log, never swallowed
            self.error = f"{type(exc).__name__}: {exc}"
            self.state = "failed"
            self.log(f"engine: loading failed: {self.error}")
            self._ready.set()
            return
        self.state = "ready"
        self._ready.set()
        sched = self.scheduler
        try:
            while not self._stop.is_set():
                if not sched.step():
                    sched.wait_for_work(self.idle_wait_s)
        except BaseException as exc:  # noqa: BLE001
            self.error = f"{type(exc).__name__}: {exc}"
            self.state = "failed"
            self.log("engine: a step failed; every request in flight is ended with an error\n"
                     + traceback.format_exc().rstrip())
            sched.fail_all(EngineFailed(f"the engine failed: {self.error}"))
            return
        finally:
            if self.backend is not None:
                try:
                    self.backend.close()
                except Exception:  # noqa: BLE001
                    pass
        if self.state == "ready":
            self.state = "stopped"

    def shutdown(self, drain_timeout_s: float = 30.0) -> None:
        """Stop admitting, let requests in flight finish for up to ``drain_timeout_s`` seconds, abort the rest
        (``finish_reason`` ``abort``), then stop the thread."""
        sched = self.scheduler
        if sched is not None and self.state == "ready":
            sched.drain()
            deadline = time.monotonic() + drain_timeout_s
            while sched.inflight and time.monotonic() < deadline and self.state == "ready":
                time.sleep(0.01)
            if sched.inflight:
                self.log(f"engine: drain timeout ({drain_timeout_s:g} s): aborting {sched.inflight} requests")
                sched.abort_all()
                deadline = time.monotonic() + 10.0
                while sched.inflight and time.monotonic() < deadline and self.state == "ready":
                    time.sleep(0.01)
        self._stop.set()
        self._thread.join(timeout=30.0)
