"""The whole-system simulator's foundations: virtual time, processes, the wire, the disk."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ember.sim.hostos import Disk, SleepInSimulation, simulated_os
from ember.sim.loop import SimLoop, SimulationStalled, run_simulation
from ember.sim.procs import Proc


async def _serve(host: str, port: int, hits: list[str]) -> None:
    async def hello(request: web.Request) -> web.Response:
        hits.append(request.match_info["x"])
        await asyncio.sleep(0.5)
        return web.json_response({"x": request.match_info["x"]})

    app = web.Application()
    app.router.add_get("/h/{x}", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    await asyncio.Event().wait()


def _start(loop: SimLoop, name: str, index: int, hits: list[str]) -> Proc:
    proc = Proc(name, loop.wire.add_host(name, index))
    loop.spawn(proc, _serve(proc.host, 8001, hits))
    return proc


async def _recording_server(got: bytearray) -> None:
    """Port 7000: every byte received goes to `got`, a reset as " [reset]"."""

    async def on(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(100):
                got.extend(data)
        except OSError:
            got.extend(b" [reset]")

    await asyncio.start_server(on, "0.0.0.0", 7000)
    await asyncio.Event().wait()


def test_virtual_time_runs_a_day_of_timers_in_no_time() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        order = []
        for delay in (3.0, 1.0, 2.0, 86_400.0):
            loop.call_later(delay, lambda d=delay: order.append(d))
        await asyncio.sleep(86_400.5)
        return order

    assert run_simulation(SimLoop(1, max_time=2 * 86_400.0), main()) == [1.0, 2.0, 3.0, 86_400.0]


def test_aiohttp_over_the_wire_with_pause_resume_and_kill() -> None:
    hits: list[str] = []

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        n1 = _start(loop, "n1", 1, hits)
        await asyncio.sleep(0.1)
        seen = []
        async with aiohttp.ClientSession() as s:
            async with s.get("http://n1:8001/h/a") as r:
                seen.append((await r.json())["x"])
            loop.pause(n1)
            with pytest.raises(TimeoutError):
                async with s.get("http://n1:8001/h/b", timeout=aiohttp.ClientTimeout(total=2)):
                    pass
            assert hits == ["a"], "a paused server ran a handler"
            loop.resume(n1)
            await asyncio.sleep(0)
            async with s.get("http://n1:8001/h/c") as r:
                seen.append((await r.json())["x"])
            loop.kill(n1)
            with pytest.raises(aiohttp.ClientConnectorError):
                async with s.get("http://n1:8001/h/d"):
                    pass
        return seen

    assert run_simulation(SimLoop(2), main()) == ["a", "c"]
    assert hits == ["a", "b", "c"]  # b waited out the pause, as a SIGSTOPped server does


def test_a_cut_holds_bytes_until_healed_and_a_long_cut_resets() -> None:
    async def main() -> tuple[bytes, type[BaseException] | None]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        got = bytearray()
        a = Proc("a", loop.wire.add_host("a", 1))
        b = Proc("b", loop.wire.add_host("b", 2))
        loop.spawn(b, _recording_server(got))
        await asyncio.sleep(0.01)
        result: list[BaseException | None] = []

        async def client() -> None:
            _, writer = await asyncio.open_connection("b", 7000)
            writer.write(b"one ")
            await asyncio.sleep(0.1)
            loop.wire.cut("a", "b")
            writer.write(b"two ")
            await asyncio.sleep(2)
            assert bytes(got) == b"one "
            loop.wire.heal()
            writer.write(b"three")
            await asyncio.sleep(0.1)
            loop.wire.cut("a", "b")
            writer.write(b"lost")
            try:
                await asyncio.sleep(30)
                writer.write(b"more")
                await writer.drain()
                result.append(None)
            except OSError as exc:
                result.append(exc)

        await loop.spawn(a, client())
        return bytes(got), type(result[0]) if result and result[0] else None

    data, error = run_simulation(SimLoop(3), main())
    # "lost" never crossed the second cut: past the user timeout both ends reset.
    assert data == b"one two three [reset]"
    assert error is not None
    assert issubclass(error, OSError)


def test_a_killed_process_sends_nothing_after_its_reset() -> None:
    """The kill closes the dead process's coroutines, running their `finally`
    blocks: a write there must not reach the wire behind the reset."""

    async def main() -> tuple[bytes, int, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        got = bytearray()

        async def client() -> None:
            _, writer = await asyncio.open_connection("b", 7000)
            writer.write(b"alive")
            try:
                await asyncio.Event().wait()
            finally:
                writer.write(b"after death")  # runs at the kill, as the dead process

        a = Proc("a", loop.wire.add_host("a", 1))
        b = Proc("b", loop.wire.add_host("b", 2))
        loop.spawn(b, _recording_server(got))
        await asyncio.sleep(0.01)
        loop.spawn(a, client())
        await asyncio.sleep(0.1)
        before = loop.wire.sent_bytes
        loop.kill(a)
        after = loop.wire.sent_bytes
        await asyncio.sleep(0.1)
        return bytes(got), before, after

    got, before, after = run_simulation(SimLoop(4), main())
    assert got == b"alive [reset]"
    assert after == before  # the reset carries no bytes, and nothing followed it


def test_a_stalled_simulation_says_so() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationStalled):
        run_simulation(SimLoop(4), main())


def test_a_crash_keeps_what_was_synced_and_may_tear_the_rest(tmp_path: Path) -> None:
    loop = SimLoop(5)
    disk = Disk(random.Random(1), tear_probability=1.0)
    wal, state, never = tmp_path / "wal", tmp_path / "state", tmp_path / "never"
    with simulated_os(loop, disk, lambda proc, code: None):
        fd = os.open(wal, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"A" * 100)
        os.fsync(fd)
        os.write(fd, b"B" * 100)  # written, never synced
        os.close(fd)
        tmp = tmp_path / "state.tmp"
        tmp.write_bytes(b"synced state")
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, state)  # the durable size follows the rename
        never.write_bytes(b"x")
        with pytest.raises(SleepInSimulation):
            __import__("time").sleep(1)
    lost = disk.crash(tmp_path)
    assert 100 < wal.stat().st_size < 200, "tear_probability 1 keeps part of the unsynced tail"
    assert wal.read_bytes()[:100] == b"A" * 100
    assert state.read_bytes() == b"synced state"
    assert not never.exists()
    assert disk.torn == 1
    assert len(lost) == 2


def test_the_clock_is_virtual_only_inside(tmp_path: Path) -> None:
    import time

    loop = SimLoop(6)
    real = time.time()
    with simulated_os(loop, Disk(random.Random(1)), lambda proc, code: None):
        assert time.monotonic() == 0.0
        assert abs(time.time() - real) > 1000  # the simulation's own epoch
    assert abs(time.time() - real) < 60


def test_a_library_that_bound_the_clock_to_its_own_name_reads_virtual_time() -> None:
    """aiohttp's connector does `from time import monotonic` and judges keep-alive
    by it: on the real clock, a loaded machine closed pooled connections that
    an idle one kept, and one seed gave two histories."""
    import aiohttp.connector

    loop = SimLoop(9)
    real = aiohttp.connector.monotonic
    with simulated_os(loop, Disk(random.Random(1)), lambda proc, code: None):
        assert aiohttp.connector.monotonic() == 0.0
    assert aiohttp.connector.monotonic is real


def test_garbage_is_collected_on_the_loop_schedule_only() -> None:
    """A finalizer that acts (aiohttp closes a leaked connection from `__del__`)
    must run at the same handle in every process, so the automatic collector
    is off during a run and the loop collects every GC_HANDLES handles."""
    import gc

    from ember.sim.loop import GC_HANDLES

    loop = SimLoop(10)
    freed_at: list[int] = []

    class Leaky:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

        def __del__(self) -> None:
            freed_at.append(loop.handles_run)

    async def main() -> bool:
        enabled = gc.isenabled()
        Leaky()
        for _ in range(GC_HANDLES * 2):
            await asyncio.sleep(0)
        return enabled

    assert run_simulation(loop, main()) is False
    assert gc.isenabled()
    assert freed_at
    assert freed_at[0] % GC_HANDLES < 64  # at a collection point, not before


@pytest.mark.parametrize("killed_in_fsync", [True, False])
def test_an_fsync_in_a_thread_counts_only_when_the_thread_completes(
    tmp_path: Path, killed_in_fsync: bool
) -> None:
    """ember's WAL commit runs in its executor: a kill while it runs loses the round."""
    wal = tmp_path / "wal"
    loop = SimLoop(7)
    disk = Disk(random.Random(1), tear_probability=0.0)

    def commit() -> None:
        fd = os.open(wal, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"round")
        os.fdatasync(fd)
        os.close(fd)

    async def node() -> None:
        await asyncio.get_running_loop().run_in_executor(None, commit)

    async def main() -> None:
        proc = Proc("n1", loop.wire.add_host("n1", 1))
        task = loop.spawn(proc, node())
        if killed_in_fsync:
            await asyncio.sleep(0)  # the thread ran, its future has not completed
            loop.kill(proc)
        else:
            await task

    with simulated_os(loop, disk, lambda proc, code: None):
        run_simulation(loop, main())
    disk.crash(tmp_path)
    assert wal.exists() is not killed_in_fsync


