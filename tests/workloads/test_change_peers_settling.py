"""The change-peers worker asks a settling leader again (no processes: a scripted client).

Found in CI: a change sent right after an election got `409 change-busy: no
entry of term 2 is committed yet`, a refusal the new leader lifts within a
heartbeat round, and the op failed on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ember.client import Outcome
from workloads import change_peers
from workloads.change_peers import SETTLE_TRIES, ChangePeersWorker
from workloads.generator import Op

LEADER = "http://n2"
OK = Outcome("ok", {"ok": True, "status": None, "reason": "done", "token": 4}, None, 200, LEADER)


def _busy(settling: bool) -> Outcome:
    doc = {"error": "change-busy", "message": "...", "outcome": "fail", "settling": settling}
    return Outcome("fail", doc, "change-busy: ...", 409, LEADER)


class ScriptedClient:
    """Answers each change-peers POST with the next scripted outcome; records when
    (loop time) and where each was sent."""

    def __init__(self, answers: list[Outcome]) -> None:
        self.answers = answers
        self.sent: list[tuple[float, str | None]] = []
        self.urls = [LEADER]
        self._leaders: dict[int, str] = {4: LEADER}

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Outcome:
        if path == "/admin/status":
            return Outcome("fail", None, "not scripted", 500, kw.get("base"))
        assert (method, path) == ("POST", "/admin/change-peers")
        self.sent.append((asyncio.get_running_loop().time(), kw.get("base")))
        return self.answers.pop(0)


def _invoke(client: ScriptedClient) -> Any:
    op = Op(f="change-peers", group="part-4",
            value={"group": "part-4", "peers": ["n1", "n2", "n3"], "learners": [], "token": 4,
                   "move": "add"})  # fmt: skip
    worker = ChangePeersWorker(client, {LEADER: "n2"})  # type: ignore[arg-type]
    return asyncio.run(worker.invoke(op))


@pytest.fixture(autouse=True)
def _short_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_peers, "SETTLE_PAUSE_S", 0.02)


def test_a_settling_leader_is_asked_again_until_it_takes_the_change() -> None:
    client = ScriptedClient([_busy(True), _busy(True), OK])
    reply = _invoke(client)
    assert reply.type == "ok", reply
    assert [url for _, url in client.sent] == [LEADER] * 3
    gaps = [b - a for (a, _), (b, _) in zip(client.sent, client.sent[1:], strict=False)]
    assert min(gaps) >= 0.02


def test_a_leader_that_never_settles_fails_the_op_after_a_bounded_number_of_asks() -> None:
    client = ScriptedClient([_busy(True)] * (SETTLE_TRIES + 5))
    reply = _invoke(client)
    assert (reply.type, reply.error) == ("fail", "change-busy: ..."), reply
    assert len(client.sent) == SETTLE_TRIES + 1


def test_a_change_in_flight_is_not_waited_out() -> None:
    """Busy with another change (not settling): the op fails at once, as before."""
    client = ScriptedClient([_busy(False), OK])
    reply = _invoke(client)
    assert reply.type == "fail", reply
    assert len(client.sent) == 1
