"""`faultline clean`: heal and remove what killed runs left behind.

    faultline clean store/ember-mix/20260101T000000-42   # one run, by its journal
    faultline clean --cluster run42-1234                   # one Docker cluster
    faultline clean --all-dead                             # every dead owner's leftovers

Theory of operation. A run writes down every fault before applying it
(`nemesis.journal`: `faults.jsonl` in the run dir, with the exact heal
commands), and labels its containers and network with its owner's host and
pid (`harness.backends.docker`). A run that ends in any way Python can see
(normally, on error, SIGINT, SIGTERM) heals and removes its own, and ends its
journal. A run killed with SIGKILL (or a lost machine) cannot; whatever it
left is found from those two records:

- a run dir: if its journal has no `end` and its owner is gone, every fault
  it lists as unhealed is healed by running its heal commands on the node
  over SSH (the journal's `start` record says how to reach each), newest
  first, then `heal_all`; a Docker run's cluster is removed instead, which
  removes its faults with it;
- `--cluster NAME`: that Docker cluster is removed, unless its owner lives;
- `--all-dead`: every Docker cluster whose owner process (on this host) is
  gone, and every run in the store whose journal is open (`.running/`)
  and whose owner is gone.

Everything is idempotent: a second `clean` finds the journal ended and the
cluster gone, and says "nothing to do". A run whose owner is alive is never
touched; nor is one owned on another host (only that host can tell whether
it is still running). `leftovers()` is what `faultline run` calls first:
Docker leftovers of dead owners are removed, runs that left faults on SSH
hosts are named with the command that heals them.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from harness.backends.base import NodeHandle, SshTarget
from harness.cli import CliError
from harness.store import DEFAULT_ROOT
from nemesis import journal


class CleanError(CliError):
    """What `clean` refused to do or could not do (one line, exit 2)."""


def add_parser(subparsers: Any) -> None:
    """Registers `faultline clean`."""
    p = subparsers.add_parser(
        "clean", help="heal and remove what killed runs left (faults, clusters)"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                      help="heal the faults this run's journal lists as unhealed")  # fmt: skip
    what.add_argument("--cluster", metavar="NAME", help="remove this Docker cluster")
    what.add_argument("--all-dead", action="store_true",
                      help="every cluster and journaled run whose owner is gone")  # fmt: skip
    p.add_argument("--store", type=Path, default=DEFAULT_ROOT,
                   help="run store whose open journals --all-dead reads")  # fmt: skip
    p.set_defaults(func=_clean_cmd)


def _clean_cmd(args: argparse.Namespace) -> int:
    import docker.errors

    from harness.backends.docker import ClusterError
    from harness.backends.engine import DockerUnavailableError

    try:
        return _clean(args)
    except (DockerUnavailableError, ClusterError, docker.errors.APIError) as exc:
        raise CleanError(str(exc).splitlines()[0]) from None


def _clean(args: argparse.Namespace) -> int:
    if args.cluster is not None:
        lines = clean_cluster(args.cluster)
    elif args.all_dead:
        lines, failures = clean_all_dead(args.store)
        for line in lines:
            print(line)
        if failures:
            raise CleanError("; ".join(failures))
        return 0
    else:
        lines = clean_run(args.run_dir)
    for line in lines:
        print(line)
    return 0


def _start_record(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in records if r.get("type") == "start"), None)


def _owner_state(start: Mapping[str, Any]) -> tuple[str, str]:
    who = start.get("owner") or {}
    pid = who.get("pid")
    if not isinstance(pid, int):
        return "dead", "an unknown process"
    return (journal.owner_state(str(who.get("host")), pid, str(who.get("started") or "")),
            f"pid {pid} on {who.get('host')}")  # fmt: skip


def clean_run(run_dir: Path) -> list[str]:
    """Heal (SSH) or remove (Docker) what the run at `run_dir` left; what was done."""
    path = run_dir / journal.FILE_NAME
    if not run_dir.is_dir():
        raise CleanError(f"{run_dir} is not a run directory")
    records = journal.read(path)
    start = _start_record(records)
    if start is None:
        if not path.exists():
            raise CleanError(f"{run_dir} has no fault journal ({journal.FILE_NAME}); it "
                             "applied no fault this version of faultline knows of")  # fmt: skip
        return [f"{run_dir}: the run died before its cluster was up; no fault to heal"]
    if journal.has_ended(records):
        _forget_marker(run_dir)
        return [f"{run_dir}: nothing to do (its journal is closed: nothing left to heal)"]
    state, who = _owner_state(start)
    if state == "alive":
        raise CleanError(f"{run_dir}: its run is still going ({who}); stop it first "
                         "(SIGINT or SIGTERM heal and remove)")  # fmt: skip
    if state == "elsewhere":
        raise CleanError(f"{run_dir}: its run belongs to {who}; clean it there")
    todo = journal.unhealed(records)
    if start.get("backend") == "docker" and start.get("cluster"):
        lines = _remove_docker_run(path, str(start["cluster"]), todo)
        failures: list[str] = []
    else:
        lines, failures = _heal_ssh_run(path, start, todo)
    if failures:
        raise CleanError(f"{run_dir}: " + "; ".join(failures))
    journal.Journal(path).close(ended=True)
    _forget_marker(run_dir)
    return [f"{run_dir}: owner {who} is gone", *lines]


def _remove_docker_run(path: Path, cluster: str, todo: list[Any]) -> list[str]:
    from harness.backends.docker import ClusterError, cleanup

    try:
        removed = cleanup(cluster)
    except ClusterError as exc:
        # A CleanError: `clean` reports it, and the sweep before a run
        # (`leftovers`) passes over this run rather than refusing to start.
        raise CleanError(f"{path.parent}: {exc}") from None
    record = journal.Journal(path)
    for fault in todo:  # gone with the containers they were applied to
        record.write({"type": "heal", "id": fault.get("id"), "by": "cluster removed"})
    record.close(ended=False)
    what = f"removed {', '.join(removed)}" if removed else f"cluster {cluster} already gone"
    return [what, f"{len(todo)} unhealed faults went with the cluster"]


def _heal_ssh_run(
    path: Path, start: Mapping[str, Any], todo: list[Any]
) -> tuple[list[str], list[str]]:
    from harness.control import Control, ControlError
    from nemesis.heal import heal_all, heal_journaled

    nodes = [_node(n) for n in start.get("nodes") or []]
    known = Path.home() / ".ssh" / "known_hosts"
    with Control(nodes, known_hosts=known) as control:
        failures = heal_journaled(control, path)
        kinds = ", ".join(sorted({str(f.get("kind")) for f in todo})) or "none"
        lines = [f"healed {len(todo) - len(failures)} of {len(todo)} unhealed faults ({kinds})"]
        try:
            heal_all(control)
            lines.append(f"heal-all on {', '.join(n.name for n in nodes)}: no faultline rule, "
                         "qdisc or paused process left")  # fmt: skip
        except ControlError as exc:
            failures.append(f"heal-all failed: {exc}")
    return lines, failures


def _node(doc: Mapping[str, Any]) -> NodeHandle:
    ssh = doc["ssh"]
    target = SshTarget(host=ssh["host"], port=int(ssh["port"]), user=ssh["user"],
                       key_path=ssh.get("key_path"))  # fmt: skip
    return NodeHandle(name=doc["name"], ip=doc["ip"], ssh=target)


def clean_cluster(name: str) -> list[str]:
    """Remove Docker cluster `name` unless its owner lives; what was done."""
    from harness.backends.docker import cleanup, clusters

    entry = clusters().get(name)
    if entry is None:
        return [f"no cluster {name}: nothing to do"]
    if entry["state"] == "alive":
        raise CleanError(f"cluster {name} belongs to a live run ({entry['owner']}); stop it first")
    removed = cleanup(name)
    return [f"cluster {name} (owner {entry['owner']}): removed {', '.join(removed)}"]


def _markers(store: Path) -> list[tuple[Path, Path]]:
    """(marker, run dir) of every run in `store` whose journal is open."""
    found = []
    for marker in sorted((store / journal.RUNNING_DIR).glob("*.json")):
        with contextlib.suppress(OSError, msgspec.DecodeError, KeyError, TypeError):
            found.append((marker, Path(msgspec.json.decode(marker.read_bytes())["run"])))
    return found


def _forget_marker(run_dir: Path) -> None:
    store = run_dir.resolve().parent.parent
    for marker, run in _markers(store):
        if run == run_dir.resolve():
            marker.unlink(missing_ok=True)


def _dead_runs(store: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Runs with an open journal whose owner is gone: (run dir, start record)."""
    dead = []
    for marker, run in _markers(store):
        start = _start_record(journal.read(run / journal.FILE_NAME))
        if start is None:
            marker.unlink(missing_ok=True)  # killed before its cluster was up: nothing applied
        elif _owner_state(start)[0] == "dead":
            dead.append((run, start))
    return dead


