"""The metastore check of mixed runs, on revisions ranked by the watch record
and on values alone, side by side (checkers/meta_ranks.py).

    python bench/metastore_ranks.py RUN_DIR... [--time-limit 60]

For each run (one with register and metastore traffic: ember's), it prints
how many metastore ops lost their answer, then each way's verdict and
search time, and at the end how often each way decided and whether they
ever disagreed (a valid verdict on ranks implies one on values; the other
way round is what ranks add). Runs to try it on: tests/sim/test_meta_resend.py's
plan with `--nemesis drop-replies`, whose writes lose many answers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checkers.api import CheckContext  # noqa: E402
from checkers.compose import is_meta, load_run, metastore_basis, watch_record  # noqa: E402
from checkers.history import pair  # noqa: E402
from checkers.linear import LinearizabilityChecker  # noqa: E402

VALUES_ONLY = "forced by the bench"  # a record that is no record: values alone


def one(run: Path, limit_s: float) -> dict[str, Any]:
    """The run's metastore part checked both ways."""
    plan, history, _, _ = load_run(run)
    operations = pair(history)
    meta = [op for op in operations if is_meta(op)]
    out: dict[str, Any] = {"run": run.name, "lost": sum(op.type == "info" for op in meta)}
    for way, record in (("ranks", watch_record(operations)), ("values", VALUES_ONLY)):
        ops, model, basis = metastore_basis(meta, record)
        ctx = CheckContext(plan=plan, events=history, operations=ops,
                           options={"model": "metastore", "lin_time_limit_s": limit_s})  # fmt: skip
        started = time.perf_counter()
        result = LinearizabilityChecker(model).check(ctx)
        out[way] = (result.valid, time.perf_counter() - started, basis.text)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--time-limit", type=float, default=60.0, help="per check, seconds")
    args = parser.parse_args()
    decided: Counter[str] = Counter()
    disagree = []
    print(f"{'run':<24} {'lost':>5}  {'ranks':<18} {'values alone':<18} ranked by")
    for run in args.runs:
        row = one(run, args.time_limit)
        (rv, rt, basis), (vv, vt, _) = row["ranks"], row["values"]
        print(f"{row['run']:<24} {row['lost']:>5}  {f'{rv} {rt:.2f}s':<18} "
              f"{f'{vv} {vt:.2f}s':<18} {basis}", flush=True)  # fmt: skip
        decided.update(way for way, v in (("ranks", rv), ("values", vv)) if v != "unknown")
        if "unknown" not in (rv, vv) and rv != vv:
            disagree.append(row["run"])
    n = len(args.runs)
    print(
        f"\ndecided: ranks {decided['ranks']}/{n}, values alone {decided['values']}/{n}; "
        f"disagreed where both decided: {disagree or 'never'}"
    )
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
