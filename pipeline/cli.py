"""`faultline pipeline ingest|analyze|all|precheck`: the PySpark jobs.

Bad input (no store, no Java, no pyspark, an unreadable history) is one line
naming the problem and exit code 2; the jobs' progress shows on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.session import DEFAULT_MASTER


def add_parser(subparsers: Any) -> None:
    """Registers `faultline pipeline`."""
    p = subparsers.add_parser(
        "pipeline", help="aggregate many runs with PySpark (ingest, analyze, precheck)",
        description="PySpark jobs over the run store: ingest runs into a Parquet lake, "
        "analyze the lake into tables and nightly.html, pre-check a huge history.",
    )  # fmt: skip
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True)
    for name, text in (("ingest", "store runs -> the Parquet lake (idempotent)"),
                       ("analyze", "the lake -> analysis tables and nightly.html"),
                       ("all", "ingest, then analyze")):  # fmt: skip
        job = jobs.add_parser(name, help=text, description=text)
        _common(job)
        job.add_argument("--store", type=Path, default=Path("store"), help="run store")
        job.add_argument("--lake", type=Path, default=Path("lake"), help="Parquet lake")
        job.add_argument(
            "--engine",
            choices=("columns", "spark", "rows"),  # pipeline.ingest.ENGINES, not imported here
            default="columns",
            help="ingest engine: whole histories decoded into columns (default), per-run "
            "rows, or Spark's JSON reader (pipeline/README.md, 'Three ingest engines')",
        )
        job.set_defaults(func=_run_jobs)
    pre = jobs.add_parser(
        "precheck", help="distributed per-key linearizability and revision-order pre-check",
        description="Check one history too large for a machine: partition by key across "
        "executors and run the checkers' own code on each key.",
    )  # fmt: skip
    _common(pre)
    pre.add_argument("history", type=Path, help="a history.jsonl (or a run dir)")
    pre.add_argument("--model", default="kv", help="linearizability model (partitioned by key)")
    pre.add_argument("--key-time-limit", type=float, default=60.0, metavar="SECONDS",
                     help="search budget per key")  # fmt: skip
    pre.add_argument("--out", type=Path, help="write the per-key verdicts here as Parquet")
    pre.set_defaults(func=_run_precheck)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master", default=DEFAULT_MASTER,
        help="Spark master: local[*] (default), local[N] or spark://host:7077",
    )  # fmt: skip


def _session(master: str) -> Any:
    from harness.cli import CliError
    from pipeline.session import SparkStartError, start_session

    try:
        return start_session(master)
    except ImportError as exc:
        raise CliError(
            f"pyspark is not installed ({exc}); pip install 'faultline[pipeline]'"
        ) from None
    except SparkStartError as exc:
        raise CliError(str(exc)) from None


def _run_jobs(args: argparse.Namespace) -> int:
    from rich.console import Console

    from harness.cli import CliError

    if args.job in ("ingest", "all") and not args.store.is_dir():
        raise CliError(f"no run store at {args.store}")
    if args.job == "analyze" and not (args.lake / "runs").is_dir():
        raise CliError(f"no lake at {args.lake} (run `faultline pipeline ingest` first)")
    console = Console(stderr=True)
    with console.status("starting Spark") as status:
        spark = _session(args.master)
        if args.job in ("ingest", "all"):
            from pipeline.ingest import ingest

            status.update("ingesting")
            report = ingest(spark, args.store, args.lake, progress=status.update,
                            engine=args.engine)  # fmt: skip
            console.print(
                f"ingest: {report.found} runs found, {report.already} already in the lake, "
                f"{report.ingested} ingested, {len(report.skipped)} skipped "
                f"({report.elapsed_s:.1f} s)"
            )
            for rid, reason in report.skipped:
                console.print(f"  skipped {rid}: {reason}", markup=False)
        if args.job in ("analyze", "all"):
            from pipeline.analyze import analyze

            tables = analyze(spark, args.lake, progress=status.update)
            rates = tables["failure_rates"]
            console.print(
                f"analyze: {int(rates['runs'].sum()) if len(rates) else 0} runs, "
                f"{len(tables['flaky_seeds'])} flaky seeds, "
                f"{len(tables['verdict_flips'])} verdict flips; {args.lake / 'nightly.html'}"
            )
    return 0


def _declared(history: Path) -> Any:
    """The revision declaration of the run a history sits in (its test.json's
    `revisions`), or None: a bare history gets no revision rules."""
    import json

    from harness.cli import CliError

    plan = history.parent / "test.json"
    if not plan.is_file():
        return None
    try:
        return json.loads(plan.read_text()).get("revisions")
    except (OSError, ValueError, AttributeError) as exc:
        raise CliError(f"cannot read {plan}: {exc}") from None


def _run_precheck(args: argparse.Namespace) -> int:
    from rich.console import Console

    from harness.cli import CliError
    from pipeline.precheck import precheck

    path = args.history / "history.jsonl" if args.history.is_dir() else args.history
    if not path.is_file():
        raise CliError(f"no history at {path}")
    console = Console(stderr=True)
    with console.status("starting Spark") as status:
        spark = _session(args.master)
        status.update(f"pre-checking {path}")
        result = precheck(spark, path, model=args.model, key_time_limit_s=args.key_time_limit,
                          out=args.out, revisions=_declared(path))  # fmt: skip
    console.print(result.summary(), markup=False)
    return 0 if result.valid is True else 1 if result.valid is False else 2
