"""Benchmark: ember image build (cold, warm, after a source change) and
5-node Docker cluster up/down times.

    python bench/cluster_lifecycle.py [--cold] [--rounds N] [--nodes N]

`--cold` builds a separate, salted image chain from nothing (debootstrap,
wheel downloads, every layer) beside the cached one and removes it after;
it takes minutes and needs the Debian mirror and PyPI. Without it, the
warm build and the top-layer rebuild are timed on the real image.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run from a checkout without installing: the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker

from harness.backends.docker import ClusterError, DockerBackend
from harness.backends.engine import DockerUnavailableError
from harness.images import (
    CACHE_DIR,
    BuildReport,
    ImageBuildError,
    build_image,
    snapshot_source,
)


def _timed_build(label: str, **kwargs: object) -> BuildReport:
    started = time.monotonic()
    report = build_image(**kwargs)  # type: ignore[arg-type]
    total = time.monotonic() - started
    steps = ", ".join(f"{s} {a.split()[0]} {t:.1f}s" for s, a, t in report.steps)
    print(f"image build {label:22} {total:7.2f}s  ({steps})")
    return report


def _cold_build() -> None:
    report = BuildReport()
    try:
        report = _timed_build("cold (salted chain)", salt=f"bench-{time.time_ns()}", log=print)
    finally:
        # Remove the salted chain, newest first, and its wheelhouse.
        client = docker.from_env()
        for step, action, _seconds in reversed(report.steps):
            tag = action.split()[1]
            client.images.remove(tag)
            if step == "deps":
                shutil.rmtree(CACHE_DIR / f"wheelhouse-{tag.split(':')[1]}", ignore_errors=True)


def _source_change_build(snapshot: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = snapshot_source(Path(tmp) / "src", snapshot)
        with (source / "ember" / "__init__.py").open("a") as f:
            f.write(f"\n# bench {time.time_ns()}\n")
        tag = _timed_build("after a source change", source_root=source, tag_latest=False).tag
        docker.from_env().images.remove(tag)


def _cluster_rounds(rounds: int, nodes: int, image: str) -> None:
    ups: list[float] = []
    downs: list[float] = []
    for i in range(rounds):
        backend = DockerBackend(f"bench-{i}", size=nodes, image=image)
        started = time.monotonic()
        try:
            backend.up()
            ups.append(time.monotonic() - started)
        finally:
            started = time.monotonic()
            backend.down()
            downs.append(time.monotonic() - started)
        print(f"{nodes}-node cluster round {i + 1}: up {ups[-1]:.2f}s, down {downs[-1]:.2f}s")
    print(
        f"{nodes}-node cluster: up median {statistics.median(ups):.2f}s,"
        f" down median {statistics.median(downs):.2f}s over {rounds} rounds"
    )


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="also time a build from nothing")
    parser.add_argument("--rounds", type=int, default=3, help="cluster up/down rounds")
    parser.add_argument("--nodes", type=int, default=5, help="nodes per cluster")
    args = parser.parse_args()
    try:
        if args.cold:
            _cold_build()
        # A snapshot, so edits to the work tree during the run do not turn
        # the warm build into a cold one.
        with tempfile.TemporaryDirectory() as tmp:
            snapshot = snapshot_source(Path(tmp) / "src")
            tag = _timed_build("first (may build)", source_root=snapshot).tag
            _timed_build("warm", source_root=snapshot)
            _source_change_build(snapshot)
        _cluster_rounds(args.rounds, args.nodes, tag)
    except (ImageBuildError, DockerUnavailableError, ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
