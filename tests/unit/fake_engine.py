"""TEST FIXTURE: a fake Engine API on a unix socket, for edge cases a real dockerd will not
produce on demand (slow answers, HTTP errors, a state that changes between polls).
End-to-end tests use a real private dockerd instead."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Callable


class FakeEngine:
    """Serves GET /_ping, /info, /containers/json from `self.info` (a dict tests mutate), or
    from `self.responder(path, count)` -> (status, body) when set."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)
        self.info: dict = {
            "Runtimes": {"runc": {"path": "runc"}},
            "DefaultRuntime": "runc",
            "ServerVersion": "20.10.24",
            "LiveRestoreEnabled": False,
            "ContainersRunning": 0,
        }
        self.containers: list = []
        self.responder: Callable[[str, int], tuple[int, bytes]] | None = None
        self.delay = 0.0
        self.requests: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                engine.requests.append(self.path)
                if engine.delay:
                    time.sleep(engine.delay)
                if engine.responder is not None:
                    status, body = engine.responder(self.path, len(engine.requests))
                elif self.path == "/_ping":
                    status, body = 200, b"OK"
                elif self.path == "/info":
                    status, body = 200, json.dumps(engine.info).encode()
                elif self.path.startswith("/containers/json"):
                    status, body = 200, json.dumps(engine.containers).encode()
                else:
                    status, body = 404, b'{"message": "page not found"}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                return None

            def address_string(self) -> str:
                return "fake"

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(str(self.socket_path), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def host(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> FakeEngine:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
