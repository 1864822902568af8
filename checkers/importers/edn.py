"""A reader for EDN, the notation Jepsen writes its histories in.

Why our own: the one maintained EDN library on PyPI (edn_format) parses
with PLY at about 1.5 ms per history line, so a 100k-operation Jepsen
history (200k lines) would take five minutes to read, and importing it
costs 0.1 s of the check's start-up. This reader covers the EDN that
histories use and is tested against edn_format as an oracle
(tests/checkers/importers/test_edn.py).

Theory of operation: one compiled regex splits the text into tokens
(whitespace, commas and `;` comments are skipped); a loop with an explicit
stack of open collections builds values, so nesting depth costs no Python
recursion. `read_top_level` yields the top-level values one at a time and,
when the whole text is one vector or list, the values inside it instead:
Jepsen writes history.edn both ways. Text that ends inside an unfinished
value raises `TornEdnError` (a writer that crashed mid-line), any other
malformed text `EdnError`, each naming the line.

Mapping to Python: nil -> None, true/false -> bool, integers (with or
without an `N` suffix) -> int, decimals -> float, strings -> str,
keywords -> `Keyword` (a str subclass holding the name without the
colon), symbols -> `Symbol`, vectors and lists -> tuple, sets -> frozenset,
maps -> dict. A tagged value (`#inst "..."`, `#uuid "..."`, a record
literal `#jepsen.history.Op{...}`) reads as the value after its tag;
`#_` discards the next value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any


class EdnError(ValueError):
    """Text that is not EDN; the message names the line."""


class TornEdnError(EdnError):
    """The text ends inside an unfinished value (a torn last write)."""

    def __init__(self, message: str, line: int, complete: int) -> None:
        super().__init__(message)
        self.line = line
        # How many top-level values were read whole before the tear.
        self.complete = complete


class Keyword(str):
    """An EDN keyword, by name (`:invoke` is Keyword("invoke"))."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f":{self}"


class Symbol(str):
    """An EDN symbol, by name."""

    __slots__ = ()


_TOKEN = re.compile(
    r"""
    (?P<skip>(?:[\s,]+|;[^\n]*)+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<open>\#\{|[\[({])
  | (?P<close>[\])}])
  | (?P<discard>\#_)
  | (?P<tag>\#[A-Za-z][^\s,\[\](){}";]*)
  | (?P<char>\\(?:newline|space|tab|return|u[0-9a-fA-F]{4}|.))
  | (?P<atom>[^\s,\[\](){}";\\]+)
  | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_INT = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?M?")
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_CLOSERS = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_DISCARD = object()  # the stack marker of a pending `#_`
_TAG = object()  # the stack marker of a pending tag
_SKIP = re.compile(r"(?:[\s,]+|;[^\n]*)*")
# What may follow the `[` of a vector of events: a map, a record, or its end.
_MAP_STARTS = ("{", "#", "]", ")", "")


def _atom(text: str) -> Any:
    if text == "nil":
        return None
    if text == "true":
        return True
    if text == "false":
        return False
    if text[0] == ":":
        if len(text) == 1:
            raise ValueError("a keyword needs a name")
        return Keyword(text[1:])
    if _INT.fullmatch(text):
        return int(text.rstrip("N"))
    if _FLOAT.fullmatch(text):
        return float(text.rstrip("M"))
    if text[0].isdigit():
        raise ValueError(f"not a number: {text!r}")
    return Symbol(text)


def _string(token: str) -> str:
    if "\\" not in token:
        return token[1:-1]
    return str(json.loads(token, strict=False))


def _build(opener: str, items: list[Any]) -> Any:
    if opener in ("[", "("):
        return tuple(items)
    if opener == "#{":
        return frozenset(items)
    if len(items) % 2:
        raise ValueError("a map needs an even number of forms")
    return dict(zip(items[::2], items[1::2], strict=True))


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def read_top_level(text: str, source: str = "edn", *, unwrap: bool = True) -> Iterator[Any]:
    """The top-level values of `text`, or, with `unwrap`, the values inside
    it when the text is one vector or list of maps (see the module doc)."""
    # Frames: [opener, items, start]; items is None for the unwrapped outer
    # vector and for the markers of a pending #_ or tag.
    stack: list[list[Any]] = []
    done = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "skip":
            continue
        tok, pos = m.group(), m.start()
        try:
            if kind == "open":
                outer = unwrap and not stack and done == 0 and tok in ("[", "(")
                skipped = _SKIP.match(text, m.end())
                after = skipped.end() if skipped else m.end()
                if outer and text[after : after + 1] in _MAP_STARTS:
                    stack.append([tok, None, pos])
                else:
                    stack.append([tok, [], pos])
                continue
            if kind in ("discard", "tag"):
                stack.append([_DISCARD if kind == "discard" else _TAG, None, pos])
                continue
            if kind == "close":
                if not stack or stack[-1][0] not in _CLOSERS:
                    raise ValueError(f"unmatched {tok!r}")
                opener, items, _ = stack.pop()
                if _CLOSERS[opener] != tok:
                    raise ValueError(f"{tok!r} closes {opener!r}")
                if items is None:  # the end of the unwrapped outer vector
                    continue
                value: Any = _build(opener, items)
            elif kind == "str":
                value = _string(tok)
            elif kind == "atom":
                value = _atom(tok)
            elif kind == "char":
                name = tok[1:]
                value = _CHARS.get(name) or (chr(int(name[1:], 16)) if len(name) == 5 else name)
            elif tok == '"':  # a string with no closing quote: it runs to the end
                raise _torn(text, source, pos, done)
            else:
                raise ValueError(f"unexpected character {tok!r}")
        except (ValueError, TypeError) as exc:
            if isinstance(exc, EdnError):
                raise
            raise EdnError(f"{source}: line {_line_of(text, pos)}: {exc}") from None
        # A finished value: consumed by pending tags and #_, else placed.
        while stack and stack[-1][0] is _TAG:
            stack.pop()
        if stack and stack[-1][0] is _DISCARD:
            stack.pop()
            continue
        if stack and stack[-1][1] is not None:
            stack[-1][1].append(value)
            continue
        done += 1
        yield value
    if stack:
        inner = [f for f in stack if f[1] is not None or f[0] in (_TAG, _DISCARD)]
        raise _torn(text, source, inner[0][2] if inner else len(text), done)


def _torn(text: str, source: str, pos: int, done: int) -> TornEdnError:
    line = _line_of(text, pos)
    return TornEdnError(
        f"{source}: line {line}: the text ends inside an unfinished value", line, done
    )


def loads(text: str, source: str = "edn") -> Any:
    """The single value in `text` (for tests and small inputs)."""
    values = list(read_top_level(text, source, unwrap=False))
    if len(values) != 1:
        raise EdnError(f"{source}: expected one value, found {len(values)}")
    return values[0]
