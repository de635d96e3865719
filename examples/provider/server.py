"""Run the notification service in its own process, on 127.0.0.1.

From Python (what the examples and notebooks do)::

    from provider.server import run_in_background

    with run_in_background(db="provider.sqlite", lag=2.0) as service:
        print(service.url)               # http://127.0.0.1:<port>
        service.set_faults(timeout_next=30)
        ...
        print(service.stats())           # the service's own counts

From a shell (in ``examples/``)::

    python -m provider --port 8765 --db provider.sqlite --retention 86400 --lag 2

The launcher binds the listening socket itself and hands it to the service
process, so the port is known before the process starts and stays the same when
the service is restarted (after its ``crash_next`` switch killed it, say).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

EXAMPLES = Path(__file__).resolve().parents[1]


class ProviderProcess:
    """A handle on the service process: its URL, admin calls, restart and stop."""

    def __init__(
        self,
        db: str | os.PathLike[str],
        *,
        port: int = 0,
        retention: float = 24 * 3600.0,
        lag: float = 0.0,
        in_flight_timeout: float = 30.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.db = str(Path(db).resolve())  # the service process has its own working directory
        self.options = {"retention": retention, "lag": lag, "in_flight_timeout": in_flight_timeout}
        self.log_path = Path(self.db).with_suffix(".log")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.sock.set_inheritable(True)
        self.host, self.port = self.sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> ProviderProcess:
        command = [sys.executable, "-m", "provider", "--fd", str(self.sock.fileno()), "--db", self.db]
        command += ["--exit-with-parent"]  # never outlive the program that started it
        for name, value in self.options.items():
            command += [f"--{name.replace('_', '-')}", str(value)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, pass_fds=[self.sock.fileno()], stdout=log, stderr=log, env=env, cwd=EXAMPLES
            )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the service answers its health check."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                log = self.log_path.read_text()[-3000:]
                raise RuntimeError(f"the provider exited with code {self.proc.returncode}:\n{log}")
            try:
                response = httpx.get(f"{self.url}/_admin/health", timeout=1.0)
                if (
                    response.status_code == 200
                    and self.proc is not None
                    and response.json()["pid"] == self.proc.pid
                ):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the provider did not answer on {self.url} within {timeout} s")
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self, timeout: float = 30.0) -> ProviderProcess:
        """Start the service again on the same port and file (after it crashed, say)."""
        self.terminate()
        return self.start(timeout)

    def terminate(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.terminate()
        self.sock.close()

    def __enter__(self) -> ProviderProcess:
        return self if self.alive else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- admin -------------------------------------------------------------------------

    def _admin(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}/_admin/{path}", timeout=10.0, **kwargs)
        response.raise_for_status()
        return response.json()

    def stats(self) -> dict[str, Any]:
        """The service's own counts: ``notifications`` (effects), ``withdrawn``, ``posts``,
        and ``outcomes`` (created, replayed, mismatch, in_flight, invalid, rejected)."""
        return self._admin("GET", "stats")  # type: ignore[no-any-return]

    def notifications(self) -> list[dict[str, Any]]:
        """Every notification the service holds, withdrawn ones included, without lag."""
        return self._admin("GET", "notifications")["data"]  # type: ignore[no-any-return]

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        """``latency=`` seconds, ``timeout_next=`` seconds to hold the next answer after
        its commit, ``crash_next=True`` to die right after the next commit."""
        return self._admin("POST", "faults", json=faults)  # type: ignore[no-any-return]

    def clear_faults(self) -> dict[str, Any]:
        return self._admin("DELETE", "faults")  # type: ignore[no-any-return]


def run_in_background(
    db: str | os.PathLike[str],
    *,
    port: int = 0,
    retention: float = 24 * 3600.0,
    lag: float = 0.0,
    in_flight_timeout: float = 30.0,
    timeout: float = 30.0,
) -> ProviderProcess:
    """Start the service in a child process and wait until it answers.

    ``port=0`` picks a free port (see ``.url``). ``retention``: seconds an
    idempotency key is kept; ``lag``: seconds the listing lags behind writes. Use
    the result as a context manager, or call ``.stop()``.
    """
    service = ProviderProcess(
        db, port=port, retention=retention, lag=lag, in_flight_timeout=in_flight_timeout
    )
    try:
        return service.start(timeout)
    except BaseException:
        service.stop()
        raise


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from provider.app import Settings, create_app

    parser = argparse.ArgumentParser(description="The examples' notification service.")
    parser.add_argument("--db", required=True, help="its SQLite file")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--fd", type=int, help="serve on this inherited listening socket instead")
    parser.add_argument("--retention", type=float, default=24 * 3600.0, help="seconds keys are kept")
    parser.add_argument("--lag", type=float, default=0.0, help="seconds the listing lags")
    parser.add_argument("--in-flight-timeout", type=float, default=30.0)
    parser.add_argument("--exit-with-parent", action="store_true", help="exit when the parent process dies")
    args = parser.parse_args(argv)
    if args.exit_with_parent:
        threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    app = create_app(
        Settings(db=args.db, retention=args.retention, lag=args.lag, in_flight_timeout=args.in_flight_timeout)
    )
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    if args.fd is not None:
        server.run(sockets=[socket.socket(fileno=args.fd)])
    else:
        server.run()


if __name__ == "__main__":
    main()
