"""How the agent says it is ready: a file that exists exactly while it is (an exec readiness
probe tests it) and/or `GET /healthz` on 127.0.0.1 (200 "ok", else 503 and the reason)."""

from __future__ import annotations

import contextlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from nvdocker2.host import files


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


def serve_healthz(port: int, readiness: Readiness) -> ThreadingHTTPServer:
    """Start /healthz on 127.0.0.1:PORT in a daemon thread (PORT 0: any free port, see
    `server_address`)."""

    class Handler(BaseHTTPRequestHandler):
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

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
