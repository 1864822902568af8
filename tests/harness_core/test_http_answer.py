"""Why a node gave no usable answer is kept, in the node's own words: before,
`http_json` turned a 400 with ember's message, a timeout and a closed port all
into None, and zone creation said only "no node accepted POST
/admin/zones/default"."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness import plan as plans
from harness.db import EmberDB
from harness.nodehttp import http_answer, http_json
from harness.progress import RunStatus
from harness.runner import run
from harness.sim.db import SimEmberDB

ANSWERS: dict[str, tuple[int, bytes]] = {
    "/ok": (200, b'{"zone": {"id": "default"}}'),
    "/bad-zone": (400, b'{"error": "bad-zone", "message": "partitions must be at most 6"}'),
    "/plain": (503, b"upstream gone\n"),
    "/empty": (500, b""),
    "/not-json": (200, b"<html>"),
    "/list": (200, b"[1, 2]"),
}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path == "/slow":
            time.sleep(1.0)
        status, body = ANSWERS.get(self.path, (200, b"{}"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_answer_keeps_the_object(server: str) -> None:
    got = http_answer(server + "/ok", "POST", {})
    assert got.doc == {"zone": {"id": "default"}}
    assert got.problem == ""
    assert http_json(server + "/ok", "POST", {}) == got.doc


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/bad-zone", "refused (400 bad-zone): partitions must be at most 6"),
        ("/plain", "refused (503): upstream gone"),
        ("/empty", "refused (500)"),
        ("/not-json", "answered with something that is not JSON"),
        ("/list", "answered with JSON that is not an object"),
    ],
)
def test_no_usable_answer_says_why(server: str, path: str, problem: str) -> None:
    got = http_answer(server + path, "POST", {})
    assert got.doc is None
    assert got.problem == problem
    assert http_json(server + path, "POST", {}) is None


def test_a_timeout_and_a_closed_port_are_told_apart(server: str) -> None:
    assert http_answer(server + "/slow", "POST", {}, timeout_s=0.2).problem == (
        "no answer within 0.2 s"
    )
    closed = http_answer(f"http://127.0.0.1:{_closed_port()}/x", timeout_s=1).problem
    assert closed.startswith("unreachable (")
    assert "refused" in closed.lower()


@pytest.mark.slow
def test_a_refused_zone_names_what_each_simulated_node_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's setup asks ember for a zone larger than the nodes' groups
    (the up-front check, which reads EmberDB's request, refuses such a setting:
    only the simulated db's request is forced here)."""
    asked = EmberDB.zone_request

    def too_large(self: EmberDB, workloads: list[str]) -> dict[str, object] | None:
        body = asked(self, workloads)
        return None if body is None else {**body, "partitions": 99}

    monkeypatch.setattr(SimEmberDB, "zone_request", too_large)
    plan = plans.Plan(seed=1, backend="sim", nodes=("n1", "n2", "n3"), time_limit_s=2.0,
                      quiet_s=1.0, workload=("rebalance",), nemesis=("partition",))  # fmt: skip
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is not None
    why = "refused (400 bad-zone): partitions must be at most the nodes' 6 groups (--partitions)"
    for node in ("n1", "n2", "n3"):
        assert f"{node} {why}" in outcome.error, outcome.error
    summary = json.loads((outcome.run.path / "results.json").read_text())
    assert why in json.dumps(summary)
