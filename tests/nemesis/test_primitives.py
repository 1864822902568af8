"""Each nemesis primitive, applied and healed on the shared cluster, checked
from inside the nodes (iptables -S, tc, /proc/<pid>/status). The process
under test is a stand-in (`sleep`), since ember-node does not exist yet."""

import random
from collections.abc import Iterator

import pytest

from harness.control import Control
from nemesis import partition as p
from nemesis import process as proc
from nemesis.heal import heal_all
from nemesis.slow import NetemUnavailableError, is_netem_available, slow
from tests.harness.cluster_fixtures import SharedCluster

# The first test to ask for the cluster builds the image: minutes when cold.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SPEC = proc.ProcessSpec(pidfile="/run/faultline/standin.pid", start_command="sleep 100000")
NAMES = ["n1", "n2", "n3", "n4", "n5"]


@pytest.fixture
def healed(cluster: SharedCluster) -> Iterator[SharedCluster]:
    """The cluster, with every fault healed and the stand-in killed afterwards."""
    yield cluster
    heal_all(cluster.control)
    cluster.control.run_all("pkill -9 -x sleep; rm -f /run/faultline/standin.pid; true")


def _can_connect(control: Control, src: str, dst_ip: str) -> bool:
    probe = f"python3 -c \"import socket; socket.create_connection(('{dst_ip}', 22), 1.5)\""
    return control.run(src, probe, check=False).ok


def _chain_rules(control: Control, node: str) -> list[str]:
    out = control.run(node, "iptables -S FAULTLINE 2>/dev/null || true").stdout
    return [ln for ln in out.splitlines() if ln.startswith("-A FAULTLINE")]


def _state(control: Control, node: str, pid: int) -> str:
    out = control.run(node, f"grep '^State:' /proc/{pid}/status || echo 'State: gone'").stdout
    return out.split()[1]


def test_isolating_a_node_cuts_it_off_and_heal_restores(healed: SharedCluster) -> None:
    """Isolate n1: rules appear on every node, n2 cannot reach n1, heal undoes both."""
    c, ip = healed.control, {n.name: n.ip for n in healed.nodes}
    fault = p.partition(c, healed.nodes, p.isolate(NAMES, "n1"))
    assert _chain_rules(c, "n1") == [f"-A FAULTLINE -s {ip[n]}/32 -j DROP" for n in NAMES[1:]]
    assert _chain_rules(c, "n2") == [f"-A FAULTLINE -s {ip['n1']}/32 -j DROP"]
    assert not _can_connect(c, "n2", ip["n1"])
    assert _can_connect(c, "n2", ip["n3"])
    assert (
        fault.as_value()["commands"]["n2"][-1] == f"iptables -w -A FAULTLINE -s {ip['n1']} -j DROP"
    )
    fault.heal(c)
    assert all(_chain_rules(c, n) == [] for n in NAMES)
    assert _can_connect(c, "n2", ip["n1"])


def test_one_way_partition_drops_one_direction_only(healed: SharedCluster) -> None:
    """n1 -> n2 is dropped at n2 only; n1 keeps no rule against n2."""
    c = healed.control
    fault = p.partition(c, healed.nodes, p.one_way(["n1"], ["n2"]))
    assert [n for n, cmds in fault.commands.items() if "DROP" in cmds[-1]] == ["n2"]
    assert _chain_rules(c, "n1") == []
    assert len(_chain_rules(c, "n2")) == 1
    fault.heal(c)
    assert _chain_rules(c, "n2") == []


def test_a_new_partition_replaces_the_previous_one(healed: SharedCluster) -> None:
    """Partitioning again leaves only the new grudge's rules on every node."""
    c, ip = healed.control, {n.name: n.ip for n in healed.nodes}
    p.partition(c, healed.nodes, p.isolate(NAMES, "n1"))
    fault = p.partition(c, healed.nodes, p.isolate(NAMES, "n5"))
    assert _chain_rules(c, "n1") == [f"-A FAULTLINE -s {ip['n5']}/32 -j DROP"]
    assert len(_chain_rules(c, "n5")) == 4
    fault.heal(c)
    assert all(_chain_rules(c, n) == [] for n in NAMES)


def test_healing_leaves_other_iptables_rules_alone(healed: SharedCluster) -> None:
    """A rule outside our chain survives both a fault's heal and heal_all."""
    c = healed.control
    c.run("n3", "iptables -A INPUT -s 203.0.113.9 -j DROP")
    try:
        grudge = p.majorities_ring(NAMES, random.Random(3))
        p.partition(c, healed.nodes, grudge).heal(c)
        heal_all(c)
        assert "-A INPUT -s 203.0.113.9/32 -j DROP" in c.run("n3", "iptables -S INPUT").stdout
        assert "FAULTLINE" not in c.run("n3", "iptables -S").stdout
    finally:
        c.run("n3", "iptables -D INPUT -s 203.0.113.9 -j DROP")


def test_rate_limit_toward_peers_is_installed_and_removed(healed: SharedCluster) -> None:
    """A rate limit adds our htb root qdisc with a 512kbit class and a filter per peer."""
    c, ip = healed.control, {n.name: n.ip for n in healed.nodes}
    fault = slow(c, healed.nodes, {"n1": ["n2", "n3"]}, rate_kbit=512)
    assert "qdisc htb fa17: root" in c.run("n1", "tc qdisc show dev eth0").stdout
    assert "rate 512Kbit" in c.run("n1", "tc class show dev eth0").stdout
    filters = c.run("n1", "tc filter show dev eth0").stdout
    for peer in ("n2", "n3"):
        hexip = "".join(f"{int(x):02x}" for x in ip[peer].split("."))
        assert f"match {hexip}/ffffffff at 16" in filters
    fault.heal(c)
    assert "fa17" not in c.run("n1", "tc qdisc show").stdout


