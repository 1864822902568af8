"""One long-lived shell per node, for faults that must land within milliseconds.

Theory of operation. `Control.run` opens an SSH session per command: a
channel-open, an exec request and the exit status, each a round trip
through paramiko's transport thread, which on a loaded harness (clients,
five tail readers) waits for the GIL at every hop. `Shell` keeps one
`sh` running per node on a channel opened once, writes each script to its
stdin followed by a marker line carrying the exit status, and reads up to
the marker: one round trip. It answers `run_many` like `Control` (output
and errors together in stdout; `CommandError` on a non-zero exit when
`check`), so the fault primitives run on it unchanged. A broken channel (the
node restarted its sshd, the connection dropped) is closed and the command
falls back to `Control.run`, which reopens; the next call opens a fresh
shell. Only the phase-triggered hot path uses it; heals and everything else
go through `Control`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from harness.control import CommandError, CommandResult, Control, ControlError


class Shell:
    """A persistent `sh` per node (see the module doc); `close()` when done."""

    def __init__(self, control: Control) -> None:
        self.control = control
        self._chans: dict[str, Any] = {}
        self._locks = {name: threading.Lock() for name in control.nodes}

    def close(self) -> None:
        """Close every shell's channel."""
        for chan in list(self._chans.values()):
            chan.close()
        self._chans.clear()

    def _chan(self, node: str) -> Any:
        chan = self._chans.get(node)
        if chan is None or chan.closed or chan.exit_status_ready():
            transport = self.control.client(node).get_transport()
            # The connection is shared with the tail readers, whose window
            # updates leave small packets unacknowledged: without NODELAY our
            # script waits behind them for a delayed ACK (~40 ms).
            with contextlib.suppress(OSError, AttributeError):
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            chan = transport.open_session()
            chan.exec_command("exec sh")
            self._chans[node] = chan
        return chan

    def run(self, node: str, command: str, *, timeout_s: float = 60.0,
            check: bool = True) -> CommandResult:  # fmt: skip
        """Run `command` in `node`'s shell; falls back to `Control.run` if the shell broke."""
        with self._locks[node]:
            try:
                status, out = self._exchange(node, command, timeout_s)
            except (OSError, EOFError, ControlError, AttributeError, TimeoutError):
                chan = self._chans.pop(node, None)
                if chan is not None:
                    chan.close()
                return self.control.run(node, command, timeout_s=timeout_s, check=check)
        result = CommandResult(node, command, status, out, "")
        if check and not result.ok:
            raise CommandError(f"command on {node} exited {status}: {command}\n{out[-800:]}")
        return result

    def _exchange(self, node: str, command: str, timeout_s: float) -> tuple[int, str]:
        chan = self._chan(node)
        marker = f"__faultline_{uuid.uuid4().hex}__"
        # The subshell keeps an `exit` in the script from ending our shell; the
        # answer goes out in one write: two small ones meet Nagle and delayed
        # ACKs, which cost ~40 ms.
        chan.sendall(f"o=$( ( {command} ) </dev/null 2>&1 ); s=$?;"
                     f" printf '%s\\n{marker} %s\\n' \"$o\" \"$s\"\n".encode())  # fmt: skip
        buffer, deadline = b"", time.monotonic() + timeout_s
        chan.settimeout(timeout_s)
        while marker.encode() not in buffer or not buffer.endswith(b"\n"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from {node}'s shell within {timeout_s:g}s")
            chunk = chan.recv(65536)
            if not chunk:
                raise EOFError(f"{node}'s shell closed")
            buffer += chunk
        text = buffer.decode(errors="replace")
        out, _, tail = text.rpartition(marker)
        return int(tail.split()[0]), out

    def run_many(self, commands: Mapping[str, str], *, timeout_s: float = 60.0,
                 check: bool = True) -> dict[str, CommandResult]:  # fmt: skip
        """`run` on each node at once, like `Control.run_many`."""

        def one(name: str) -> CommandResult:
            return self.run(name, commands[name], timeout_s=timeout_s, check=check)

        if len(commands) == 1:  # the usual fault: spare a thread pool on the hot path
            return {name: one(name) for name in commands}
        return dict(zip(commands, self.control.parallel(list(commands), one), strict=True))
