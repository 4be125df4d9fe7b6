"""How the agent says it is ready: a file that exists exactly while it is (an exec readiness
probe tests it) and/or `GET /healthz` on 127.0.0.1 (200 "ok", else 503 and the reason).

Any local user can connect to /healthz, so the server holds at most `MAX_CONNECTIONS`
connections (one thread and one descriptor each), closes any beyond them at once, and gives
each `CONNECTION_SECONDS` in all to send its request and read the answer. Idle or trickling
connections cannot starve the agent's install and uninstall of descriptors or threads; at
worst they keep a probe from being answered while they last.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from nvdocker2.host import files

MAX_CONNECTIONS = 16
CONNECTION_SECONDS = 3.0


class Readiness:
    """The agent's one ready/not-ready state, mirrored to the ready file and to /healthz."""

    def __init__(self, ready_file: Optional[Path]) -> None:
        self.ready_file = ready_file
        self._lock = threading.Lock()
        self._ready = False
        self._why = "starting"

    def get(self) -> tuple[bool, str]:
        with self._lock:
            return self._ready, self._why

    def set(self, ready: bool, why: str) -> None:
        with self._lock:
            self._ready, self._why = ready, why
        if self.ready_file is None:
            return
        if ready:
            tmp = self.ready_file.with_name(f".{self.ready_file.name}.{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a leftover of ours; never written through (O_EXCL|O_NOFOLLOW)
            files.write_new(tmp, (why + "\n").encode(), 0o644)
            os.replace(tmp, self.ready_file)
        else:
            try:
                self.ready_file.unlink()
            except FileNotFoundError:
                pass


class _Deadline(io.RawIOBase):
    """A connection's reading side that gives up (socket.timeout) once its deadline passes,
    however slowly the bytes come: the socket's own timeout is per read."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buf: memoryview) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the connection's time is up")
        self._sock.settimeout(left)
        return self._sock.recv_into(buf)


class _Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer with at most MAX_CONNECTIONS connections at a time."""

    daemon_threads = True
    request_queue_size = 64  # a burst of connections is taken in (and closed), not dropped

    def __init__(self, address: tuple[str, int], handler: type) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the cap: closed at once, nothing read
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread started to release it
            raise

    def process_request_thread(self, request: socket.socket, client_address: tuple) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve_healthz(port: int, readiness: Readiness) -> ThreadingHTTPServer:
    """Start /healthz on 127.0.0.1:PORT in a daemon thread (PORT 0: any free port, see
    `server_address`)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = CONNECTION_SECONDS  # writing the answer: at most this long too

        def setup(self) -> None:
            super().setup()
            deadline = time.monotonic() + CONNECTION_SECONDS
            self.rfile.close()  # the socket's own reader: closed, or the socket would outlive it
            self.rfile = io.BufferedReader(_Deadline(self.connection, deadline))

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path.split("?")[0] != "/healthz":
                self._answer(404, "not found: only /healthz is served\n")
                return
            ready, why = readiness.get()
            self._answer(200 if ready else 503, ("ok: " if ready else "not ready: ") + why + "\n")

        def _answer(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass  # probes every few seconds would drown the event lines

    server = _Server(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
