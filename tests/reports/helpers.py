"""Run dirs for the report tests built from porcupine's fixture histories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from checkers import compose
from checkers.importers import porcupine
from checkers.linearizability.types import LinOp
from tests.paths import PORCUPINE_FIXTURES

FIXTURES = PORCUPINE_FIXTURES
# The etcd fixtures are registers; faultline's kv model names the same ops get/put.
_ETCD_FS = {"read": "get", "write": "put", "cas": "cas"}


def _value(op: LinOp, completion: bool) -> Any:
    value = op.output if completion else op.input
    if op.f == "cas":
        return (op.output is not False) if completion else list(op.input)
    if op.f == "write" and completion:
        return op.input
    return list(value) if isinstance(value, tuple) else value


def history_from_ops(ops: list[LinOp], model: str) -> list[dict[str, Any]]:
    """A faultline history (event dicts) with the ops' order of calls and returns.

    An op of unknown outcome gets an `info` just before its process's next
    invoke (Jepsen replaces such a process, the fixtures do not always), else
    stays open to the end: both leave it unknown to the checker.
    """
    rows: list[tuple[float, dict[str, Any]]] = []
    by_process: dict[Any, list[LinOp]] = {}
    for op in ops:
        by_process.setdefault(op.process, []).append(op)
    for proc_ops in by_process.values():
        proc_ops.sort(key=lambda o: o.call)
        for n, op in enumerate(proc_ops):
            f = _ETCD_FS[op.f] if model == "etcd" else op.f
            key = "x" if model == "etcd" else op.key
            base = {"process": int(op.process), "f": f, "key": key}
            rows.append((op.call, {**base, "type": "invoke", "value": _value(op, False)}))
            if op.ret is not None:
                rows.append((op.ret, {**base, "type": "ok", "value": _value(op, True)}))
            elif n + 1 < len(proc_ops):
                rows.append((proc_ops[n + 1].call - 0.5, {**base, "type": "info"}))
    rows.sort(key=lambda r: r[0])
    return [
        {"index": i, "time": int(pos * 2 + 2) * 1_000_000, **{k: v for k, v in ev.items()
                                                              if v is not None}}
        for i, (pos, ev) in enumerate(rows)
    ]  # fmt: skip


def fixture_run(root: Path, name: str) -> Path:
    """A run dir (history, test.json, results.json) for one fixture file."""
    model, ops = porcupine.load(FIXTURES / name)
    run = root / name.replace("/", "-").rsplit(".", 1)[0] / "20260101T000000-0"
    run.mkdir(parents=True)
    events = history_from_ops(ops, model)
    with (run / "history.jsonl").open("wb") as fh:
        for ev in events:
            fh.write(msgspec.json.encode(ev) + b"\n")
    plan = {"name": f"porcupine {name}", "seed": 0, "backend": "sim", "workload": ["register"],
            "nemesis": [], "checkers": ["linearizable", "stats"]}  # fmt: skip
    (run / "test.json").write_bytes(msgspec.json.encode(plan))
    loaded_plan, history, audit, _ = compose.load_run(run)
    compose.write_results(compose.check(loaded_plan, history, audit=audit), run)
    return run
