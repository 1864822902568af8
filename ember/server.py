"""`ember-node`: the ember node daemon (Raft groups, KV partitions, HTTP API).

    ember-node --id n1 --peers n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003 \\
               --data-dir /tmp/ember/n1
    ember-node --config node.toml        # the same settings as TOML keys

Addressing (see `ember.runtime.config`): `--peers` gives each node's Raft
address, `id=host:raft_port[:http_port]`, HTTP port defaulting to
raft_port + 1000; `--listen` (HTTP) and `--raft-listen` override this node's
own. `--bootstrap` names the initial voters of every partition (default: all
peers); a node outside it starts empty and joins through change-peers.
Bad flags or config exit with code 2 and one line naming the problem.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from ember import clock
from ember.api import Api
from ember.failpoints import FailpointError, Failpoints
from ember.kv import DEFAULT_PARTITIONS, KvTable, make_machines
from ember.metastore import META_GROUP, MetastoreMachine
from ember.placement.plane import ControlPlane
from ember.raft import PLANTED_BUGS, RaftConfig
from ember.runtime import ConfigError, NodeConfig, NodeRuntime
from ember.runtime.config import parse_hostport, parse_peers
from ember.storage import StorageCorruption

log = logging.getLogger("ember.server")

_INT_KEYS = ("seed", "partitions", "compact_every")
NODE_HEARTBEAT_TICKS = 2
_RAFT_KEYS = (
    "election_timeout_ticks",
    "heartbeat_ticks",
    "catchup_margin",
    "catchup_max_retries",
    "max_entries_per_append",
    "max_inflight_appends",
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember-node", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="TOML file with the settings below (flags override it)")
    p.add_argument("--id", help="this node's id, as named in --peers")
    p.add_argument("--peers", help="id=host:raft_port[:http_port],... for every node")
    p.add_argument("--listen", help="HTTP host:port (default: from this node's --peers entry)")
    p.add_argument("--raft-listen", help="Raft host:port (default: this node's --peers entry)")
    p.add_argument("--data-dir", help="directory for the WAL and events.jsonl")
    p.add_argument("--seed", type=int, help="seed of every random choice (default 0)")
    p.add_argument("--partitions", type=int, help=f"KV partitions (default {DEFAULT_PARTITIONS})")
    p.add_argument("--bootstrap", help="initial voters, comma-separated (default: all peers)")
    p.add_argument(
        "--meta-nodes",
        help="run the metastore, zones and placement driver; metastore voters, "
        "comma-separated, or 'auto' for the first 3 of --bootstrap (default: off)",
    )
    p.add_argument("--tick-ms", type=float, help="Raft tick length in ms (default 50)")
    p.add_argument("--compact-every", type=int, help="compact a log every N entries (0: never)")
    for key in _RAFT_KEYS:
        flag = "--" + key.replace("_", "-")
        p.add_argument(flag, type=int, help=f"Raft {key.replace('_', ' ')} (RaftConfig)")
    bugs = ",".join(sorted(PLANTED_BUGS))
    p.add_argument("--planted-bugs", help=f"test-only core defects: {bugs}")
    p.add_argument(
        "--no-pre-vote",
        action="store_true",
        help="campaign without asking first (Raft without Pre-Vote; TOML pre_vote = false)",
    )
    p.add_argument(
        "--unsafe-no-fsync",
        action="store_true",
        help="benchmarks only: skip fsync (acknowledged writes may be lost on a crash)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def _merged(args: argparse.Namespace) -> dict[str, Any]:
    """Settings from the TOML file, overridden by the flags given."""
    settings: dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, "rb") as fh:
                settings = tomllib.load(fh)
        except OSError as err:
            raise ConfigError(f"--config {args.config}: {err.strerror}") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"--config {args.config}: not valid TOML: {err}") from None
        settings = {k.replace("-", "_"): v for k, v in settings.items()}
    for key, value in vars(args).items():
        if value is not None and key not in ("config", "log_level"):
            if key in ("unsafe_no_fsync", "no_pre_vote") and not value:
                continue
            settings[key] = value
    return settings


def _raft_config(s: dict[str, Any]) -> RaftConfig:
    fields: dict[str, Any] = {k: s[k] for k in _RAFT_KEYS if k in s}
    for key, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{key} must be an integer")
    pre_vote = s.get("pre_vote", True)
    if not isinstance(pre_vote, bool):
        raise ConfigError("pre_vote must be true or false")
    fields["pre_vote"] = pre_vote and not s.get("no_pre_vote", False)
    if (
        "heartbeat_ticks" not in fields
        and fields.get("election_timeout_ticks", 10) > NODE_HEARTBEAT_TICKS
    ):
        # A node heartbeats every second tick (100 ms at the default 50 ms, etcd's
        # default interval; the election timeout stays 10-20 ticks): half the empty
        # appends of every tick, which are most of a quiet cluster's traffic. The
        # Raft core's own default (every tick) is what its unit tests script.
        fields["heartbeat_ticks"] = NODE_HEARTBEAT_TICKS
    bugs = s.get("planted_bugs", "")
    if isinstance(bugs, str):
        bugs = [b for b in bugs.split(",") if b]
    try:
        return RaftConfig(**fields, planted_bugs=frozenset(bugs))
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None


def build_config(args: argparse.Namespace) -> NodeConfig:
    """The node configuration, or ConfigError naming what is wrong."""
    return config_from_settings(_merged(args))


def config_from_settings(s: dict[str, Any]) -> NodeConfig:
    """The node configuration from merged settings (TOML keys), or ConfigError
    naming what is wrong; the harness checks a plan's settings with it before
    any node starts (harness/honoured.py)."""
    for required in ("id", "peers", "data_dir"):
        if not s.get(required):
            raise ConfigError(f"--{required.replace('_', '-')} is required")
    node_id = str(s["id"])
    peers_raw = s["peers"]
    if isinstance(peers_raw, list):
        peers_raw = ",".join(peers_raw)
    peers = parse_peers(str(peers_raw))
    if node_id not in peers:
        raise ConfigError(f"--id {node_id} is not in --peers ({', '.join(sorted(peers))})")
    own = peers[node_id]
    http = parse_hostport(s["listen"], "--listen") if s.get("listen") else (own.host, own.http_port)
    raft = (
        parse_hostport(s["raft_listen"], "--raft-listen")
        if s.get("raft_listen")
        else (own.host, own.raft_port)
    )
    boot_raw = s.get("bootstrap") or ",".join(sorted(peers))
    bootstrap = tuple(sorted(b for b in str(boot_raw).split(",") if b))
    bad = [b for b in bootstrap if b not in peers]
    if bad:
        raise ConfigError(f"--bootstrap: unknown node(s) {', '.join(bad)}")
    meta_raw = s.get("meta_nodes") or ""
    if meta_raw == "auto":
        meta_raw = ",".join(bootstrap[:3])
    meta_nodes = tuple(sorted(m for m in str(meta_raw).split(",") if m))
    bad = [m for m in meta_nodes if m not in peers]
    if bad:
        raise ConfigError(f"--meta-nodes: unknown node(s) {', '.join(bad)}")
    for key in _INT_KEYS:
        if key in s and (not isinstance(s[key], int) or isinstance(s[key], bool)):
            raise ConfigError(f"{key} must be an integer")
    for key in ("unsafe_no_fsync", "no_pre_vote"):
        if key in s and not isinstance(s[key], bool):
            raise ConfigError(f"{key} must be true or false")
    compact_every = s.get("compact_every", 10_000)
    if compact_every < 0:
        raise ConfigError(f"compact_every must be 0 (never compact) or more, got {compact_every}")
    partitions = s.get("partitions", DEFAULT_PARTITIONS)
    if not 1 <= partitions <= 1024:
        raise ConfigError("--partitions must be in 1..1024")
    tick_ms = s.get("tick_ms", 50.0)
    if not isinstance(tick_ms, int | float) or isinstance(tick_ms, bool):
        raise ConfigError("tick_ms must be a number (milliseconds)")
    tick_ms = float(tick_ms)
    if not 1 <= tick_ms <= 10_000:
        raise ConfigError("--tick-ms must be in 1..10000")
    failpoints = _failpoints(s.get("failpoints"))
    clock_file = s.get("clock_offset_file")
    if clock_file is not None and not isinstance(clock_file, str):
        raise ConfigError("clock_offset_file must be a path")
    return NodeConfig(
        node_id=node_id,
        data_dir=Path(s["data_dir"]),
        peers=peers,
        http_listen=http,
        raft_listen=raft,
        bootstrap=bootstrap,
        meta_nodes=meta_nodes,
        partitions=partitions,
        seed=s.get("seed", 0),
        tick_ms=tick_ms,
        compact_every=compact_every,
        fsync=not s.get("unsafe_no_fsync", False),
        raft=_raft_config(s),
        failpoints=failpoints,
        clock_offset_file=Path(clock_file) if clock_file else None,
    )


def _failpoints(raw: Any) -> dict[str, dict[str, Any]]:
    """The `failpoints` table (TOML only: name -> parameters table), checked as
    POST /admin/failpoints would check it."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ConfigError("failpoints must be a table of failpoint name -> parameters table")
    scratch = Failpoints(random.Random(0))
    for name, params in raw.items():
        try:
            scratch.enable(str(name), dict(params))
        except FailpointError as err:
            raise ConfigError(f"failpoints.{name}: {err}") from None
    return {str(k): dict(v) for k, v in raw.items()}


