"""Helpers for the Docker tests that use containers as plain SSH hosts
(`--backend ssh`): starting them, and placing their events as hosts with
clocks of their own would be placed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from checkers.audit import load_audit, place_events
from harness.backends.base import NodeHandle
from harness.backends.docker import DockerBackend


@contextlib.contextmanager
def containers_as_ssh_hosts(name: str, size: int, hosts_file: Path) -> Iterator[list[NodeHandle]]:
    """`size` containers of the ember image, listed in `hosts_file` in --hosts'
    format; removed on exit, even when bringing them up failed midway."""
    from harness.dbs.ember_run import image

    backend = DockerBackend(name, size=size, image=image(lambda _m: None))
    try:
        nodes = backend.up()
        hosts_file.write_text("".join(f"{n.name} root@{n.ssh.host}:{n.ssh.port} "
                                      f"{n.ssh.key_path} ip={n.ip}\n" for n in nodes))  # fmt: skip
        yield nodes
    finally:
        backend.down()


def placed_by_offsets_only(run: Path) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The run's events as load_audit places them (containers run on the
    harness's kernel: by the monotonic clock, SSH hosts or not), and the same
    events placed again by the measured clock offsets only, as on hosts of
    their own. That timeline names no shared clock and no harness kernel, or
    a process naming ours would be placed by the monotonic clock again; every
    event must be placed."""
    timeline = msgspec.json.decode((run / "timeline.json").read_bytes())
    loaded = load_audit(run) or {}
    by_offsets = {node: [_as_written(ev) for ev in events] for node, events in loaded.items()}
    alone = {**timeline, "shared_monotonic": False, "harness_boot_id": None}
    assert place_events(by_offsets, alone) == sum(len(evs) for evs in loaded.values())
    return loaded, by_offsets


def _as_written(ev: dict[str, Any]) -> dict[str, Any]:
    """A placed event as its node wrote it (its own wall; unplaced)."""
    return {**{k: v for k, v in ev.items() if k != "node_wall"}, "wall": ev["node_wall"]}