def test_other_threads_keep_the_real_clock_and_sleep() -> None:
    """A thread a library left running (py4j's in CI) must not sleep into SleepInSimulation."""
    import threading
    import time

    loop = SimLoop(8)
    seen: list[float] = []
    with simulated_os(loop, Disk(random.Random(1)), lambda proc, code: None):
        worker = threading.Thread(target=lambda: (time.sleep(0.001), seen.append(time.time())))
        worker.start()
        worker.join()
        assert time.monotonic() == 0.0
    assert seen
    assert abs(seen[0] - time.time()) < 60


def test_a_request_and_a_reset_held_by_a_paused_server_end_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client writes a request and dies while the server is stopped; on
    resume the server accepts, reads the request, then the reset. As from
    asyncio's transports, aiohttp's handler task runs before it hears of the
    loss; told at once, it woke to a torn-down connection and died on an
    assert ("Task exception was never retrieved" in every simulated run)."""
    import gc
    import logging

    hits: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        n1 = _start(loop, "n1", 1, hits)
        await asyncio.sleep(0.1)
        loop.pause(n1)
        client = Proc("c", loop.wire.add_host("c", 2))

        async def ask() -> None:
            async with aiohttp.ClientSession() as s, s.get("http://n1:8001/h/x"):
                pass

        loop.spawn(client, ask())
        await asyncio.sleep(0.1)
        loop.kill(client)
        await asyncio.sleep(0.1)
        loop.resume(n1)
        await asyncio.sleep(1)
        gc.collect()  # a failed task reports itself when it is collected
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.ERROR):
        run_simulation(SimLoop(5), main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


class _ClientProtocol(asyncio.Protocol):
    """A client's protocol, as aiohttp's: a class with instance attributes."""


def test_a_connection_left_open_by_a_killed_process_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp reports a connection it finds unclosed when collected. One
    that a killed process held is what a kill is (sim sweeps logged it as an
    ERROR in about one run in a hundred); one a live process dropped unclosed
    is a leak, and stays an error."""
    import logging

    from aiohttp.connector import Connection

    hits: list[str] = []
    reports: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        _start(loop, "n1", 1, hits)
        await asyncio.sleep(0.1)
        dead, live = (Proc(name, loop.wire.add_host(name, i)) for i, name in ((2, "d"), (3, "l")))

        async def dial() -> None:
            session = aiohttp.ClientSession()
            _, protocol = await loop.create_connection(_ClientProtocol, "n1", 8001)
            conn = Connection(session.connector, None, protocol, loop)  # type: ignore[arg-type]
            reports.append({"message": "Unclosed connection", "client_connection": conn})
            await session.close()

        for proc in (dead, live):
            loop.spawn(proc, dial())
        await asyncio.sleep(0.1)
        loop.kill(dead)
        for context in reports:
            loop.call_exception_handler(context)
            context["client_connection"]._protocol = None  # reported once, by us

    with caplog.at_level(logging.DEBUG, logger="ember.sim.loop"):
        run_simulation(SimLoop(6), main())
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "Unclosed" in r.getMessage()]
    assert sorted(said) == [
        ("DEBUG", "simulation: Unclosed connection, left by a killed process"),
        ("ERROR", "simulation: Unclosed connection"),
    ]
