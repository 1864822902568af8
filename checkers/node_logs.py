"""What the nodes' own logs say went wrong (`logs`): Jepsen's log-file-pattern,
read by level rather than by a pattern per test.

Theory of operation. ember logs at ERROR or CRITICAL only where its code met
what it was written never to meet: an exception no handler expected
(`log.exception`: an HTTP handler's internal error, a failed placement tick or
rebalance job, a Raft message that could not be handled), a frame it cannot
parse, a future whose exception nobody retrieved (asyncio's own ERROR; in the
simulator, its loop's). Faults do not excuse one: a partition, a kill or a
pause is what ember is built to survive, so a correct run logs none. Each
such line is an `error-logged` anomaly, with the traceback's last line when
one follows. A Python traceback outside any log line (the process died of it,
printed to stderr, which the log captures) is `uncaught-exception`; for etcd,
a Go `panic:` or `fatal error:` (the runtime's), or a line at zap's panic
level, is the same. etcd logs `error` for what faults cause (a peer
unreachable) and exits through zap's fatal or capnslog's critical level for
what its operator got wrong (a flag, a data dir of a removed member), so
only panics are read from its logs, as Jepsen's etcd test reads them.

Exempt: what the harness asked for, a `crash` failpoint's "failpoint crash at
..." line. Known upstream defects (KNOWN_UPSTREAM: a db's own open bug, by
the words of its panic) are not counted against the run but named, with
their issue, in the figures (`known_upstream`) and the run's summary: the
harness saw them and says so, and a run is not failed for a bug its
maintainers already track. Input: each node's collected log (nodes/<n>/ember.log, whatever
the db), read by `load_logs`; a run without logs does not select the checker.
The figures count every node's lines by level, so a report shows the warnings
too, which never decide anything.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import msgspec

from checkers.api import UNKNOWN, Anomaly, CheckContext, CheckerResult, verdict

# ember's format (ember/server.py): "2026-01-01 00:00:12,035 ERROR ember.sim.loop: ..."
_EMBER_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) (\S+?): (.*)$")
# etcd's capnslog, before zap takes over: "2026-12-04 16:43:37.883839 E | etcdmain: ..."
_CAPNSLOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ ([A-Z]) \| (.*)$")
_ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})
_ZAP_PANIC = frozenset({"panic", "dpanic"})
_GO_DEATH = ("panic: ", "fatal error: ")
_TRACEBACK = "Traceback (most recent call last):"
_ASKED_FOR = ("failpoint crash at ",)  # ember/runtime/node.py `_maybe_crash`
MAX_ANOMALIES_PER_NODE = 20  # the rest are counted in the figures


class KnownIssue(msgspec.Struct, frozen=True):
    """An upstream defect, known by words its log line holds."""

    words: str
    issue: str
    what: str


KNOWN_UPSTREAM = (
    KnownIssue(
        "failed to find local ID in cluster members",
        "https://github.com/etcd-io/etcd/issues/21966",
        "a member being removed panics when a Maintenance/Status call races its removal "
        "(exit 2 instead of a clean exit); the harness polls every member's status",
    ),
)


def known_issue(text: str) -> KnownIssue | None:
    """The known upstream defect a finding's text names, if any."""
    return next((k for k in KNOWN_UPSTREAM if k.words in text), None)


def load_logs(run_dir: str | Path) -> dict[str, list[str]] | None:
    """Each node's log as lines (nodes/<n>/ember.log), or None when the run
    kept none (a bare history.jsonl, an imported history)."""
    nodes = Path(run_dir) / "nodes"
    if not nodes.is_dir():
        return None
    logs = {}
    for path in sorted(nodes.glob("*/ember.log")):
        logs[path.parent.name] = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return logs or None


class _Finding(msgspec.Struct):
    kind: str
    line: int  # 1-based, in the node's log
    text: str


def _cause(lines: list[str], start: int) -> tuple[str, int]:
    """The exception line ending a traceback that starts at `start`, and the
    index after the traceback."""
    i = start + 1
    while i < len(lines) and not _EMBER_LINE.match(lines[i]) and not _CAPNSLOG_LINE.match(lines[i]):
        i += 1
    body = [ln for ln in lines[start + 1 : i] if ln.strip()]
    return (body[-1].strip() if body else ""), i