def test_delay_uses_netem_or_says_it_is_unavailable(healed: SharedCluster) -> None:
    """With netem, a delay shows in tc; without it, one error naming the node, nothing left."""
    c = healed.control
    if is_netem_available(c, "n1"):
        fault = slow(c, healed.nodes, {"n1": ["n2"]}, delay_ms=50, jitter_ms=5)
        assert "netem" in c.run("n1", "tc qdisc show dev eth0").stdout
        fault.heal(c)
    else:
        with pytest.raises(NetemUnavailableError, match=r"tc netem is unavailable on n1: "):
            slow(c, healed.nodes, {"n1": ["n2"]}, delay_ms=50)
    assert "fa17" not in c.run("n1", "tc qdisc show").stdout


def test_kill_9_ends_the_process_and_heal_restarts_it(healed: SharedCluster) -> None:
    """kill -9 hits exactly the pidfile's pid; healing starts a fresh one."""
    c = healed.control
    proc.start(c, ["n1", "n2"], SPEC)
    before = proc.find_pids(c, ["n1", "n2"], SPEC)
    assert all(len(ps) == 1 for ps in before.values())
    fault = proc.kill(c, ["n1"], SPEC)
    assert fault.commands == {"n1": (f"kill -9 {before['n1'][0]}",)}
    assert _state(c, "n1", before["n1"][0]) == "gone"
    assert proc.find_pids(c, ["n1", "n2"], SPEC) == {"n1": [], "n2": before["n2"]}
    fault.heal(c)
    after = proc.find_pids(c, ["n1"], SPEC)["n1"]
    assert len(after) == 1
    assert after != before["n1"]


def test_stop_waits_for_exit_and_start_is_idempotent(healed: SharedCluster) -> None:
    """stop sends TERM and returns once the process is gone; start twice runs one process."""
    c = healed.control
    proc.start(c, ["n4"], SPEC)
    proc.start(c, ["n4"], SPEC)
    pids = proc.find_pids(c, ["n4"], SPEC)["n4"]
    assert len(pids) == 1
    assert c.run("n4", "pgrep -c -x sleep").stdout.strip() == "1"
    proc.stop(c, ["n4"], SPEC)
    assert _state(c, "n4", pids[0]) == "gone"


def test_pattern_spec_finds_the_process_not_the_searching_shell(healed: SharedCluster) -> None:
    """A pgrep pattern matches only the target, never the shell running the search."""
    c = healed.control
    proc.start(c, ["n5"], SPEC)
    by_pattern = proc.ProcessSpec(pattern="sleep 100000")
    assert proc.find_pids(c, ["n5"], by_pattern) == proc.find_pids(c, ["n5"], SPEC)


def test_pause_stops_the_process_and_resume_continues_it(healed: SharedCluster) -> None:
    """SIGSTOP shows as State T; healing the pause shows S again."""
    c = healed.control
    proc.start(c, ["n2"], SPEC)
    pid = proc.find_pids(c, ["n2"], SPEC)["n2"][0]
    fault = proc.pause(c, ["n2"], SPEC)
    assert _state(c, "n2", pid) == "T"
    fault.heal(c)
    assert _state(c, "n2", pid) == "S"
    proc.pause(c, ["n2"], SPEC)
    proc.resume(c, ["n2"], SPEC)
    assert _state(c, "n2", pid) == "S"
    assert c.run("n2", "cat /run/faultline/paused").stdout.strip() == ""


def test_heal_all_clears_partition_rate_limit_and_pause(healed: SharedCluster) -> None:
    """heal_all, with no record of what was done, leaves no chain, qdisc or stopped pid."""
    c = healed.control
    proc.start(c, NAMES, SPEC)
    pids = proc.find_pids(c, NAMES, SPEC)
    p.partition(c, healed.nodes, p.bridge(NAMES, random.Random(1)))
    slow(c, healed.nodes, {n: [m for m in NAMES if m != n] for n in NAMES}, rate_kbit=1000)
    proc.pause(c, NAMES, SPEC)
    heal_all(c)
    for node in NAMES:
        assert "FAULTLINE" not in c.run(node, "iptables -S").stdout
        assert "fa17" not in c.run(node, "tc qdisc show").stdout
        assert _state(c, node, pids[node][0]) == "S"


def test_failed_fault_heals_what_it_half_applied(healed: SharedCluster) -> None:
    """If one node's commands fail, the nodes that succeeded are healed too."""
    from nemesis.fault import apply

    c = healed.control
    commands = {
        "n1": [
            "iptables -w -N FAULTLINE 2>/dev/null || true",
            "iptables -w -A FAULTLINE -s 198.51.100.1 -j DROP",
        ],
        "n2": ["false"],
    }
    heal = {"n1": ["iptables -w -F FAULTLINE"], "n2": ["true"]}
    with pytest.raises(RuntimeError, match="on n2 exited 1"):
        apply(c, "probe", commands, heal)
    assert _chain_rules(c, "n1") == []
