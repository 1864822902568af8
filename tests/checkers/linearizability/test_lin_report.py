"""What a violation reports, and that a result serializes for results.json."""

from __future__ import annotations

import msgspec

from checkers.linearizability import MODELS, LinOp, LinResult, check


def _op(id: int, call: int, ret: int | None, f: str, **kw: object) -> LinOp:
    return LinOp(id=id, process=id, call=call, ret=ret, f=f, **kw)  # type: ignore[arg-type]


def test_violation_names_partition_prefix_op_and_states() -> None:
    """The report gives the failing key, a linearizable prefix and the states
    the unplaceable read could have seen."""
    ops = [
        _op(1, 0, 1, "put", key="a", input="x"),
        _op(2, 2, 3, "get", key="a", output="x"),
        _op(3, 4, 5, "put", key="a", input="y"),
        _op(4, 6, 7, "get", key="a", output="x"),
        _op(5, 0, 9, "get", key="b", output=None),
    ]
    result = check(ops, "kv")
    assert result.valid is False
    failure = result.failure
    assert failure is not None
    assert failure.key == "a"
    assert failure.linearized_prefix == [1, 2, 3]
    assert [u.op.id for u in failure.unplaceable] == [4]
    assert failure.unplaceable[0].states_before == ["y"]


def test_result_round_trips_through_json() -> None:
    """LinResult encodes to JSON and decodes to an equal value."""
    ops = [_op(1, 0, 1, "write", input=1), _op(2, 2, 3, "read", output=2)]
    result = check(ops, "register")
    data = msgspec.json.encode(result)
    back = msgspec.json.decode(data, type=LinResult)
    assert back.valid is False
    assert back.failure is not None
    assert back.failure.unplaceable[0].op.id == 2


def test_valid_history_reports_figures() -> None:
    """A passing check reports op, partition and search figures."""
    ops = [_op(1, 0, 2, "write", key="k", input=1), _op(2, 1, 3, "read", key="k", output=1)]
    result = check(ops, "register")
    assert result.valid is True
    assert (result.ops, result.partitions) == (2, 1)
    assert result.failure is None
    assert result.elapsed_s >= 0


class _BrokenModel:
    """A register whose writes crash the model, to test error containment."""

    name = "broken"
    partitioned = True

    def __getattr__(self, name: str) -> object:
        return getattr(MODELS["register"], name)

    def step(self, state: object, op: LinOp) -> object:
        if op.f == "write":
            raise RuntimeError("model bug")
        return MODELS["register"].step(state, op)


def test_a_model_error_is_unknown_not_a_verdict() -> None:
    """An exception inside the search yields "unknown" naming the error."""
    ops = [_op(1, 0, 1, "write", input=1), _op(2, 2, 3, "read", output=1)]
    result = check(ops, _BrokenModel())  # type: ignore[arg-type]
    assert result.valid == "unknown"
    assert "model bug" in (result.partition_results[0].reason or "")
