"""Live progress of a run (rich): stage, elapsed, op outcomes, faults, change stages.

The runner updates a `RunStatus` and hands `Progress` a function that
returns the current one; on a terminal a rich `Live` panel redraws it twice
a second, elsewhere (CI logs, the nightly's subprocess) a plain line is
printed every `plain_every_s` seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


@dataclass(slots=True)
class RunStatus:
    """What the display shows; the runner mutates it as the run goes."""

    stage: str = "starting"
    started: float = field(default_factory=time.monotonic)
    time_limit_s: float = 0.0
    ok: int = 0
    fail: int = 0
    info: int = 0
    changes: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    doing: str = ""  # during setup: what it is doing now (which image layer, which nodes)

    def doing_now(self, what: str) -> None:
        """Say what setup is doing (empty: setup is over)."""
        self.doing = what

    def line(self) -> str:
        """A one-line summary: during setup, what it is doing; after, op counts."""
        elapsed = time.monotonic() - self.started
        if self.doing:
            return f"[{self.stage}] {elapsed:6.1f}s  {self.doing}"
        changing = {g: s for g, s in sorted(self.stages.items()) if s not in ("none", "")}
        return (
            f"[{self.stage}] {elapsed:6.1f}s  ops ok {self.ok} fail {self.fail} unknown {self.info}"
            f"  changes {_fmt(self.changes)}  faults {', '.join(self.faults) or '-'}"
            f"  stages {_fmt(changing) or '-'}"
        )


def _fmt(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())


def _table(status: RunStatus) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    elapsed = time.monotonic() - status.started
    limit = f" / {status.time_limit_s:g}s" if status.time_limit_s else ""
    table.add_row("stage", status.stage)
    table.add_row("elapsed", f"{elapsed:.1f}s{limit}")
    if status.doing:  # setup: no ops yet, so say what is taking the time
        table.add_row("doing", status.doing)
        return table
    table.add_row(
        "client ops",
        f"[green]ok {status.ok}[/]  [red]fail {status.fail}[/]  [yellow]unknown {status.info}[/]",
    )
    table.add_row("changes", _fmt(status.changes) or "-")
    table.add_row("active faults", ", ".join(status.faults) or "-")
    changing = {g: s for g, s in sorted(status.stages.items()) if s not in ("none", "")}
    table.add_row("change stages", _fmt(changing) or "-")
    for note in status.notes[-3:]:
        table.add_row("note", note)
    return table


class Progress:
    """Shows `get()` live until `close()`; `log()` prints a line above it."""

    def __init__(
        self,
        get: Callable[[], RunStatus],
        *,
        console: Console | None = None,
        plain_every_s: float = 5.0,
        enabled: bool = True,
    ) -> None:
        self.get = get
        self.console = console or Console(file=sys.stderr)
        self.enabled = enabled
        self.plain_every_s = plain_every_s
        self._live: Live | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        if self.console.is_terminal:
            self._live = Live(
                get_renderable=lambda: _table(self.get()),
                console=self.console,
                refresh_per_second=2,
                transient=False,
            )
            self._live.start()
        else:
            self._thread = threading.Thread(target=self._plain, daemon=True, name="progress")
            self._thread.start()
        return self

    def _plain(self) -> None:
        while not self._stop.wait(self.plain_every_s):
            self.console.print(self.get().line(), highlight=False, markup=False)

    def log(self, message: str) -> None:
        """Print one line (above the live panel, if any)."""
        if self.enabled:
            self.console.print(message, highlight=False, markup=False)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
