"""Random concurrent histories that are linearizable by construction.

Clients invoke operations on a sequential model; each pending operation
takes effect at one random instant between its call and its return (its
linearization point), where its output is computed; so the history is
linearizable with that order as witness. Some operations crash instead
(`info`): they take effect or not, at random, and their process is replaced
by a fresh one, as in faultline histories. Keys are drawn from a Zipf-like
distribution so a few are hot. Used by the property tests and the
benchmark; deterministic for a seed.
"""

from __future__ import annotations

import bisect
import itertools
import random
from typing import Any

import msgspec

from checkers.linearizability.models import ILLEGAL, Model
from checkers.linearizability.types import LinOp


class SynthSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to generate. `model` is "kv" (get/put/append/cas), "register",
    "cas-register" or "metastore"; `values` bounds written values (small
    means many equal writes, which makes the search harder)."""

    model: str = "kv"
    ops: int = 100
    keys: int = 1
    clients: int = 5
    info_rate: float = 0.02
    # Chance that a crashed (info) op took effect before the crash.
    info_effect: float = 0.5
    values: int = 1_000_000
    skew: float = 1.1
    # kv only: share of appends (the rest: 45% gets, then cas and puts).
    append_rate: float = 0.15
    seed: int = 0


def _key_sampler(spec: SynthSpec, rng: random.Random) -> list[float]:
    weights = [1.0 / (k + 1) ** spec.skew for k in range(spec.keys)]
    return list(itertools.accumulate(weights))


def _draw_op(spec: SynthSpec, rng: random.Random, key: str, serial: int) -> tuple[str, Any]:
    """(f, input) for the model; write values are mostly fresh."""
    value: Any = rng.randrange(spec.values) if spec.values < 1_000_000 else serial
    roll = rng.random()
    if spec.model == "metastore":
        if roll < 0.4:
            return "get", None
        if roll < 0.7:
            return "put", value
        if roll < 0.8:
            return "delete", None
        cond = {"key": key, "target": "exists", "op": "eq", "value": False}
        return "invoke", {"if": [cond], "then": [{"op": "put", "key": key, "value": value}]}
    if spec.model == "kv":  # strings, so appends and puts mix
        value = f"<{value}>"
    read_f = "get" if spec.model == "kv" else "read"
    write_f = "put" if spec.model == "kv" else "write"
    if roll < 0.45:
        return read_f, None
    if spec.model == "kv" and roll < 0.45 + spec.append_rate:
        return "append", value
    if spec.model != "register" and roll < 0.75 + spec.append_rate / 2:
        expected: Any = rng.randrange(min(spec.values, 8))
        return "cas", (f"<{expected}>" if spec.model == "kv" else expected, value)
    return write_f, value


def _output(model: Model, op: LinOp, before: Any, after: Any) -> Any:
    """What the op returned, given the state it saw and left."""
    if model.name == "metastore":
        if op.f == "get":
            entry = dict(before[1]).get(op.key)
            value, mod = (None, 0) if entry is None else (entry[0], entry[2])
            return {"value": value, "mod_revision": mod, "revision": before[0]}
        if op.f == "invoke":
            return {"succeeded": after[0] != before[0], "revision": after[0]}
        return after[0]
    if op.f in ("get", "read"):
        return before
    if op.f == "cas":  # True: swapped; False: ran and compared unequal
        return before == op.input[0]
    return None


def synthesize(spec: SynthSpec, model: Model) -> list[LinOp]:
    """A linearizable history for `spec` (see the module docstring)."""
    rng = random.Random(spec.seed)
    cum = _key_sampler(spec, rng)
    states: dict[str | None, Any] = {}
    idle = list(range(spec.clients))
    next_proc = spec.clients
    # pending: id -> [process, call, f, key, input, applied, output]
    pending: dict[int, list[Any]] = {}
    ops: list[LinOp] = []
    now = 0
    issued = 0
    while issued < spec.ops or pending:
        now += 1
        if idle and issued < spec.ops and (not pending or rng.random() < 0.5):
            proc = idle.pop(rng.randrange(len(idle)))
            key = str(bisect.bisect_left(cum, rng.random() * cum[-1]))
            f, arg = _draw_op(spec, rng, key, issued)
            if spec.model in ("register", "cas-register"):
                key = "r"
            pending[now] = [proc, now, f, key, arg, False, None]
            issued += 1
            continue
        op_id = rng.choice(list(pending))
        p = pending[op_id]
        probe = LinOp(id=op_id, process=p[0], call=p[1], ret=None, f=p[2], key=p[3],
                      input=p[4], known=False)  # fmt: skip
        skey = p[3] if model.partitioned else None
        if not p[5]:
            if rng.random() < spec.info_rate:  # crash before taking effect, or not
                if rng.random() < spec.info_effect:
                    states[skey] = model.step(states.get(skey, model.init()), probe)
                del pending[op_id]
                ops.append(probe)
                idle.append(next_proc)
                next_proc += 1
                continue
            before = states.get(skey, model.init())
            after = model.step(before, probe)
            assert after is not ILLEGAL
            states[skey] = after
            p[5], p[6] = True, _output(model, probe, before, after)
            continue
        del pending[op_id]
        ops.append(
            LinOp(id=op_id, process=p[0], call=p[1], ret=now, f=p[2], key=p[3], input=p[4],
                  output=p[6])
        )  # fmt: skip
        idle.append(p[0])
    return ops
