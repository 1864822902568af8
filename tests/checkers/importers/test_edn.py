"""Our EDN reader against edn_format, PyPI's maintained EDN library, as an
oracle (ours exists for speed: importers/edn.py says why)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import edn_format
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkers.importers.edn import EdnError, Keyword, Symbol, TornEdnError, loads, read_top_level

_NAMES = st.from_regex(r"[a-z][a-z0-9\-]{0,6}(/[a-z][a-z0-9]{0,4})?", fullmatch=True)
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(
    ["\n", "\t", '"', "\\"]), max_size=12)  # fmt: skip
_SEP = st.sampled_from([" ", ", ", "\n ", " ; a comment\n", ","])


def _str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace(
        "\t", "\\t") + '"'  # fmt: skip


scalars = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    _TEXT.map(_str),
    _NAMES.map(lambda n: ":" + n),
    _NAMES.filter(lambda n: n not in ("nil", "true", "false")),
    st.sampled_from(["nil", "true", "false"]),
)


def _join(items: list[str], sep: str) -> str:
    return sep.join(items)


edn_text = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(lambda xs, s: "[" + _join(xs, s) + "]", st.lists(inner, max_size=4), _SEP),
        st.builds(lambda xs, s: "(" + _join(xs, s) + ")", st.lists(inner, max_size=4), _SEP),
        st.builds(
            lambda d, s: "{" + _join([f":{k} {v}" for k, v in d.items()], s) + "}",
            st.dictionaries(_NAMES, inner, max_size=4),
            _SEP,
        ),
        st.builds(
            lambda xs: "#{" + " ".join(str(x) for x in xs) + "}",
            st.sets(st.integers(-100, 100), max_size=4),
        ),
    ),
    max_leaves=12,
)


def _norm_theirs(v: Any) -> Any:
    if isinstance(v, edn_format.Keyword):
        return ("kw", v.name)
    if isinstance(v, edn_format.Symbol):
        return ("sym", v.name)
    if isinstance(v, Mapping):
        return ("map", sorted((repr(_norm_theirs(k)), _norm_theirs(x)) for k, x in v.items()))
    if isinstance(v, frozenset):
        return ("set", sorted(map(repr, v)))
    if isinstance(v, Sequence) and not isinstance(v, str):  # ImmutableList, tuple
        return [_norm_theirs(x) for x in v]
    return v


def _norm_ours(v: Any) -> Any:
    if isinstance(v, Keyword):
        return ("kw", str(v))
    if isinstance(v, Symbol):
        return ("sym", str(v))
    if isinstance(v, dict):
        return ("map", sorted((repr(_norm_ours(k)), _norm_ours(x)) for k, x in v.items()))
    if isinstance(v, frozenset):
        return ("set", sorted(map(repr, v)))
    if isinstance(v, tuple):
        return [_norm_ours(x) for x in v]
    return v


@given(edn_text)
def test_reads_what_edn_format_reads(text: str) -> None:
    """Every generated EDN text reads to the same value as edn_format's."""
    assert _norm_ours(loads(text)) == _norm_theirs(edn_format.loads(text))


def test_history_shapes() -> None:
    """Maps per line, or one vector of maps; tags and #_ are handled."""
    lines = '{:type :invoke, :f :read}\n{:type :ok, :f :read, :value #inst "2020-01-01"}\n'
    assert [m[Keyword("type")] for m in read_top_level(lines)] == ["invoke", "ok"]
    wrapped = "; a comment\n[" + lines + " #_ {:gone 1}]\n"
    assert len(list(read_top_level(wrapped))) == 2
    assert json.dumps(loads("#jepsen.history.Op{:index 0}")[Keyword("index")]) == "0"


@pytest.mark.parametrize(
    ("text", "line", "done"),
    [('{:a 1}\n{:b "x', 2, 1), ("[{:a 1}\n {:b 2}", 2, 2), ("{:a 1}\n{:b", 2, 1)],
)
def test_text_ending_mid_value_is_torn(text: str, line: int, done: int) -> None:
    """The tear is reported with its line and the values read before it."""
    with pytest.raises(TornEdnError) as err:
        list(read_top_level(text))
    assert (err.value.line, err.value.complete) == (line, done)


@pytest.mark.parametrize(("text", "message"), [("{:a 1}}", "line 1: unmatched"),
                                               ("{:a 1}\n[1 2)", "line 2: '\\)' closes"),
                                               ("{:a}", "even number")])  # fmt: skip
def test_malformed_text_names_its_line(text: str, message: str) -> None:
    """Unbalanced brackets and odd maps are errors naming the line."""
    with pytest.raises(EdnError, match=message):
        list(read_top_level(text))
