"""Which history format a file is in, and reading it as faultline events.

`faultline check --format auto|faultline|jepsen|porcupine`:

- `faultline`: history.jsonl (DESIGN.md, "Histories").
- `jepsen`: a Jepsen history.edn (importers/jepsen.py).
- `porcupine`: porcupine's test histories, Jepsen etcd logs and kv EDN lines
  (importers/porcupine.py), whose meanings differ from Jepsen's: there a
  failed cas ran and compared unequal, and an empty kv read means absent.
  porcupine v1.3.0 has no JSON history format of its own; these text files
  are what its tests and users' fixtures are written in.
- `auto`: decided by the file's first characters: `{"` is faultline JSON,
  `INFO  jepsen.util` an etcd log, a porcupine kv line a porcupine kv
  history, any other `{`, `[`, `(` or `;` Jepsen EDN. A run directory holds
  history.jsonl, or Jepsen's history.edn.
"""

from __future__ import annotations

from pathlib import Path

from checkers.history import Event, HistoryError, load_history, validate
from checkers.linearizability.types import LinOp

FORMATS = ("auto", "faultline", "jepsen", "porcupine")
_HEAD_BYTES = 4096


def history_file(path: Path) -> Path:
    """The history file of a run dir (history.jsonl, else history.edn), or `path`."""
    if not path.is_dir():
        if not path.is_file():
            raise FileNotFoundError(f"no history at {path}")
        return path
    for name in ("history.jsonl", "history.edn"):
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(f"no history at {path / 'history.jsonl'} (nor history.edn)")


def detect(path: Path) -> str:
    """The format of the history file at `path` (see the module docstring)."""
    with open(path, "rb") as fh:
        head = fh.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    body = head.lstrip()
    if not body:
        return "jepsen" if path.suffix == ".edn" else "faultline"
    if body.startswith('{"'):
        return "faultline"
    from checkers.importers.porcupine import _ETCD_PREFIX, _KV_LINE  # late: start-up

    if body.startswith(_ETCD_PREFIX):
        return "porcupine"
    if _KV_LINE.match(body.split("\n", 1)[0]):
        return "porcupine"
    if body[0] in "{[(;#":
        return "jepsen"
    raise HistoryError(
        f"{path}: not a history this tool reads (faultline JSON lines, Jepsen EDN, "
        f"porcupine etcd log or kv lines); name one with --format"
    )


def load_events(path: Path, fmt: str, notes: list[str]) -> tuple[str, list[Event]]:
    """(format, validated events) of the history at `path`; `notes` gets
    what a reader of the verdict should know (a torn last line, ...)."""
    if fmt == "auto":
        fmt = detect(path)
    if fmt == "faultline":
        return fmt, load_history(path, notes=notes)
    if fmt == "jepsen":
        from checkers.importers.jepsen import load_jepsen

        return fmt, load_jepsen(path, notes)
    if fmt == "porcupine":
        from checkers.importers.porcupine import FixtureFormatError, load

        try:
            _, ops = load(path)
        except FixtureFormatError as exc:
            raise HistoryError(str(exc)) from None
        events = events_of(ops)
        validate(events, str(path))
        return fmt, events
    raise HistoryError(f"unknown history format {fmt!r} (one of {', '.join(FORMATS)})")


def events_of(ops: list[LinOp]) -> list[Event]:
    """faultline events that pair back into `ops`: an invoke at each op's
    call position and, for a known op, an `ok` at its return carrying its
    output (a cas's True/False says whether it swapped); an unknown op gets
    no completion, so it pairs as `info`. Positions are indices and times."""
    marks: list[tuple[int, int, LinOp]] = []
    for op in ops:
        marks.append((op.call, 0, op))
        if op.known and op.ret is not None:
            marks.append((op.ret, 1, op))
    marks.sort(key=lambda m: (m[0], m[1]))
    events = []
    for pos, kind, op in marks:
        value = op.input if kind == 0 else op.output
        events.append(
            Event(
                index=pos, time=pos, process=op.process, type="invoke" if kind == 0 else "ok",
                f=op.f, key=None if op.key is None else str(op.key),
                value=list(value) if isinstance(value, tuple) else value,
            )
        )  # fmt: skip
    return events
