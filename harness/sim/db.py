"""ember as the harness sees it under the simulator: `EmberDB` over the simulated world.

Theory of operation. `SimEmberDB` is `EmberDB` with its process and HTTP
halves moved onto `ember.sim.world`: the nodes' configuration is the same
TOML (`EmberDB._config`) parsed by the daemon's own `build_config`; start,
kill, pause and stop are the world's; what Docker asks over HTTP with
blocking urllib (`/health`, `/admin/assignments`, the zone's creation) goes
over the simulated network with aiohttp from the harness process, so it
waits on the same partitions and pauses a real request would. Two reads
are direct, because the nemesis needs them with no delay while a phase
lasts: `status` (what `/admin/status` answers: `NodeRuntime.status()`;
None for a dead or paused node, as a timeout would be) and failpoints (the
node's `Failpoints`, as the admin endpoint sets them).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from ember.server import _parser, build_config
from ember.sim.world import World
from harness.backends.base import NodeHandle
from harness.db import ADMIN_CALL_S, REPORT_APPLIED, EmberDB, in_flight, not_healthy, zone_refused
from harness.nodehttp import NOT_JSON, Answer, decoded, no_answer, refused
from harness.process_db import DBError, Gone
from harness.store import RunDir
from nemesis.fault import Fault

HEALTH_POLL_S = 0.25


class SimEmberDB(EmberDB):
    """EmberDB whose nodes are `World` processes (see the module doc)."""

    def __init__(
        self,
        nodes: Sequence[NodeHandle],
        settings: Mapping[str, Any],
        seed: int,
        world: World,
        root: Path,
    ) -> None:
        super().__init__(nodes, settings, seed)
        self.world, self.sim_root = world, root
        self._session: aiohttp.ClientSession | None = None

    # -- lifecycle -----------------------------------------------------------

    def install(self, control: Any = None) -> None:
        """Each node's config, as the daemon would read it, with its own data dir."""
        for node in self.nodes:
            root = self.sim_root / node.name
            root.mkdir(parents=True, exist_ok=True)
            text = self._config(node).replace(f'"{self.root}"', f'"{root / "data"}"')
            path = root / "node.toml"
            path.write_text(text, encoding="utf-8")
            cfg = build_config(_parser().parse_args(["--config", str(path)]))
            # The simulator moves wall clocks itself (ember/sim/hostos.py): a
            # node following the offset file would read this host's.
            cfg = replace(cfg, clock_offset_file=None)
            self.world.add(node.name, node.ip, root, cfg)

    def start(self, control: Any, names: Sequence[str]) -> Fault:
        """Start an incarnation where none runs (idempotent, like the pidfile check)."""
        started = [n for n in names if self.world.start(n)]
        return Fault(kind="start", detail={"started": started},
                     commands={n: ["sim: start ember-node"] for n in started})  # fmt: skip

    def stop(self, control: Any, names: Sequence[str]) -> Fault:
        """SIGTERM."""
        stopped = [n for n in names if self.world.stop(n)]
        return Fault(kind="stop", detail={"stopped": stopped},
                     commands={n: ["sim: SIGTERM"] for n in stopped})  # fmt: skip

    def kill(self, control: Any, names: Sequence[str]) -> Fault:
        """SIGKILL and a crash of the node's disk (what was not fsynced is lost)."""
        pids: dict[str, list[int]] = {}
        commands: dict[str, list[str]] = {}
        for name in names:
            node = self.world.nodes[name]
            if not node.running:
                continue
            pids[name] = [node.incarnations]
            lost = self.world.kill(name)
            commands[name] = [
                f"sim: SIGKILL {name}#{node.incarnations}",
                "sim: disk crash: " + ("; ".join(lost) or "nothing unsynced"),
            ]
        return Fault(kind="kill", detail={"pids": pids}, commands=commands)

    def pause(self, control: Any, names: Sequence[str]) -> Fault:
        """SIGSTOP."""
        pids = {n: [self.world.nodes[n].incarnations] for n in names if self.world.pause(n)}
        return Fault(
            kind="pause",
            detail={"pids": pids},
            commands={n: [f"sim: SIGSTOP {n}#{p[0]}"] for n, p in pids.items()},
        )

    def resume(self, control: Any, names: Sequence[str]) -> Fault:
        """SIGCONT."""
        resumed = [n for n in names if self.world.resume(n)]
        return Fault(kind="resume", detail={"resumed": resumed},
                     commands={n: ["sim: SIGCONT"] for n in resumed})  # fmt: skip

    # -- reads -----------------------------------------------------------------

    def status(self, name: str) -> dict[str, Any] | None:
        """What GET /admin/status answers; None where no answer would come."""
        runtime = self.world.runtime(name)
        return runtime.status() if runtime is not None else None

    def keep_config(self, name: str, failpoint: str) -> None:
        """The node's next incarnation starts with its failpoints (the daemon's
        config, as `EmberDB.keep_config` writes it on a host)."""
        node = self.world.nodes[name]
        node.config = replace(node.config, failpoints=dict(self.sticky.get(name, {})))

    def set_failpoint(self, name: str, failpoint: str, params: Mapping[str, Any] | None) -> None:
        """As POST / DELETE /admin/failpoints/<failpoint> would; DBError if refused."""
        from ember.failpoints import FailpointError

        runtime = self.world.runtime(name)
        if runtime is None:
            raise DBError(f"{name} refused failpoint {failpoint} (node {self.world.state(name)})")
        try:
            if params is None:
                runtime.failpoints.disable(failpoint)
            else:
                runtime.failpoints.enable(failpoint, dict(params))
        except FailpointError as err:
            raise DBError(f"{name} refused failpoint {failpoint}: {err}") from None
        self.remember_failpoint(name, failpoint, params)

    def wait_healthy(
        self, names: Sequence[str], timeout_s: float, gone: Gone | None = None
    ) -> None:
        raise DBError("the simulated db waits with wait_healthy_async (no blocking sleeps)")

    # -- over the simulated network --------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        """Close the harness's HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def http_answer(
        self, url: str, method: str = "GET", body: Any = None, timeout_s: float = 2.0
    ) -> Answer:
        """`harness.nodehttp.http_answer` over the simulated network."""
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with self._http().request(method, url, json=body, timeout=timeout) as resp:
                if resp.status >= 400:
                    return refused(resp.status, await resp.read())
                doc = await resp.json(content_type=None)
        except TimeoutError:
            return no_answer(timeout_s)
        except (aiohttp.ClientError, OSError) as err:
            return Answer(None, f"unreachable ({err})")
        except ValueError:
            return NOT_JSON
        return decoded(doc)

    async def http_json(
        self, url: str, method: str = "GET", body: Any = None, timeout_s: float = 2.0
    ) -> dict[str, Any] | None:
        """`harness.nodehttp.http_json` over the simulated network."""
        return (await self.http_answer(url, method, body, timeout_s)).doc

    async def wait_healthy_async(self, names: Sequence[str], timeout_s: float) -> None:
        """`EmberDB.wait_healthy`: every node answers, every group led, no rebalance moving."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        urls = self.urls()
        while True:
            answers = [await self.http_json(urls[n] + "/health", timeout_s=1) for n in names]
            down = [n for n, a in zip(names, answers, strict=True) if a is None]
            want = set(self.groups()) | ({"meta"} if self.control_plane else set())
            leaderless = [] if down else sorted(want - set(self.leaders(names)))
            moving = [] if down or leaderless else await self.rebalancing_async(urls[names[0]])
            if not down and not leaderless and not moving:
                return
            if loop.time() > deadline:
                raise not_healthy(timeout_s, down, leaderless, moving)
            await asyncio.sleep(HEALTH_POLL_S)

    async def report_applied_async(self, names: Sequence[str]) -> list[str]:
        """`EmberDB.report_applied` over the simulated network."""
        urls = self.urls()
        missing = []
        for n in names:
            if (
                await self.http_json(urls[n] + REPORT_APPLIED, "POST", {}, timeout_s=ADMIN_CALL_S)
                is None
            ):
                missing.append(n)
        return missing

    async def rebalancing_async(self, url: str) -> list[str]:
        """`EmberDB.rebalancing` over the simulated network."""
        from harness.db import SETTLE_POLL_S

        if not self.zone_partitions:
            return []
        moving: set[str] = set()
        for i in range(2):
            doc = await self.http_json(url + "/admin/assignments", timeout_s=ADMIN_CALL_S)
            if doc is None:
                return ["unreadable"]
            moving |= in_flight(doc)
            if moving:
                break
            if i == 0:
                await asyncio.sleep(SETTLE_POLL_S)
        return sorted(moving)

    async def setup_async(self, workloads: Sequence[str]) -> None:
        """`EmberDB.setup` over the simulated network."""
        body = self.zone_request(workloads)
        if body is None:
            return
        problems: dict[str, str] = {}
        for name, url in self.urls().items():
            got = await self.http_answer(f"{url}/admin/zones/default", "POST", body, timeout_s=10)
            if self.zone_made(body, got, name, problems):
                return
        raise DBError(zone_refused(problems))

    def collect(self, control: Any, names: Sequence[str], run: RunDir) -> list[str]:
        """Copy each node's ember.log and events.jsonl into the run."""
        missing = []
        for name in names:
            run.node_dir(name).mkdir(parents=True, exist_ok=True)
            root = self.world.nodes[name].root
            for src, dst in ((root / "ember.log", run.log(name)),
                             (root / "data" / "events.jsonl", run.events(name))):  # fmt: skip
                if src.exists():
                    shutil.copyfile(src, dst)
                else:
                    missing.append(f"{name}:{src.name} (never written)")
        return missing
