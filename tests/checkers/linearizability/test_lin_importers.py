"""The porcupine fixture importers: semantics and clear errors."""

from __future__ import annotations

import pytest

from checkers.importers.porcupine import FixtureFormatError, load, parse_etcd_log, parse_kv_edn

P = "INFO  jepsen.util - "


def test_etcd_log_meanings() -> None:
    """fail cas ran and compared unequal; info stays open; fail read is dropped."""
    text = "\n".join(
        [
            f"{P}0\t:invoke\t:cas\t[1 2]",
            f"{P}1\t:invoke\t:write\t3",
            f"{P}2\t:invoke\t:read\tnil",
            f"{P}0\t:fail\t:cas\t[1 2]",
            f"{P}1\t:info\t:write\t:timed-out",
            f"{P}2   :fail   :read   :timed-out",
            f"{P}3\t:invoke\t:read\tnil",
            f"{P}3\t:ok\t:read\t3",
        ]
    )
    ops = {op.id: op for op in parse_etcd_log(text)}
    assert set(ops) == {0, 1, 6}
    assert (ops[0].f, ops[0].input, ops[0].output, ops[0].ret) == ("cas", (1, 2), False, 3)
    assert (ops[1].known, ops[1].ret) == (False, None)
    assert (ops[6].output, ops[6].call, ops[6].ret) == (3, 6, 7)


def test_kv_edn_maps_empty_get_to_absent() -> None:
    """An empty get result means the key is absent."""
    text = "\n".join(
        [
            '{:process 0, :type :invoke, :f :get, :key "1", :value nil}',
            '{:process 0, :type :ok, :f :get, :key "1", :value ""}',
            '{:process 1, :type :invoke, :f :append, :key "1", :value "x"}',
        ]
    )
    get, append = parse_kv_edn(text)
    assert (get.f, get.key, get.output, get.ret) == ("get", "1", None, 1)
    assert (append.known, append.input) == (False, "x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("garbage", "line 1: missing prefix"),
        (f"{P}0\t:ok\t:read\t3", "line 1: ok read without a matching invoke"),
        (f"{P}0\t:invoke\t:cas\t[1]", "line 1: cas value '\\[1\\]' is not \\[A B\\]"),
        (f"{P}0\t:invoke\t:frob\t1", "unknown f 'frob'"),
    ],
)
def test_bad_etcd_lines_name_the_line(text: str, message: str) -> None:
    """A malformed etcd log line gives one error naming the line."""
    with pytest.raises(FixtureFormatError, match=message):
        parse_etcd_log(text)


def test_bad_kv_line_names_the_line() -> None:
    """A malformed kv line gives one error naming the line."""
    with pytest.raises(FixtureFormatError, match="line 2: not a kv EDN event"):
        parse_kv_edn('{:process 0, :type :invoke, :f :get, :key "1", :value nil}\n{oops}')


def test_load_reports_unreadable_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A missing file is a FixtureFormatError, not a traceback."""
    with pytest.raises(FixtureFormatError, match="cannot read"):
        load(tmp_path / "missing.log")
