"""Import porcupine's test histories (Jepsen etcd logs, kv EDN lines).

Both formats order events by line only: an operation's call is its invoke
line's index and its return its completion line's index. The meaning of
each line is documented in /work/shared/fixtures/porcupine/README.md;
in short, for the etcd logs:

- `:info` (timed out) write/cas: unknown outcome, open until the end;
- `:fail :read :timed-out`: no result, constrains nothing: dropped;
- `:fail :cas [a b]`: ran and compared unequal: a known cas with output
  False (unlike faultline, where `fail` means "did not happen").

kv gets read "" for an absent key; the kv model's absent value is None, so
an empty get result becomes None (the fixtures never put "").
"""

from __future__ import annotations

import re
from pathlib import Path

from checkers.linearizability.types import LinOp

_ETCD_PREFIX = "INFO  jepsen.util - "
_KV_LINE = re.compile(
    r"^\{:process (\d+), :type :(invoke|ok), :f :(get|put|append), "
    r':key "([^"]*)", :value (nil|"([^"]*)")\}$'
)
_CAS_VALUE = re.compile(r"^\[(-?\d+) (-?\d+)\]$")


class FixtureFormatError(ValueError):
    """A fixture line that does not follow its format."""


def _etcd_value(text: str, f: str, where: str) -> object:
    if text in ("nil", ":timed-out"):
        return None
    if f == "cas":
        m = _CAS_VALUE.match(text)
        if m is None:
            raise FixtureFormatError(f"{where}: cas value {text!r} is not [A B]")
        return (int(m.group(1)), int(m.group(2)))
    try:
        return int(text)
    except ValueError:
        raise FixtureFormatError(f"{where}: value {text!r} is not an integer or nil") from None


def parse_etcd_log(text: str, *, source: str = "etcd log") -> list[LinOp]:
    """LinOps for the `etcd` model from a Jepsen etcd log's text."""
    pending: dict[int, tuple[int, str, object]] = {}  # process -> (call, f, input)
    ops: list[LinOp] = []
    for n, line in enumerate(text.splitlines()):
        where = f"{source} line {n + 1}"
        if not line.startswith(_ETCD_PREFIX):
            raise FixtureFormatError(f"{where}: missing prefix {_ETCD_PREFIX!r}")
        fields = line[len(_ETCD_PREFIX) :].split(maxsplit=3)
        if len(fields) != 4 or not fields[0].isdigit():
            raise FixtureFormatError(f"{where}: expected '<proc> :<type> :<f> <value>'")
        proc, kind, f = int(fields[0]), fields[1].lstrip(":"), fields[2].lstrip(":")
        if f not in ("read", "write", "cas"):
            raise FixtureFormatError(f"{where}: unknown f {f!r}")
        value = _etcd_value(fields[3], f, where)
        if kind == "invoke":
            if proc in pending:
                raise FixtureFormatError(f"{where}: process {proc} invokes while busy")
            pending[proc] = (n, f, value)
            continue
        if kind not in ("ok", "fail", "info"):
            raise FixtureFormatError(f"{where}: unknown type {kind!r}")
        if proc not in pending or pending[proc][1] != f:
            raise FixtureFormatError(f"{where}: {kind} {f} without a matching invoke")
        call, _, arg = pending.pop(proc)
        if kind == "fail" and f == "read":
            continue  # timed-out read: no result, no effect
        known = kind != "info"
        output: object = None
        if f == "read" and known:
            output = value
        elif f == "cas" and known:
            output = kind == "ok"
        ops.append(
            LinOp(id=call, process=proc, call=call, ret=n if known else None, f=f,
                  input=arg, output=output, known=known)
        )  # fmt: skip
    for proc, (call, f, arg) in pending.items():  # never completed: unknown
        ops.append(LinOp(id=call, process=proc, call=call, ret=None, f=f, input=arg, known=False))
    return ops


def parse_kv_edn(text: str, *, source: str = "kv history") -> list[LinOp]:
    """LinOps for the `kv` model from porcupine's kv EDN lines."""
    pending: dict[int, tuple[int, str, str, str | None]] = {}
    ops: list[LinOp] = []
    for n, line in enumerate(text.splitlines()):
        m = _KV_LINE.match(line)
        if m is None:
            raise FixtureFormatError(f"{source} line {n + 1}: not a kv EDN event: {line[:80]!r}")
        proc, kind, f, key, value = int(m[1]), m[2], m[3], m[4], m[6]
        if kind == "invoke":
            if proc in pending:
                raise FixtureFormatError(
                    f"{source} line {n + 1}: process {proc} invokes while busy"
                )
            pending[proc] = (n, f, key, value)
            continue
        if proc not in pending or pending[proc][1:3] != (f, key):
            raise FixtureFormatError(f"{source} line {n + 1}: ok {f} without a matching invoke")
        call, _, _, arg = pending.pop(proc)
        output = (value or None) if f == "get" else None
        ops.append(
            LinOp(id=call, process=proc, call=call, ret=n, f=f, key=key, input=arg, output=output)
        )
    for proc, (call, f, key, arg) in pending.items():
        ops.append(LinOp(id=call, process=proc, call=call, ret=None, f=f, key=key, input=arg,
                         known=False))  # fmt: skip
    return ops


def load(path: str | Path) -> tuple[str, list[LinOp]]:
    """(model name, ops) for a fixture file, by its format (etcd log or kv EDN)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise FixtureFormatError(f"{p}: cannot read: {exc}") from None
    if text.startswith(_ETCD_PREFIX) or (not text and p.suffix == ".log"):
        return "etcd", parse_etcd_log(text, source=str(p))
    return "kv", parse_kv_edn(text, source=str(p))