def _zap_level(line: str) -> str | None:
    if not line.startswith("{"):
        return None
    try:
        doc = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return None
    level = doc.get("level") if isinstance(doc, dict) else None
    return level if isinstance(level, str) else None


def scan(lines: list[str]) -> tuple[list[_Finding], Counter[str]]:
    """One node's log: what it says went wrong, and its lines counted by level."""
    found: list[_Finding] = []
    levels: Counter[str] = Counter()
    i = 0
    while i < len(lines):
        line = lines[i]
        ember = _EMBER_LINE.match(line)
        if ember:
            level, message = ember.group(1), ember.group(3)
            levels[level] += 1
            nxt = i + 1
            if level in _ERROR_LEVELS and not message.startswith(_ASKED_FOR):
                text = f"{level} {ember.group(2)}: {message}"
                if nxt < len(lines) and lines[nxt].startswith(_TRACEBACK):
                    cause, nxt = _cause(lines, nxt)
                    text += f" [{cause}]" if cause else ""
                found.append(_Finding("error-logged", i + 1, text))
            i = nxt
            continue
        capnslog = _CAPNSLOG_LINE.match(line)
        zap = None if capnslog else _zap_level(line)
        if capnslog:
            levels[capnslog.group(1)] += 1
        elif zap is not None:
            levels[zap.upper()] += 1
            if zap in _ZAP_PANIC:
                found.append(_Finding("uncaught-exception", i + 1, line[:500]))
        elif line.startswith(_TRACEBACK):
            cause, nxt = _cause(lines, i)
            found.append(_Finding("uncaught-exception", i + 1, cause or _TRACEBACK))
            i = nxt
            continue
        elif line.startswith(_GO_DEATH):
            found.append(_Finding("uncaught-exception", i + 1, line))
        i += 1
    return found, levels


class NodeLogsChecker:
    """Judges the nodes' logs (see the module doc)."""

    name = "logs"

    def check(self, ctx: CheckContext) -> CheckerResult:
        if ctx.logs is None:  # chosen by name for a run that kept no logs
            return CheckerResult(name=self.name, valid=UNKNOWN, error="no nodes/<n>/ember.log")
        logs = ctx.logs
        anomalies: list[Anomaly] = []
        by_level: dict[str, dict[str, int]] = {}
        per_node: dict[str, int] = {}
        known: dict[tuple[str, KnownIssue], list[int]] = {}
        for node, lines in sorted(logs.items()):
            found, levels = scan(lines)
            by_level[node] = dict(sorted(levels.items()))
            unexpected = []
            for f in found:
                issue = known_issue(f.text)
                if issue is None:
                    unexpected.append(f)
                else:
                    known.setdefault((node, issue), []).append(f.line)
            found = unexpected
            if found:
                per_node[node] = len(found)
            for f in found[:MAX_ANOMALIES_PER_NODE]:
                anomalies.append(Anomaly(kind=f.kind, message=f"{node} log line {f.line}: {f.text}",
                                         events=[{"node": node, "line": f.line}]))  # fmt: skip
        # A node whose log was not collected (the run's notes say why) is named,
        # as the audit checkers judge the events.jsonl there are.
        planned = ctx.plan.get("nodes")
        unread = sorted(set(planned) - set(logs)) if isinstance(planned, list) else []
        # Nodes were read in order, so `known` is in node order already.
        upstream = [{"node": node, "issue": issue.issue, "lines": lines}
                    for (node, issue), lines in known.items()]  # fmt: skip
        notes = [f"known upstream defect on {node} (log lines {', '.join(map(str, lines))}), "
                 f"not counted: {issue.issue}: {issue.what}"
                 for (node, issue), lines in known.items()]  # fmt: skip
        said = {"known_upstream": upstream, "notes": notes} if upstream else {}
        return verdict(self.name, anomalies, nodes=len(logs), by_level=by_level, found=per_node,
                       unread=unread, **said)  # fmt: skip
