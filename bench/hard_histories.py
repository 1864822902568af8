"""Hard single-register histories for the checker benchmark.

What makes a register history hard for a Wing-Gong search: one key (no
P-compositionality to split it), many clients with long overlapping
operations, a small value domain (many equal writes, so a read fits many
places), and many `info` writes that crashed: each may take effect at any
point after its call, or never. These are built by
checkers/linearizability/synth.py, linearizable by construction (the
`-ok` files).

The `-bad` files take an `-ok` history and plant a stale read whose
violation is certain: a known write `w` gets a value `u` no other op ever
writes; a known read `r`, called after some other known write `w2` that
was itself called after `w` returned, now returns `u`. Any linearization
orders w < w2 < r, and after w2 only other writes could have set the
register, none of them to `u`: so no linearization exists. The read is
picked late in the history, so a checker must rule out every way to
linearize what came before it.

Usage: .venv/bin/python bench/hard_histories.py OUT_DIR [--sizes 300,600,1000,1500]
writes OUT_DIR/<name>.jsonl (faultline histories) and OUT_DIR/manifest.tsv
(file, model, expected verdict).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.importers.formats import events_of
from checkers.linearizability import MODELS, LinOp
from checkers.linearizability.synth import SynthSpec, synthesize

UNIQUE = 1_000_000  # a value the generator never writes
# Histories on which the search in rank order stalled past 60 s before it
# restarted in random orders (checkers/linearizability/check.py, _rounds).
STALLS = {
    "reg-1500ops-40c-stall": SynthSpec(model="cas-register", ops=1500, keys=1, clients=40,
                                       info_rate=0.1, values=5, seed=4),
}  # fmt: skip


def plant_stale_read(ops: list[LinOp], at: float = 0.8) -> list[LinOp] | None:
    """`ops` with a certain stale read planted after `at` of the way in (see
    the module docstring), or None if no read fits."""
    known = sorted((op for op in ops if op.known and op.ret is not None), key=lambda o: o.call)
    writes = [op for op in known if op.f == "write"]
    reads = [op for op in known if op.f == "read" and op.call >= at * known[-1].call]
    for r in reads:
        for w2 in reversed(writes):
            if w2.ret is None or w2.ret >= r.call:
                continue
            w = next((x for x in reversed(writes) if x.ret is not None and x.ret < w2.call), None)
            if w is None:
                continue
            out = []
            for op in ops:
                if op.id == w.id:
                    op = msgspec.structs.replace(op, input=UNIQUE)
                elif op.id == r.id:
                    op = msgspec.structs.replace(op, output=UNIQUE)
                out.append(op)
            return out
    return None


def write_history(ops: list[LinOp], path: Path) -> None:
    """`ops` as a faultline history.jsonl."""
    with open(path, "wb") as out:
        for event in events_of(ops):
            out.write(msgspec.json.encode(event) + b"\n")


def main() -> int:
    """Generate the histories and their manifest."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", default="300,600,1000,1500")
    parser.add_argument("--seeds", type=int, default=2)
    opts = parser.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = []
    model = MODELS["cas-register"]
    specs = dict(STALLS)
    for n in (int(x) for x in opts.sizes.split(",")):
        for seed in range(opts.seeds):
            clients = 20 + 10 * seed
            specs[f"reg-{n}ops-{clients}c-s{seed}"] = SynthSpec(
                model="cas-register", ops=n, keys=1, clients=clients, info_rate=0.2, values=5,
                seed=1000 * n + seed,
            )  # fmt: skip
    for name, spec in specs.items():
        ops = synthesize(spec, model)
        write_history(ops, opts.out / f"{name}-ok.jsonl")
        rows.append(f"{name}-ok.jsonl\tcas-register\tlinearizable")
        bad = plant_stale_read(ops)
        if bad is not None:
            write_history(bad, opts.out / f"{name}-bad.jsonl")
            rows.append(f"{name}-bad.jsonl\tcas-register\tnot-linearizable")
    (opts.out / "manifest.tsv").write_text("\n".join(rows) + "\n")
    print(f"wrote {len(rows)} histories to {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
