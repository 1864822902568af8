"""Property tests: generated linearizable histories pass; impossible reads fail."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from checkers.linearizability import MODELS, LinOp, check
from checkers.linearizability.synth import SynthSpec, synthesize

READS = {"get", "read"}

specs = st.builds(
    SynthSpec,
    model=st.sampled_from(["register", "cas-register", "kv", "metastore"]),
    ops=st.integers(1, 60),
    keys=st.integers(1, 4),
    clients=st.integers(1, 6),
    info_rate=st.sampled_from([0.0, 0.05, 0.2]),
    values=st.sampled_from([3, 5, 1_000_000]),
    seed=st.integers(0, 2**32),
)


def _read_value(op: LinOp, bogus: object) -> object:
    if isinstance(op.output, dict):  # metastore get
        return {**op.output, "value": bogus}
    return bogus


@given(specs)
def test_any_interleaving_of_a_sequential_execution_is_linearizable(spec: SynthSpec) -> None:
    """A history whose ops took effect in some order inside their windows passes."""
    ops = synthesize(spec, MODELS[spec.model])
    result = check(ops, spec.model, time_limit_s=30, workers=1)
    assert result.valid is True, result.failure


@given(specs, st.data())
def test_a_read_no_interleaving_can_explain_is_a_violation(
    spec: SynthSpec, data: st.DataObject
) -> None:
    """Changing one read to a never-written value makes the history fail."""
    ops = synthesize(spec, MODELS[spec.model])
    reads = [i for i, op in enumerate(ops) if op.known and op.f in READS]
    if not reads:
        return
    i = data.draw(st.sampled_from(reads))
    bogus = "never written" if spec.model == "kv" else -1
    ops[i] = msgspec.structs.replace(ops[i], output=_read_value(ops[i], bogus))
    result = check(ops, spec.model, time_limit_s=30, workers=1)
    assert result.valid is False
    assert result.failure is not None
    assert result.failure.unplaceable


@given(specs, st.booleans())
def test_an_unknown_op_may_take_effect_or_not(spec: SynthSpec, took_effect: bool) -> None:
    """Histories where every crashed op had its effect removed (or kept) pass."""
    spec = msgspec.structs.replace(spec, info_rate=0.3, info_effect=float(took_effect))
    ops = synthesize(spec, MODELS[spec.model])
    assert check(ops, spec.model, time_limit_s=30, workers=1).valid is True


@given(specs, st.data())
def test_forgetting_a_writes_outcome_keeps_the_history_linearizable(
    spec: SynthSpec, data: st.DataObject
) -> None:
    """Turning a completed write into info (outcome unknown, open to the end) passes."""
    ops = synthesize(spec, MODELS[spec.model])
    writes = [i for i, op in enumerate(ops) if op.known and op.f not in READS]
    if not writes:
        return
    for i in data.draw(st.lists(st.sampled_from(writes), max_size=3)):
        ops[i] = msgspec.structs.replace(ops[i], ret=None, output=None, known=False)
    assert check(ops, spec.model, time_limit_s=30, workers=1).valid is True


def test_an_info_write_nobody_read_can_be_dropped_but_not_one_that_was_read() -> None:
    """An info write explains a later read only if it is allowed to take effect."""
    info = LinOp(id=0, process=0, call=0, ret=None, f="write", input=7, known=False)
    read7 = LinOp(id=1, process=1, call=5, ret=6, f="read", output=7)
    read_none = LinOp(id=2, process=2, call=7, ret=8, f="read", output=None)
    assert check([info, read7], "register").valid is True
    assert check([info, read_none], "register").valid is True
    assert check([read7], "register").valid is False
    assert check([info, read7, read_none], "register").valid is False