async def serve(
    cfg: NodeConfig,
    on_started: Callable[[NodeRuntime, ControlPlane | None], None] | None = None,
) -> None:
    """Run the node until SIGTERM or SIGINT, then stop cleanly.

    `on_started` is told the runtime and control plane once both serve (the
    simulator reads node state through it; the daemon passes nothing).
    """
    machines = make_machines(cfg.partitions)
    meta = MetastoreMachine() if cfg.node_id in cfg.meta_nodes else None
    if meta is not None:
        machines[META_GROUP] = meta
    clock_task = None
    if cfg.clock_offset_file is not None:
        clock.read_offset(cfg.clock_offset_file)  # before the first audit event
        clock_task = asyncio.create_task(clock.follow_offset_file(cfg.clock_offset_file))
    # Only the metastore's voters host its group; the others reach it over HTTP.
    runtime = NodeRuntime(cfg, machines, {META_GROUP: cfg.meta_nodes})
    await runtime.start()
    app = Api(runtime, KvTable(runtime, cfg.partitions)).app()
    plane = ControlPlane(runtime, meta) if cfg.meta_nodes else None
    if plane is not None:
        plane.add_routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, cfg.http_listen[0], cfg.http_listen[1], reuse_address=True)
        await site.start()
        log.info(
            "node %s serving HTTP on %s:%d, Raft on %s:%d, %d partitions, data in %s",
            cfg.node_id,
            *cfg.http_listen,
            *cfg.raft_listen,
            cfg.partitions,
            cfg.data_dir,
        )
        if plane is not None:
            await plane.start()
        if on_started is not None:
            on_started(runtime, plane)
        await stop.wait()
    finally:
        log.info("node %s stopping", cfg.node_id)
        if plane is not None:
            await plane.stop()
        await runner.cleanup()
        await runtime.stop()
        if clock_task is not None:
            clock_task.cancel()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `ember-node` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        cfg = build_config(args)
    except ConfigError as err:
        print(f"ember-node: {err}", file=sys.stderr)
        return 2
    if not cfg.fsync:
        # Benchmarks only: the store fdatasyncs through os.fdatasync.
        os.fdatasync = lambda fd: None
    try:
        asyncio.run(serve(cfg))
    except (OSError, StorageCorruption) as err:
        # A port in use, a store another process holds, damaged data: say
        # which, without a traceback (the store names the file and offset).
        print(f"ember-node: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
