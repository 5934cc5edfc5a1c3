"""The node agent's kubelet port (test infrastructure): container logs over HTTPS.

The API server proxies ``kubectl logs`` to
``https://<InternalIP>:<kubeletEndpoint.Port>/containerLogs/<ns>/<pod>/<container>``,
authenticating with its kubelet client certificate (verified here against the cluster
CA). Supported query parameters: ``follow``, ``tailLines``, ``previous``, ``limitBytes``
(``timestamps`` and ``sinceSeconds`` are ignored).
"""

from __future__ import annotations

import http.server
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agent import NodeAgent


def tail(data: bytes, lines: int) -> bytes:
    if lines < 0:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        if parts == ["healthz"]:
            self._send(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._send(404, b"not found")
            return
        _, ns, pod, container = parts
        worker = self.server.agent.worker(ns, pod)
        run = worker.find(container) if worker else None
        if worker is None or run is None:
            self._send(404, f"container {container!r} of pod {ns}/{pod} not found".encode())
            return
        if run.runs == 0:  # kubelet answers 400 for a container that has not started yet
            msg = f"container {container!r} in pod {pod!r} is waiting to start: ContainerCreating"
            self._send(400, msg.encode())
            return
        previous = query.get("previous", ["false"])[0] == "true"
        if previous and run.runs < 2:
            self._send(400, f"previous terminated container {container!r} not found".encode())
            return
        path: Path = run.log_file(previous)
        follow = query.get("follow", ["false"])[0] == "true" and not previous
        lines = int(query.get("tailLines", ["-1"])[0])
        limit = int(query.get("limitBytes", ["0"])[0])
        try:
            data = tail(path.read_bytes(), lines)
        except FileNotFoundError:
            data = b""
        if limit > 0:
            data = data[:limit]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if not follow:
            return
        runs = run.runs
        offset = path.stat().st_size if path.exists() else 0
        with open(path, "rb") as f:
            f.seek(offset)
            while not self.server.stopping:
                chunk = f.read(65536)
                if chunk:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    continue
                if not run.running or run.runs != runs:
                    break
                time.sleep(0.2)

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    agent: NodeAgent
    stopping = False


class LogServer:
    """HTTPS server on 127.0.0.1:<port> (port 0 picks a free one)."""

    def __init__(self, agent: NodeAgent, cert: Path, key: Path, client_ca: Path) -> None:
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.agent = agent
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        ctx.load_verify_locations(str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.stopping = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
