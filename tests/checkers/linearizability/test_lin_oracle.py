"""The search agrees with a brute-force enumeration on small random histories.

The oracle tries every order of the operations that respects real time,
with each unknown (info) operation either placed or left out; it shares
nothing with the search but the models' `step`.
"""

from __future__ import annotations

import random

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from checkers.linearizability import MODELS, LinOp, check
from checkers.linearizability.models import ILLEGAL, Model
from checkers.linearizability.synth import SynthSpec, synthesize


def _oracle(model: Model, ops: list[LinOp]) -> bool:
    """Whether some real-time-respecting order explains every known op."""
    inf = float("inf")

    def ret(op: LinOp) -> float:
        return inf if op.ret is None else op.ret

    def search(state: object, left: frozenset[int]) -> bool:
        if all(not ops[k].known for k in left):
            return True
        for k in left:
            op = ops[k]
            # op may go next only if no op left returned before it was called.
            if any(ret(ops[m]) < op.call for m in left if m != k):
                continue
            after = model.step(state, op)
            if after is not ILLEGAL and search(after, left - {k}):
                return True
        return False

    return search(model.init(), frozenset(range(len(ops))))


def _scramble(ops: list[LinOp], rng: random.Random, model: str) -> list[LinOp]:
    """Change some read results so that some histories become illegal."""
    out = list(ops)
    for i, op in enumerate(out):
        if op.known and op.f in ("read", "get") and rng.random() < 0.3:
            if model == "metastore":
                bogus: object = {**op.output, "value": rng.choice([0, 1, None])}
            elif model.startswith("kv"):
                bogus = rng.choice(["<0>", "<1>", "<0><1>", None])
            else:
                bogus = rng.choice([0, 1, 2, None])
            out[i] = msgspec.structs.replace(op, output=bogus)
    return out


@given(
    st.sampled_from(["register", "cas-register", "kv", "kv-nopart", "metastore"]),
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(0, 2**32),
)
def test_search_agrees_with_brute_force(model: str, n_ops: int, clients: int, seed: int) -> None:
    """Same verdict as trying every order, on legal and scrambled histories."""
    base = "kv" if model == "kv-nopart" else model
    spec = SynthSpec(
        model=base, ops=n_ops, keys=2, clients=clients, values=3, info_rate=0.3, seed=seed,
        append_rate=0.3,
    )  # fmt: skip
    ops = _scramble(synthesize(spec, MODELS[base]), random.Random(seed), model)
    result = check(ops, model, workers=1)
    if MODELS[model].partitioned:
        by_key: dict[object, list[LinOp]] = {}
        for op in ops:
            by_key.setdefault(op.key, []).append(op)
        expected = all(_oracle(MODELS[model], part) for part in by_key.values())
    else:
        expected = _oracle(MODELS[model], ops)
    assert result.valid is expected, result.failure
