"""Import a Jepsen history (history.edn) as faultline events.

Jepsen's op maps carry `:process`, `:type` (`:invoke :ok :fail :info`),
`:f` and `:value`, the same meanings as faultline's events: `fail`
certainly did not happen, `info` is unknown. So the import is a renaming,
and the rest of `faultline check` (pairing, validation, the checkers) runs
unchanged:

- keywords become their names (`:read` -> "read"); vectors become lists;
  sets become sorted lists; map keys become text.
- `index` is the event's position in the file (Jepsen's `:index`, where
  present, is the same order); `time` is `:time` (ns) made non-decreasing
  (Jepsen's relative times may step back by a little between threads; the
  checkers order operations by index, as Knossos does), or the position
  when absent.
- ops of a process that is not an integer (`:nemesis`) are faults, not
  client operations: they are left out and counted in a note.
- independent keys (`jepsen.independent`): when every client op's value is
  a `[key value]` tuple, the key goes to `key` and the inner value to
  `value`. A history of cas ops only is ambiguous (`[1 2]` is a plain cas
  too); it counts as independent only if some cas carries `[key [old
  new]]`.
- a torn last value (the writer crashed mid-line) is skipped with a note;
  any other malformed text is refused naming its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

from checkers.history import Event, EventType, HistoryError, validate
from checkers.importers.edn import EdnError, Keyword, Symbol, TornEdnError, read_top_level

_TYPES: dict[str, EventType] = {"invoke": "invoke", "ok": "ok", "fail": "fail", "info": "info"}


def plain(value: Any) -> Any:
    """An EDN value as JSON-able data (see the module docstring)."""
    if isinstance(value, Keyword | Symbol):
        return str(value)
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, frozenset):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    return value


def _is_pair(value: Any) -> TypeGuard[tuple[Any, Any]]:
    return isinstance(value, tuple) and len(value) == 2


def is_independent(maps: list[dict[Any, Any]]) -> bool:
    """Whether every client invoke's value is a [key value] tuple (see the
    module docstring for the cas-only case)."""
    invokes = [m for m in maps if m.get(Keyword("type")) == "invoke"]
    if not invokes or not all(_is_pair(m.get(Keyword("value"))) for m in invokes):
        return False
    fs = {m.get(Keyword("f")) for m in invokes}
    if fs != {"cas"}:
        return True
    return any(_is_pair(m[Keyword("value")][1]) for m in invokes)


def _read_maps(text: str, source: str, notes: list[str]) -> list[dict[Any, Any]]:
    maps: list[Any] = []
    values = read_top_level(text, source)
    try:
        maps.extend(values)
    except TornEdnError as exc:
        last_line = text.count("\n", 0, len(text.rstrip("\n"))) + 1
        if exc.line < last_line:
            raise HistoryError(
                f"{exc} (it opens before the last line: the file is corrupt)"
            ) from None
        notes.append(
            f"{source}: line {exc.line} is torn (the writer stopped mid-value): "
            f"checked the {len(maps)} events before it"
        )
    except EdnError as exc:
        raise HistoryError(str(exc)) from None
    for n, m in enumerate(maps):
        if not isinstance(m, dict):
            raise HistoryError(f"{source}: event {n + 1} is not a map: {plain(m)!r:.80}")
    return maps


def load_jepsen(path: str | Path, notes: list[str]) -> list[Event]:
    """The client events of a Jepsen history.edn (see the module docstring);
    appends what the reader should know to `notes`."""
    source = str(path)
    text = Path(path).read_text(encoding="utf-8")
    maps = _read_maps(text, source, notes)
    clients = [m for m in maps if isinstance(m.get(Keyword("process")), int)]
    independent = is_independent(clients)
    events: list[Event] = []
    last_time = 0
    for n, m in enumerate(clients):
        kind, f = m.get(Keyword("type")), m.get(Keyword("f"))
        if not isinstance(kind, str) or kind not in _TYPES:
            raise HistoryError(f"{source}: event {n + 1}: :type {plain(kind)!r} is not one of "
                               f"{sorted(_TYPES)}")  # fmt: skip
        if not isinstance(f, str):
            raise HistoryError(f"{source}: event {n + 1}: :f {plain(f)!r} is not a name")
        value, key = m.get(Keyword("value")), m.get(Keyword("key"))
        if independent and _is_pair(value):
            key, value = value
        time = m.get(Keyword("time"))
        last_time = max(last_time, time if isinstance(time, int) else n)
        error = m.get(Keyword("error"))
        events.append(
            Event(
                index=n, time=last_time, process=m[Keyword("process")], type=_TYPES[kind],
                f=str(f), key=None if key is None else str(plain(key)), value=plain(value),
                error=None if error is None else str(plain(error)),
            )
        )  # fmt: skip
    try:
        validate(events, source)
    except HistoryError as exc:  # its positions are events here, not lines
        raise HistoryError(str(exc).replace(": line ", ": event ", 1)) from None
    dropped = len(maps) - len(clients)
    if dropped:
        notes.append(f"{source}: left out {dropped} events of non-client processes (nemesis)")
    if independent:
        notes.append(f"{source}: read [key value] tuples as independent keys")
    return events
