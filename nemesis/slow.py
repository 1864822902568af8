"""Slow links: delay (tc netem) and rate limits (tc htb) toward given peers.

Theory of operation: on each node we install our own root qdisc, an HTB
with handle fa17: whose default class 1 is unlimited; traffic to the chosen
peers is steered by u32 filters (match on destination address) into class
2, which carries the rate limit, with a netem qdisc under it for the delay.
Only packets *leaving* the node toward those peers are slowed, so slowing
a link both ways means naming it from both ends. HTB rather than PRIO as
the root because kernels without sch_prio exist (this CI's among them).
Some kernels also lack sch_netem: a delay then fails with
`NetemUnavailableError` naming the node, after healing what it set, while
rate limits still work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.backends.base import NodeHandle
from harness.control import Control
from nemesis.fault import QDISC_HANDLE, Fault, apply

H = QDISC_HANDLE
UNLIMITED = "10gbit"


class NetemUnavailableError(RuntimeError):
    """The node's kernel has no netem qdisc, so delays cannot be injected."""


def device_toward(control: Control, node: str, peer_ip: str) -> str:
    """The network interface `node` uses to reach `peer_ip`."""
    out = control.run(node, f"ip -o route get {peer_ip}").stdout.split()
    if "dev" not in out:
        raise RuntimeError(f"no route from {node} to {peer_ip}: {' '.join(out)}")
    return out[out.index("dev") + 1]


def remove_ours(dev: str) -> str:
    """Delete the root qdisc on `dev` only if it is ours (handle fa17:)."""
    return (
        f"if tc qdisc show dev {dev} | grep -q '^qdisc htb {H}: root'; "
        f"then tc qdisc del dev {dev} root; fi"
    )


def _node_commands(
    dev: str,
    peer_ips: Sequence[str],
    delay_ms: float | None,
    jitter_ms: float,
    rate_kbit: int | None,
) -> list[str]:
    rate = f"{rate_kbit}kbit" if rate_kbit else UNLIMITED
    cmds = [
        remove_ours(dev),
        f"tc qdisc add dev {dev} root handle {H}: htb default 1",
        f"tc class add dev {dev} parent {H}: classid {H}:1 htb rate {UNLIMITED}",
        f"tc class add dev {dev} parent {H}: classid {H}:2 htb rate {rate} ceil {rate}",
    ]
    if delay_ms:
        jitter = f" {jitter_ms:g}ms" if jitter_ms else ""
        cmds.append(
            f"tc qdisc add dev {dev} parent {H}:2 handle fa18: netem delay {delay_ms:g}ms{jitter}"
        )
    for ip in peer_ips:
        cmds.append(
            f"tc filter add dev {dev} parent {H}: protocol ip prio 1"
            f" u32 match ip dst {ip}/32 flowid {H}:2"
        )
    return cmds


def slow(
    control: Control,
    nodes: Sequence[NodeHandle],
    targets: Mapping[str, Sequence[str]],
    *,
    delay_ms: float | None = None,
    jitter_ms: float = 0.0,
    rate_kbit: int | None = None,
) -> Fault:
    """Slow traffic from each node in `targets` toward the peers it lists."""
    if not delay_ms and not rate_kbit:
        raise ValueError("a slow link needs delay_ms or rate_kbit")
    by_name = {n.name: n for n in nodes}
    unknown = sorted({*targets, *(p for ps in targets.values() for p in ps)} - set(by_name))
    if unknown:
        raise ValueError(f"slow links name unknown nodes: {', '.join(unknown)}")
    commands: dict[str, list[str]] = {}
    heal: dict[str, list[str]] = {}
    for node, peers in sorted(targets.items()):
        if not peers:
            continue
        ips = [by_name[p].ip for p in sorted(peers)]
        dev = device_toward(control, node, ips[0])
        commands[node] = _node_commands(dev, ips, delay_ms, jitter_ms, rate_kbit)
        heal[node] = [remove_ours(dev)]
    detail = {
        "targets": {n: sorted(p) for n, p in sorted(targets.items())},
        "delay_ms": delay_ms,
        "jitter_ms": jitter_ms,
        "rate_kbit": rate_kbit,
    }
    if delay_ms:
        missing = [n for n in commands if not is_netem_available(control, n)]
        if missing:
            raise NetemUnavailableError(
                f"tc netem is unavailable on {', '.join(missing)}: the kernel lacks sch_netem,"
                " so delays cannot be injected (rate limits without delay_ms still work)"
            )
    return apply(control, "slow", commands, heal, detail)


def is_netem_available(control: Control, node: str) -> bool:
    """Whether `node`'s kernel accepts a netem qdisc (probed on its loopback)."""
    probe = "tc qdisc add dev lo root handle fa19: netem delay 1ms && tc qdisc del dev lo root"
    return control.run(node, probe, check=False).ok
