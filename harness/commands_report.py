"""`faultline report` and `faultline serve`: HTML reports of stored runs.

`report RUN_DIR...` (re)renders each run's self-contained report.html;
`--store STORE` also rewrites the store's index.html (alone, it rewrites
only the index). `serve` rewrites the index and serves the store on
127.0.0.1 until interrupted. Bad input (not a run dir, a malformed history)
is one line on stderr and exit 2, via harness.cli's boundary.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from harness.cli import CliError
from harness.store import DEFAULT_ROOT

console = Console(stderr=True, highlight=False)


def add_parser(subparsers: Any) -> None:
    """Registers the `report` and `serve` subcommands."""
    p = subparsers.add_parser(
        "report", help="render report.html for runs, and the store's index", description=__doc__
    )
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR")
    p.add_argument("--store", type=Path, help="also rewrite STORE/index.html")
    p.set_defaults(func=run_report)
    s = subparsers.add_parser(
        "serve", help="serve the store's reports on 127.0.0.1", description=__doc__
    )
    s.add_argument("--store", type=Path, default=DEFAULT_ROOT, help="the store (default: store)")
    s.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000; 0 = any free)")
    s.set_defaults(func=run_serve)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port {text!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


def run_report(args: argparse.Namespace) -> int:
    """Renders each run's report (progress on stderr), then the index if asked."""
    from reports.index import write_index
    from reports.render import write_report

    if not args.runs and args.store is None:
        raise CliError("name at least one RUN_DIR, or --store STORE to rewrite its index")
    for run in args.runs:  # fail on a bad path before any progress output
        if not (run / "history.jsonl").is_file():
            raise CliError(f"{run} is not a run directory (no history.jsonl)")
    with Progress(console=console, transient=True, disable=len(args.runs) < 2) as progress:
        task = progress.add_task("rendering reports", total=len(args.runs))
        for run in args.runs:
            out = write_report(run)  # a ReportError is a ValueError: one line at the boundary
            progress.advance(task)
            console.print(f"wrote {out}")
    if args.store is not None:
        if not args.store.is_dir():
            raise CliError(f"no store at {args.store}")
        console.print(f"wrote {write_index(args.store)}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serves the store until interrupted; returns 0."""
    from reports.index import write_index
    from reports.serve import make_server, url_of

    if not args.store.is_dir():
        raise CliError(f"no store at {args.store}")
    write_index(args.store)
    server = make_server(args.store, args.port)
    console.print(
        f"serving {args.store} at {url_of(server)}index.html (Ctrl-C stops)", soft_wrap=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
