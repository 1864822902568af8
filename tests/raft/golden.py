"""Golden interaction scripts, in the style of etcd-io/raft's testdata.

A script is a sequence of blocks:

    # comments are kept
    command arg key=value ...
    ----
    expected output (one or more lines; "ok" when there is none)
    <blank line>

The output is printed by ember.raft.describe, so these scripts pin the
core's observable behaviour: messages, audit events, results and status.
Run with REWRITE_GOLDEN=1 to regenerate the expected output after an
intended change (then review the diff).

Commands:
    cluster n1 n2 n3 [extra=n4,n5] [margin=N] [retries=N] [max_append=N]
    elect n1                 tick n1 until it leads, delivering everything
    propose n1 data [count=N]
    change n1 peers=a,b,c [learners=x] token=N [term=T]
    tick [node] [times=N]    tick one node or all, delivering after each
    deliver [msgs]           deliver until quiet; `msgs` prints them
    down n4 / up n4          a down node neither ticks nor sends nor receives
    partition a,b c,d / heal
    drop stable-config|config|none   lose appends carrying such entries
    compact n1 index data
    status                   one line per node
    log n2                   the entries on n2's disk
"""

from __future__ import annotations

import os
from pathlib import Path

from ember.raft import AppendEntries, RaftConfig, RaftError
from ember.raft.describe import describe_entry, describe_event, describe_result, describe_status

from .driver import Net


def parse(text: str) -> list[tuple[list[str], str, list[str]]]:
    """Blocks of (comment lines, command, expected output lines)."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        comments = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
            if lines[i].startswith("#"):
                comments.append(lines[i])
            i += 1
        if i >= len(lines):
            break
        cmd = lines[i]
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise ValueError(f"line {i + 2}: expected '----' after command {cmd!r}")
        i += 2
        out = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        blocks.append((comments, cmd, out))
    return blocks


def render(blocks: list[tuple[list[str], str, list[str]]]) -> str:
    """The script text for `blocks` (inverse of parse)."""
    parts = []
    for comments, cmd, out in blocks:
        parts.append("\n".join([*comments, cmd, "----", *out]))
    return "\n\n".join(parts) + "\n"


class Runner:
    """Runs commands against one Net and describes what happened."""

    def __init__(self) -> None:
        self.net: Net | None = None
        self.seen: dict[str, int] = {}
        self.results_seen = 0

    def run(self, cmd: str) -> list[str]:
        """Run one command line; return its output lines."""
        words = cmd.split()
        args = [w for w in words[1:] if "=" not in w]
        kw = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        out = getattr(self, f"cmd_{words[0].replace('-', '_')}")(args, kw)
        out += self.news()
        return out or ["ok"]

    def news(self) -> list[str]:
        """Events and change results produced since the last command."""
        if self.net is None:
            return []
        self.net.drain_all()  # collect what the command produced (nothing is delivered)
        out = []
        for node in sorted(self.net.events):
            evs = self.net.events[node]
            out += [f"{node}: {describe_event(e)}" for e in evs[self.seen.get(node, 0) :]]
            self.seen[node] = len(evs)
        out += [f"result {describe_result(r)}" for r in self.net.results[self.results_seen :]]
        self.results_seen = len(self.net.results)
        return out

    @property
    def n(self) -> Net:
        assert self.net is not None, "run `cluster` first"
        return self.net

    def cmd_cluster(self, args: list[str], kw: dict[str, str]) -> list[str]:
        cfg = RaftConfig(
            catchup_margin=int(kw.get("margin", 1000)),
            catchup_max_retries=int(kw.get("retries", 3)),
            max_entries_per_append=int(kw.get("max_append", 64)),
        )
        self.net = Net(args, config=cfg)
        for extra in filter(None, kw.get("extra", "").split(",")):
            self.net.add(extra)
        return []

    def cmd_elect(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.elect(args[0])
        return []

    def cmd_propose(self, args: list[str], kw: dict[str, str]) -> list[str]:
        node = self.n.nodes[args[0]]
        count = int(kw.get("count", 1))
        idx = [node.propose(f"{args[1]}{i if count > 1 else ''}".encode()) for i in range(count)]
        return [f"index {idx[0]}" + (f"..{idx[-1]}" if count > 1 else "")]

    def cmd_change(self, args: list[str], kw: dict[str, str]) -> list[str]:
        node = self.n.nodes[args[0]]
        peers = [p for p in kw.get("peers", "").split(",") if p]
        learners = [p for p in kw.get("learners", "").split(",") if p]
        term = int(kw["term"]) if "term" in kw else None
        try:
            t = node.change_peers(peers, learners, token=int(kw["token"]), term=term)
        except RaftError as err:
            return [f"error {type(err).__name__}: {err}"]
        return [f"ticket {t.id} token={t.token} done={t.done}"]

    def cmd_tick(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.tick(args[0] if args else None, times=int(kw.get("times", 1)))
        return []

    def cmd_deliver(self, args: list[str], kw: dict[str, str]) -> list[str]:
        before = len(self.n.log)
        self.n.deliver()
        return self.n.log[before:] if "msgs" in args else []

    def cmd_down(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.down.update(args)
        return []

    def cmd_up(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.down.difference_update(args)
        return []

    def cmd_partition(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.partition(args[0].split(","), args[1].split(","))
        return []

    def cmd_heal(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.heal()
        return []

    def cmd_drop(self, args: list[str], kw: dict[str, str]) -> list[str]:
        what = args[0]

        def drop(m: object) -> bool:
            if not isinstance(m, AppendEntries) or what == "none":
                return False
            confs = [e.conf for e in m.entries if e.conf is not None]
            return any(what == "config" or not c.is_joint for c in confs)

        self.n.drop = drop
        return []

    def cmd_compact(self, args: list[str], kw: dict[str, str]) -> list[str]:
        self.n.nodes[args[0]].compact(int(args[1]), args[2].encode())
        return []

    def cmd_status(self, args: list[str], kw: dict[str, str]) -> list[str]:
        return [describe_status(n.status()) for _, n in sorted(self.n.nodes.items())]

    def cmd_log(self, args: list[str], kw: dict[str, str]) -> list[str]:
        disk = self.n.disks[args[0]]
        out = []
        if disk.snapshot is not None:
            meta = disk.snapshot.meta
            out.append(f"snapshot {meta.term}/{meta.index} data={disk.snapshot.data!r}")
        return out + [describe_entry(e) for e in disk.entries]


def run_script(path: Path) -> tuple[str, str]:
    """(expected text, actual text) of one script."""
    text = path.read_text()
    runner = Runner()
    blocks = parse(text)
    actual = [(comments, cmd, runner.run(cmd)) for comments, cmd, _ in blocks]
    return render(blocks), render(actual)


def rewrite_requested() -> bool:
    """Whether REWRITE_GOLDEN=1 asks to regenerate the expected output."""
    return os.environ.get("REWRITE_GOLDEN") == "1"