def clean_all_dead(store: Path) -> tuple[list[str], list[str]]:
    """Every dead owner's clusters and journaled runs: (what was done, what failed)."""
    from harness.backends.docker import cleanup_dead, clusters

    lines, failures = cleanup_dead(), []
    for run, _start in _dead_runs(store):
        try:
            lines += clean_run(run)
        except CliError as exc:
            failures.append(str(exc))
    for name, entry in sorted(clusters().items()):
        if entry["state"] == "unknown":
            lines.append(f"cluster {name} has no owner label (made by an older faultline): "
                         f"faultline clean --cluster {name} removes it")  # fmt: skip
    return lines or ["nothing to do"], failures


def leftovers(store: Path, backend: str, log: Callable[[str], None]) -> None:
    """What `faultline run` does first: remove dead owners' Docker clusters
    (when it runs on Docker) and name the runs that left faults on SSH hosts."""
    from harness.backends.engine import DockerUnavailableError

    if backend == "docker":
        from harness.backends.docker import cleanup_dead

        with contextlib.suppress(DockerUnavailableError):  # the run itself says so, once
            for line in cleanup_dead():
                log(f"leftover of a killed run: {line}")
    for run, start in _dead_runs(store):
        if start.get("backend") == "docker":
            with contextlib.suppress(CliError, DockerUnavailableError):
                clean_run(run)  # its cluster is gone (above, or by hand): close the journal
            continue
        hosts = ", ".join(str(n.get("name")) for n in start.get("nodes") or [])
        unhealed = len(journal.unhealed(journal.read(run / journal.FILE_NAME)))
        if not unhealed:  # every fault is journaled before it is applied: none is out there
            journal.Journal(run / journal.FILE_NAME).close(ended=True)
            _forget_marker(run)
            continue
        log(f"warning: a killed run may have left {unhealed} faults on {hosts}: "
            f"faultline clean {run}")  # fmt: skip
