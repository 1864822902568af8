"""The placement driver never names a new primary while the old one may still
act (INVARIANTS M9): a holder it cannot reach keeps the lease until the key
has stayed unchanged for a lease plus the margin by the driver's clock; a
holder that renews keeps it; a reachable holder outside stable is revoked
first."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from ember.placement import driver as driver_module
from ember.placement.driver import PlacementDriver
from ember.rebalance.keys import key
from ember.rebalance.listener import lease_key
from tests.rebalance.fakes import FakeMeta

LEASE_S = 0.4
KEY = lease_key("default", 0)
KV = {key("default", 0, "stable"): {"value": ["n1", "n2", "n3"]}}


class _Peers:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def call(self, node: str, _method: str, path: str, *_: Any, **__: Any) -> Any:
        self.calls.append((node, path))
        return 200, {"ok": True}


def _driver(alive: set[str]) -> tuple[PlacementDriver, FakeMeta, _Peers]:
    meta, peers = FakeMeta(), _Peers()
    runtime = SimpleNamespace(id="n3", groups={}, audit=SimpleNamespace(record=lambda *a: None))
    driver = PlacementDriver(runtime, meta, peers)  # type: ignore[arg-type]
    driver._alive = alive

    async def acting(_act: str, _p: int | None = None) -> None:
        return None

    driver._acting = acting  # type: ignore[method-assign]
    return driver, meta, peers


@pytest.fixture(autouse=True)
def _short_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "PRIMARY_LEASE_S", LEASE_S)


def test_an_unreachable_holder_keeps_its_lease_until_it_is_stale() -> None:
    async def scenario() -> None:
        driver, meta, peers = _driver(alive={"n2", "n3"})  # n1, the holder, is cut off
        held = meta.put(KEY, {"holder": "n1"})
        assert await driver._lease(None, 0, KV, 0.0) is None  # type: ignore[arg-type]
        await asyncio.sleep(LEASE_S)  # less than a lease plus the margin
        assert await driver._lease(None, 0, KV, 0.0) is None  # type: ignore[arg-type]
        assert meta.kv[KEY][1] == held, "the key moved while its holder may act"
        assert peers.calls == []
        await asyncio.sleep(LEASE_S * 0.3)
        assert await driver._lease(None, 0, KV, 0.0) == "n2"  # type: ignore[arg-type]
        assert meta.kv[KEY][0]["holder"] == "n2"
        assert peers.calls == [("n2", "/internal/primary/grant")]

    asyncio.run(scenario())


def test_a_renewing_holder_keeps_its_lease_and_is_granted_once() -> None:
    async def scenario() -> None:
        driver, meta, peers = _driver(alive={"n1", "n2", "n3"})
        meta.put(KEY, {"holder": "n1"})
        for _ in range(4):
            assert await driver._lease(None, 0, KV, 0.0) == "n1"  # type: ignore[arg-type]
            await asyncio.sleep(LEASE_S / 2)
            meta.put(KEY, {"holder": "n1"})  # its renewal
        # A driver that did not grant it (a failover) grants it once, without a write.
        assert peers.calls == [("n1", "/internal/primary/grant")]

    asyncio.run(scenario())


def test_a_reachable_holder_outside_stable_is_revoked_first() -> None:
    async def scenario() -> None:
        driver, meta, peers = _driver(alive={"n1", "n2", "n3", "n4"})
        meta.put(KEY, {"holder": "n4"})
        assert await driver._lease(None, 0, KV, 0.0) == "n1"  # type: ignore[arg-type]
        assert peers.calls == [("n4", "/internal/primary/revoke"),
                               ("n1", "/internal/primary/grant")]  # fmt: skip

    asyncio.run(scenario())
