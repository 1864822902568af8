"""The persistent shell: one exchange per command, exit status from the marker, fallback."""

from __future__ import annotations

import re
from typing import Any

import pytest

from harness.control import CommandError, CommandResult
from nemesis.shell import Shell


class FakeChan:
    """Answers each script as `sh` would: the output, then the marker line with the status."""

    def __init__(self, answers: list[tuple[str, int]]) -> None:
        self.answers, self.sent, self.closed, self._out = answers, [], False, b""

    def sendall(self, data: bytes) -> None:
        self.sent.append(data.decode())
        marker = re.search(r"(__faultline_\w+__)", data.decode())
        assert marker is not None
        out, status = self.answers.pop(0)
        # Split in two reads, as TCP may deliver it.
        reply = f"{out}\n{marker.group(1)} {status}\n".encode()
        self._out += reply

    def recv(self, _n: int) -> bytes:
        chunk, self._out = self._out[:7], self._out[7:]
        return chunk

    def exec_command(self, command: str) -> None:
        assert command == "exec sh"

    def settimeout(self, _t: float) -> None: ...

    def exit_status_ready(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class FakeControl:
    """Hands out one prepared channel; `run` is the fallback."""

    def __init__(self, chan: Any) -> None:
        self.nodes = {"n1": None}
        self.chan, self.opened, self.fallbacks = chan, 0, []

    def client(self, _name: str) -> Any:
        control = self

        class Transport:
            sock = None

            def open_session(self) -> Any:
                control.opened += 1
                if control.chan is None:
                    raise OSError("connection dropped")
                return control.chan

        class Client:
            def get_transport(self) -> Any:
                return Transport()

        return Client()

    def run(self, node: str, command: str, **_kw: Any) -> CommandResult:
        self.fallbacks.append(command)
        return CommandResult(node, command, 0, "via control", "")


def test_commands_share_one_channel_and_report_output_and_status() -> None:
    """Two commands, one channel opened; stdout and the exit status come back."""
    chan = FakeChan([("4242", 0), ("boom", 3)])
    control = FakeControl(chan)
    shell = Shell(control)  # type: ignore[arg-type]
    got = shell.run_many({"n1": "kill -9 1"})["n1"]
    assert (got.exit_status, got.stdout) == (0, "4242\n")
    with pytest.raises(CommandError, match="exited 3"):
        shell.run("n1", "false")
    assert control.opened == 1
    assert "kill -9 1" in chan.sent[0]


def test_a_broken_channel_falls_back_to_control() -> None:
    """No channel can be opened: the command runs through Control.run instead."""
    control = FakeControl(None)
    got = Shell(control).run("n1", "kill -9 1")  # type: ignore[arg-type]
    assert got.stdout == "via control"
    assert control.fallbacks == ["kill -9 1"]
