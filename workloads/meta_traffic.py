"""Which metastore traffic a plan sends beyond get / put / invoke (issue 24).

Theory of operation. etcd's KV and watch guarantees (checkers/watches.py,
G1-G9) are reached only by traffic that goes where they live: deletes,
compactions, reads and watches at past, compacted and future revisions,
watches on single keys, slow consumers, progress notifications. Each kind
is switched on by name in the plan (option `meta_traffic`, flag
`--meta-traffic`), so a run says what it sent and a replay sends it again:

- `delete`: deletes of single keys;
- `range`: snapshot reads of the prefix at a recent past revision;
- `compact`: compactions at a recent revision, now and then and right
  after a delete, never past where the chain of watches resumes
  (`Known.chain_from`): a compaction that refuses the chain's resume
  deletes the only record of the writes in between, and with it the
  ranking of every later revision (checkers/meta_ranks.py). Refused and
  cut-off watches are the probes' to test;
- `compare-mod`: transactions that also compare a key's mod revision. On
  ember the control plane writes the same metastore, so its revisions jump
  by writes the linearizability model never sees: the check moves each
  compared revision onto the watch record's ranks (checkers/meta_ranks.py),
  settles one past the record by the transaction's outcome, and calls the
  metastore's part unknown when it has no record and such a transaction's
  outcome is unknown (checkers/compose.py);
- `watch-now`, `watch-past`, `watch-compaction`, `watch-compacted`,
  `watch-future`: probe watches started at the current revision, a past
  one, the last compaction's, one below it (to be refused, naming the
  compact revision) and one not written yet. They run back to back on a
  thread of their own (kind `probe`), beside the resuming chain of watches:
  a chain that waited for probes fell behind a compaction and lost the
  record of the writes in between (checkers/meta_ranks.py);
- `watch-key`: probes of a single key rather than the prefix;
- `watch-slow`: watches whose consumer reads the stream slowly;
- `resend` (ember only): writes carry the worker's client session
  (ember/metastore/sessions.py) and one whose outcome is unknown is sent
  again with the same session numbers, to the next node, up to RESENDS
  times, RESEND_PAUSE_S and then twice that apart (time for an election);
  its completion is what the last attempt was answered (unknown if any
  attempt's outcome was and none answered). Plain puts then write values
  no other write has, so a put applied twice is seen again after a later
  write to its key, which no order explains: the linearizability checker
  judges whether resent writes applied once. etcd's API has no client
  sessions.

The op stream and the watch stream learn from different completions; they
share a `Known` (the newest revision any completion reported, the highest
compaction acknowledged, where the chain of watches resumes, the newest
revision a watch saw), so a watch can aim at a compaction a client made and
a compaction spares the chain.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KINDS = (
    "delete", "range", "compact", "compare-mod", "watch-now", "watch-past",
    "watch-compaction", "watch-compacted", "watch-future", "watch-key", "watch-slow", "resend",
)  # fmt: skip
PROBES = ("watch-now", "watch-past", "watch-compaction", "watch-compacted", "watch-future")
# What ember's plans sent before the kinds could be chosen: their default still.
EMBER_DEFAULT = ("delete", "range")
EMBER_KINDS = KINDS
ETCD_KINDS = tuple(k for k in KINDS if k != "resend")  # see resend above
RESENDS = 2  # attempts after the first, for a write whose outcome is unknown
RESEND_PAUSE_S = 0.5  # before the first resend; twice that before the second
SLOW_SHARE = 0.3  # of watches, when slow consumers are on
REFUSED_PAUSE_S = 0.25  # before the next probe, after one the store refused at once
SLOW_READ_S = 0.05  # a slow consumer's pause after each line it reads
COMPACT_WEIGHT = 0.03


class TrafficError(ValueError):
    """A `meta_traffic` naming a kind there is none of."""


def parse(option: Any, default: Iterable[str]) -> frozenset[str]:
    """The kinds a plan's `meta_traffic` switches on (absent: `default`)."""
    if option is None:
        return frozenset(default)
    if isinstance(option, str):
        option = [] if option in ("", "none") else list(KINDS) if option == "all" else \
            [k.strip() for k in option.split(",")]  # fmt: skip
    if not isinstance(option, list | tuple) or not all(isinstance(k, str) for k in option):
        raise TrafficError(f"meta_traffic must be a list of kinds, got {option!r}")
    unknown = sorted(set(option) - set(KINDS))
    if unknown:
        raise TrafficError(f"unknown metastore traffic {', '.join(unknown)}; known: "
                           f"{', '.join(KINDS)}, or all / none")  # fmt: skip
    return frozenset(option)


@dataclass
class Known:
    """What completions told the generators (module doc)."""

    newest: int = 0
    compacted: int = 0
    chain_from: int | None = None  # the chain's next `from`; None: no chain
    watched: int = 0  # the newest revision a watch delivered or a progress line named


def compact_op_value(r: random.Random, known: Known) -> dict[str, int]:
    """A compaction a little behind the newest revision and past the last one
    (etcd refuses a compaction at or below the current point), but not past
    the chain's resume (module doc): there it compacts nothing new."""
    target = max(known.compacted + 1, known.newest - r.randrange(1, 8))
    if known.chain_from is not None:
        target = min(target, known.chain_from)
    return {"revision": max(1, min(target, known.newest))}


def mod_condition(r: random.Random, key: str, known: Known) -> dict[str, Any]:
    """A comparison of `key`'s mod revision with one near the newest."""
    return {"key": key, "target": "mod_revision", "op": r.choice(("eq", "lt", "gt")),
            "value": max(0, known.newest - r.randrange(0, 6))}  # fmt: skip


def probing(traffic: frozenset[str]) -> bool:
    """Whether `traffic` sends probe watches (on their own thread)."""
    return any(k in traffic for k in PROBES)


def probe_spec(r: random.Random, traffic: frozenset[str], known: Known,
               prefix: str, keys: list[str]) -> dict[str, Any]:  # fmt: skip
    """A probe watch's value, of one of the probe kinds in `traffic`."""
    kind = r.choice([k for k in PROBES if k in traffic])
    newest = max(known.newest, known.watched)
    spec: dict[str, Any] = {"prefix": prefix}
    if "watch-key" in traffic and r.random() < 0.5:
        spec = {"key": r.choice(keys)}
    start = _probe_start(r, kind, known, newest)
    if start is not None:  # None: watch-now, no `from` (the store's current revision)
        spec["from"] = start
    spec["probe"] = kind.removeprefix("watch-")
    return spec


def _probe_start(r: random.Random, kind: str, known: Known, newest: int) -> int | None:
    """Where a probe of `kind` starts (module doc); None for the current revision."""
    if kind == "watch-now":
        return None
    if kind == "watch-compaction" and known.compacted > 0:
        return known.compacted
    if kind == "watch-compacted" and known.compacted > 1:
        return r.randrange(1, known.compacted)
    if kind == "watch-future":
        return newest + r.randrange(2, 10)
    # watch-past, and the compaction kinds before any compaction
    return max(1, known.compacted, newest - r.randrange(1, 20))
