"""Every endpoint answers malformed input with a 4xx JSON error and keeps serving."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.node.cluster import ProcCluster
from tests.node.conftest import FAST

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
NOT_OBJECT = JSON.filter(lambda v: not isinstance(v, dict))
JUNK = st.binary(min_size=1, max_size=64).filter(lambda b: not _parses_or_blank(b))


def _parses_or_blank(raw: bytes) -> bool:
    """Whether `raw` is JSON, or blank (which some routes read as {})."""
    try:
        json.loads(raw)
    except ValueError:
        return not raw.strip()
    return True


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    """One single-voter node, shared by the module's examples."""
    root: Path = tmp_path_factory.mktemp("api")
    cluster = ProcCluster(root, ["n1"], extra=[*FAST, "--partitions", "1"])
    try:
        cluster.start("n1")
        cluster.wait_leader("part-0")
        yield cluster
    finally:
        cluster.close()


def _send(cluster: ProcCluster, method: str, path: str, raw: bytes | None) -> tuple[int, Any]:
    req = urllib.request.Request(cluster.url("n1") + path, data=raw, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _assert_4xx(cluster: ProcCluster, method: str, path: str, raw: bytes | None) -> None:
    code, doc = _send(cluster, method, path, raw)
    assert 400 <= code < 500, (method, path, raw, code, doc)
    assert isinstance(doc, dict)
    assert doc["outcome"] == "fail"
    assert isinstance(doc["error"], str)


def _mutations(
    valid: dict[str, Any], bad_values: dict[str, Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies broken in one way: a required field dropped, a field of the
    wrong type or value, or an unknown field added."""
    drop = st.sampled_from(sorted(valid)).map(lambda k: {x: v for x, v in valid.items() if x != k})
    wrong = st.sampled_from(sorted(bad_values)).flatmap(
        lambda k: bad_values[k].map(lambda v: {**valid, k: v})
    )
    extra = st.text(min_size=1, max_size=6).filter(lambda k: k not in valid and k not in bad_values)
    added = st.tuples(extra, JSON).map(lambda kv: {**valid, kv[0]: kv[1]})
    return drop | wrong | added


BODY = st.one_of(JUNK, NOT_OBJECT.map(lambda v: json.dumps(v).encode()))
NON_INT = JSON.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))
NON_STR = JSON.filter(lambda v: not isinstance(v, str))
UNKNOWN_NODE = st.text(min_size=1, max_size=5).filter(lambda s: s != "n1")
CHANGE = _mutations(
    {"group": "part-0", "peers": ["n1"], "token": 1},
    {
        "group": NON_STR | st.text(max_size=5).filter(lambda s: s != "part-0"),
        "peers": st.lists(UNKNOWN_NODE, min_size=1, max_size=3)
        | NON_INT.filter(lambda v: not isinstance(v, list)),
        "token": NON_INT,
    },
)
TRANSFER = _mutations(
    {"group": "part-0", "to": "zz"},
    {"group": NON_STR, "to": NON_STR},
)


@given(BODY)
def test_kv_writes_reject_bodies_that_are_not_objects(node: ProcCluster, raw: bytes) -> None:
    """put and cas given junk or a non-object JSON body answer 400."""
    _assert_4xx(node, "PUT", "/kv/k", raw)
    _assert_4xx(node, "POST", "/kv/k/cas", raw)


@given(st.dictionaries(st.text(max_size=6).filter(lambda k: k != "value"), JSON, max_size=3))
def test_put_without_value_is_rejected(node: ProcCluster, body: dict[str, Any]) -> None:
    """A put body without `value` (or with unknown fields) answers 400."""
    _assert_4xx(node, "PUT", "/kv/k", json.dumps(body).encode())
    _assert_4xx(node, "POST", "/kv/k/cas", json.dumps(body).encode())


@given(st.text(min_size=1, max_size=8).filter(lambda s: not _is_float_in_range(s)))
def test_bad_timeout_is_rejected(node: ProcCluster, text: str) -> None:
    """A timeout_s that is not a number in range answers 400 on every KV route."""
    q = urllib.request.quote(text, safe="")
    _assert_4xx(node, "GET", f"/kv/k?timeout_s={q}", None)
    _assert_4xx(node, "DELETE", f"/kv/k?timeout_s={q}", None)


def _is_float_in_range(text: str) -> bool:
    try:
        return 0 < float(text) <= 120
    except ValueError:
        return False


@given(st.one_of(CHANGE.map(lambda b: json.dumps(b).encode()), BODY))
def test_change_peers_rejects_malformed_requests(node: ProcCluster, raw: bytes) -> None:
    """Both change-peers routes answer 4xx to a malformed request and change nothing."""
    _assert_4xx(node, "POST", "/admin/change-peers", raw)
    _assert_4xx(node, "POST", "/admin/change-peers/submit", raw)
    assert node.status("n1")["groups"]["part-0"]["token"] == 0


@given(st.one_of(TRANSFER.map(lambda b: json.dumps(b).encode()), BODY))
def test_transfer_leader_rejects_malformed_requests(node: ProcCluster, raw: bytes) -> None:
    """transfer-leader answers 4xx to a malformed request or a non-voter target."""
    _assert_4xx(node, "POST", "/admin/transfer-leader", raw)


@given(
    st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s),
    st.one_of(BODY, st.dictionaries(st.sampled_from(["delay_ms", "probability", "x"]), JSON)),
)
def test_failpoints_reject_unknown_names_and_bad_params(
    node: ProcCluster, name: str, params: bytes | dict[str, Any]
) -> None:
    """An unknown failpoint name, or parameters out of range, answer 400."""
    q = urllib.request.quote(name, safe="")
    if name not in ("crash",) and not name.startswith(("raft.", "snapshot.")):
        _assert_4xx(node, "POST", f"/admin/failpoints/{q}", b"{}")
        _assert_4xx(node, "DELETE", f"/admin/failpoints/{q}", None)
    raw = params if isinstance(params, bytes) else json.dumps(params).encode()
    if isinstance(params, dict) and _params_ok(params):
        # Valid by chance: it must be accepted, then switched off again.
        assert _send(node, "POST", "/admin/failpoints/raft.append.delay", raw)[0] == 200
        assert _send(node, "DELETE", "/admin/failpoints/raft.append.delay", None)[0] == 200
    else:
        _assert_4xx(node, "POST", "/admin/failpoints/raft.append.delay", raw)
    assert node.status("n1")["failpoints"] == []


def _params_ok(params: dict[str, Any]) -> bool:
    def num(v: Any, hi: float) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= hi

    return set(params) <= {"delay_ms", "probability"} and (
        num(params.get("delay_ms", 0), 600_000) and num(params.get("probability", 1), 1)
    )


@given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), st.text(max_size=12))
def test_unknown_routes_answer_json_404_or_405(node: ProcCluster, method: str, tail: str) -> None:
    """A path outside the API answers a 4xx JSON error."""
    q = urllib.request.quote(tail, safe="")
    _assert_4xx(node, method, f"/nope/{q}", None)
    _assert_4xx(node, "GET", f"/admin/changes/{q or 'x'}", None)


def test_node_keeps_serving_after_malformed_input(node: ProcCluster) -> None:
    """After a barrage of bad requests, the node still answers and writes."""
    for raw in (b"{", b"[]", b"\xff\xfe", b'{"value": 1, "x": 2}'):
        _assert_4xx(node, "PUT", "/kv/k", raw)
    assert _send(node, "PUT", "/kv/k", b'{"value": 7}')[0] == 200
    assert _send(node, "GET", "/kv/k", None) == (200, {"value": 7})
    assert node.health("n1")
