"""Servers for the serving tests: ``ninferc serve`` started as a real process on 127.0.0.1 and a free port
(``--port 0``; the port is read from its "listening on" line), stopped at teardown."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest


class ServerProcess:
    """A running ``ninferc serve``: ``url`` (http://127.0.0.1:PORT), ``lines`` (its stderr so far), ``proc``."""

    def __init__(self, args: list[str], *, env: dict | None = None, ready_timeout: float = 120.0):
        cmd = [sys.executable, "-m", "ninferc", "serve", *map(str, args), "--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self._port = None
        self._seen = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + ready_timeout
        with self._seen:
            while self._port is None and self.proc.poll() is None and time.monotonic() < deadline:
                self._seen.wait(0.1)
        if self._port is None:
            self.stop()
            raise RuntimeError("ninferc serve did not start:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self._port}"
        while time.monotonic() < deadline:  # ready = the engine has loaded
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("ninferc serve never became healthy:\n" + "\n".join(self.lines))

    def _pump(self) -> None:
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            with self._seen:
                self.lines.append(line)
                m = re.match(r"listening on http://[\d.]+:(\d+)", line)
                if m:
                    self._port = int(m.group(1))
                self._seen.notify_all()

    def request_lines(self) -> list[str]:
        """The per-request log lines so far."""
        with self._seen:
            return [ln for ln in self.lines if ln.startswith("[req ")]

    def wait_request_lines(self, n: int, after: int = 0, timeout: float = 30.0) -> list[str]:
        """The per-request log lines after the first ``after``, once there are at least ``n`` of them (a request's
        line is written as it ends, which can be just after its client has read the last chunk)."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                lines = [ln for ln in self.lines if ln.startswith("[req ")][after:]
                left = deadline - time.monotonic()
                if len(lines) >= n or left <= 0:
                    return lines
                self._seen.wait(left)

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> str:
        """The first stderr line matching ``pattern`` (a regex), waiting for it."""
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                for ln in self.lines:
                    if re.search(pattern, ln):
                        return ln
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(self.lines))
                self._seen.wait(left)

    def metrics(self) -> dict:
        """``/metrics`` parsed with prometheus_client's text parser: {sample name + labels: value}."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                                if s.labels else "")
                out[key] = s.value
        return out

    def stop(self, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the server and wait for it to exit; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def start_server():
    """``start_server(model_path, *args)`` -> a started :class:`ServerProcess`, stopped at the end of the session."""
    started: list[ServerProcess] = []

    def start(*args, env=None):
        s = ServerProcess(list(args), env=env)
        started.append(s)
        return s

    yield start
    keep = os.environ.get("NINFERC_SERVER_LOG_DIR")  # device runs: every server's stderr kept for the run's log
    for i, s in enumerate(started):
        s.stop()
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            with open(Path(keep) / "servers.log", "a") as f:
                f.write(f"=== server {i}: {' '.join(s.proc.args[3:])} (exit {s.proc.returncode})\n")
                f.write("\n".join(s.lines) + "\n")


@pytest.fixture(scope="session")
def tiny_server(start_server, tiny_dir):
    """The fixture checkpoint served by the reference backend with default settings (concurrency 4)."""
    return start_server(tiny_dir, "--model-id", "tiny")


@pytest.fixture(scope="session")
def client(tiny_server):
    """The official ``openai`` client pointed at :func:`tiny_server`."""
    import openai

    return openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def model_path(p) -> Path:
    return Path(p)
