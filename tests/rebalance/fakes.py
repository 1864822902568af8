"""A metastore of one dict for the primary agent's unit tests: gets and
guarded puts with revisions, and an outage switch."""

from __future__ import annotations

from typing import Any

from ember.metastore.client import MetaUnavailable


class FakeMeta:
    """What `PrimaryAgent` asks of `MetaClient`: get, range, and invoke
    with mod-revision guards, puts and deletes."""

    def __init__(self) -> None:
        self.revision = 0
        self.kv: dict[str, tuple[Any, int]] = {}  # key -> (value, mod revision)
        self.down = False
        self.down_for = 0  # the next this many reads fail, as a partition would
        self.invokes = 0

    def put(self, key: str, value: Any, revision: int | None = None) -> int:
        """Write as another node would (the driver), at `revision` if given."""
        self.revision = max(self.revision + 1, revision or 0)
        self.kv[key] = (value, self.revision)
        return self.revision

    def _reachable(self) -> None:
        if self.down or self.down_for > 0:
            self.down_for = max(0, self.down_for - 1)
            raise MetaUnavailable("metastore get failed: TimeoutError()", "not-applied")

    async def get(self, key: str) -> dict[str, Any]:
        self._reachable()
        value, mod = self.kv.get(key, (None, 0))
        return {"value": value, "mod_revision": mod, "revision": self.revision}

    async def invoke(self, spec: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise MetaUnavailable("no leader", "not-applied")
        self.invokes += 1
        held = all(self.kv.get(g["key"], (None, 0))[1] == g["value"] for g in spec["if"])
        if not held:
            return {"succeeded": False, "revision": self.revision}
        self.revision += 1
        for op in spec["then"]:
            if op.get("op") == "delete":
                self.kv.pop(op["key"], None)
            else:
                self.kv[op["key"]] = (op["value"], self.revision)
        return {"succeeded": True, "revision": self.revision}

    async def range(self, prefix: str) -> dict[str, Any]:
        self._reachable()
        kvs = [{"key": k, "value": v, "mod_revision": mod}
               for k, (v, mod) in sorted(self.kv.items()) if k.startswith(prefix)]  # fmt: skip
        return {"kvs": kvs, "revision": self.revision}
