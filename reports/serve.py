"""`faultline serve`: the store over HTTP on localhost.

A threading `http.server` serving the store's files as they are (reports
are self-contained, so static files are all it takes), bound to 127.0.0.1
only: reports name hosts and seeds of a test environment and are not meant
for the network. The index is regenerated before serving starts.
"""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves files without a log line per request on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def make_server(root: Path, port: int = 0) -> ThreadingHTTPServer:
    """A server of `root` on 127.0.0.1:`port` (0 picks a free port); not yet serving."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer((HOST, port), handler)
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    """The server's base URL."""
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}/"
