"""`--failpoint` under `--backend sim` is switched on, not dropped (issue 23): at a1a5484
the simulator never set it (no node's audit log had a failpoint event, and seed 3 with
kv.ack-before-commit came back valid); every node must record it from the start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_failpoint_flag_is_on_at_every_simulated_node(tmp_path: Path) -> None:
    """Each node's audit log says the failpoint was enabled, with its parameters."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", "2",
         "--nodes", "3", "--workload", "register", "--nemesis", "none", "--time-limit", "2",
         "--quiet-period", "1", "--failpoint", 'raft.append.delay={"delay_ms": 5}',
         "--store", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr[-2000:]
    assert "failpoint raft.append.delay {'delay_ms': 5} on every node from the start" in out.stdout
    run = Path(next(ln.split(" ", 1)[1] for ln in out.stdout.splitlines()
                    if ln.startswith("store ")))  # fmt: skip
    for node in ("n1", "n2", "n3"):
        events = [json.loads(line) for line in (run / "nodes" / node / "events.jsonl").open()]
        on = [e for e in events if e["kind"] == "failpoint" and e["enabled"]]
        assert [(e["name"], e["params"]["delay_ms"]) for e in on] == [("raft.append.delay", 5)]


def test_a_restarted_node_has_its_failpoint_on_again(tmp_path: Path) -> None:
    """Killed and restarted by the nemesis, a node logs the failpoint on in every
    incarnation (before: only the first, so a restarted leader lost the defect)."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", "1",
         "--nodes", "3", "--workload", "register", "--nemesis", "kill", "--nemesis-mode",
         "periodic", "--time-limit", "8", "--quiet-period", "1", "--failpoint",
         'raft.append.delay={"delay_ms": 1}', "--store", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr[-2000:]
    run = Path(next(ln.split(" ", 1)[1] for ln in out.stdout.splitlines()
                    if ln.startswith("store ")))  # fmt: skip
    starts, enabled = {}, {}
    for node in ("n1", "n2", "n3"):
        events = [json.loads(line) for line in (run / "nodes" / node / "events.jsonl").open()]
        starts[node] = sum(e["kind"] == "started" for e in events)
        enabled[node] = sum(e["kind"] == "failpoint" and e["enabled"] for e in events)
    assert max(starts.values()) > 1, f"seed 1 no longer restarts a node: {starts}"
    assert enabled == starts


def test_a_fault_failpoint_is_healed_before_the_quiet_period_and_a_planted_one_is_not(
    tmp_path: Path,
) -> None:
    """raft.message.drop on to the end left a group leaderless and the final reads
    unanswered, called invalid by the liveness rules (sim seeds 61 and 65): a
    fault failpoint is switched off at a heal-all, even with no nemesis; a
    planted defect stays on."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", "3",
         "--nodes", "3", "--workload", "register", "--nemesis", "none", "--time-limit", "4",
         "--quiet-period", "2", "--failpoint", 'raft.message.drop={"probability": 0.3}',
         "--failpoint", "rebalance.ignore-last-seen", "--store", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert ("failpoint raft.message.drop {'probability': 0.3} on every node from the start "
            "to the heal-all before the quiet period") in out.stdout  # fmt: skip
    assert "failpoint rebalance.ignore-last-seen {} on every node from the start to the end" in (
        out.stdout
    )
    run = Path(next(ln.split(" ", 1)[1] for ln in out.stdout.splitlines()
                    if ln.startswith("store ")))  # fmt: skip
    history = [json.loads(line) for line in (run / "history.jsonl").open()]
    heal = [e for e in history if e["f"] == "heal-all" and e["type"] == "ok"]
    assert len(heal) == 1
    for node in ("n1", "n2", "n3"):
        events = [json.loads(line) for line in (run / "nodes" / node / "events.jsonl").open()]
        off = {e["name"] for e in events if e["kind"] == "failpoint" and not e["enabled"]}
        assert off == {"raft.message.drop"}, node
