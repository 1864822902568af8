"""The search for a linearization of one partition's history.

Theory of operation
-------------------
This is the Wing-Gong / Lowe search, depth first, with "just in time"
linearization and memoisation:

- The history becomes a time line of call and return events. A known
  operation is pending from its call to its return; an operation of unknown
  outcome (`info`) has no return: from its call on it may be linearized at
  any point, or never.
- A configuration is (position on the time line, model state, the set of
  pending known operations already linearized, the set of unknown ones
  used). The linearized set is a bitmask over "slots": each known operation
  gets the lowest slot free at its call, and frees it at its return, so
  masks stay as wide as the concurrency, not the history.
- Walking forward, nothing is chosen until a return event finds its
  operation not yet linearized (Lowe's just-in-time rule). That is a
  choice point. Its moves, tried in order: linearize the returning op now;
  "hide" it (below); or first linearize another pending op or fire an
  unknown op, then decide again. The last kind is computed lazily, only
  when the first two fail, and ranked: moves after which the returning
  read, or pending and upcoming reads, can be met without a reset first.
  Exhausting every move at a choice point is a dead end; the search
  backtracks.
- Pruning that keeps the search exact:
  * a pure operation (a read; a cas known to have failed) never changes the
    state, so it is linearized as soon as it is legal (at its call, or after
    any state change while it is pending): doing so never loses a
    linearization. Pure operations of unknown outcome are dropped, and so
    are unknown writes whose effect no check in the partition could see.
  * unknown operations with the same (f, key, input) are interchangeable:
    the search always uses the earliest-called unused one, so "which ones
    were used" is canonical; a configuration that used a superset of the
    unknown operations another visited one used, at the same position,
    state and mask, is dominated and skipped.
  * hiding: an always-legal op (a put, an append) placed just before a
    blind write (an "erase") has no visible effect. So an op pending when
    an erase was placed may, at its return, be "hidden" behind that erase
    after the fact; and an erase right after such an op, with nothing
    observed between, is never tried (hiding covers it). This replaces
    trying every subset of concurrent writes before each blind write.
  * look-ahead (model `viable`): a configuration is dead when a pending
    read, or one of the next reads to be called, can no longer be met by
    the writers still unplaced; switched on after the first dead end.
  * partial-order reduction: ops that commute with the returning op (other
    keys, in the whole-map model) are never placed before it.
  * memo: a choice point already explored (or dominated) is not explored
    again. The memo is capped; when full its older half is dropped, which
    costs repeated work but never correctness.
- Budget: the search raises `OutOfBudgetError` past its deadline, its memo and
  stack caps, or its RSS limit, and the caller reports "unknown" with how
  far it got.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import msgspec

from checkers.linearizability.models import ILLEGAL, Model
from checkers.linearizability.timeline import CALL as _CALL
from checkers.linearizability.timeline import Timeline
from checkers.linearizability.types import LinOp, Unplaceable

# Move kinds: place an op, fire an unknown op, hide an op, compute more moves.
_OP, _INST, _HIDE, _MORE = 0, 1, 2, 3


# How far ahead (in events) the next read may return and still be checked.
_LOOKAHEAD_EVENTS = 200
# How many events after a dead end the look-ahead stays on.
_LOOKAHEAD_AFTER_DEAD_END = 2000
# How many of the next reads to check.
_LOOKAHEAD_READS = 4


def _always_open(_op: LinOp) -> bool:
    """An is_open for writers already filtered to the unplaced ones."""
    return True


def _closed(_op: LinOp) -> bool:
    """An is_open for "no writer may help": used to rank moves."""
    return False


_EMPTY: frozenset[int] = frozenset()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MAX_REPORTED_STATES = 16
STEP_LIMIT = "step limit reached"


class OutOfBudgetError(Exception):
    """The search hit its time, memo or memory limit."""


def rss_bytes() -> int:
    """This process's resident set size, from /proc (0 where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class Budget(msgspec.Struct, frozen=True):
    """Limits for one search.

    `deadline` is on the monotonic clock (shared by all processes on Linux);
    `max_memo` caps the memo's entries; `max_rss_bytes` caps this process's
    resident memory (0: unchecked); `max_steps` caps choice points explored
    (None: unlimited), which lets the caller try every partition cheaply
    before spending the whole budget on a hard one.
    """

    deadline: float
    max_memo: int
    max_rss_bytes: int
    max_steps: int | None = None
    # The search's restart seed (Search's `seed`): carried here so pool
    # workers get it with the limits.
    seed: int = 0

    def check(self, steps: int) -> None:
        """Raise OutOfBudgetError when any limit is passed."""
        if self.max_steps is not None and steps > self.max_steps:
            raise OutOfBudgetError(STEP_LIMIT)
        if time.monotonic() > self.deadline:
            raise OutOfBudgetError("time limit reached")
        if self.max_rss_bytes and rss_bytes() > self.max_rss_bytes:
            raise OutOfBudgetError("memory limit reached")


class Outcome:
    """What a search found: verdict, figures and, when traced, report data."""

    def __init__(self) -> None:
        self.valid = True
        self.explored = 0
        self.memo_size = 0
        self.events_done = 0
        self.prefix: list[int] = []
        self.unplaceable: list[Unplaceable] = []
        # For a linearizable partition: op ids in linearization order.
        self.order: list[int] = []


class Search:
    """One depth-first search over a Timeline (see the module docstring)."""

    def __init__(
        self, model: Model, ops: list[LinOp], budget: Budget, *, trace: bool, seed: int = 0
    ) -> None:
        # A model may specialize itself to the history (metastore: the
        # revisions its known writes claim); the generic one is kept for none.
        bind = getattr(model, "bind", None)
        model = bind(ops) if bind is not None else model
        self.model = model
        self.tl = Timeline(model, ops)
        self.budget = budget
        self.trace = trace
        # 0: moves in rank order, ties by call; else ties broken at random
        # by this seed (a restart that explores the same tree in another order).
        self.rng = random.Random(seed) if seed else None
        self.memo: dict[tuple[int, Any, int, int], list[frozenset[int]]] = {}
        self.out = Outcome()
        self.steps = 0  # choice points opened, over every call of `run`
        self.check_mask = 1023  # budgets are checked every (mask + 1) steps
        # The current configuration.
        self.i = 0
        self.state: Any = model.init()
        self.mask = 0
        self.used = _EMPTY
        self.slot_op: list[int] = [-1] * self.tl.width
        self.n_inst = 0
        # Op ids placed on the current branch, and for each the id of the
        # erasing op it is hidden behind (None: placed where it stands).
        self.path: list[int] = []
        self.path_before: list[int | None] = []
        # Position at which the last erasing op was placed (-1: none yet),
        # and whether the last move placed an op that could instead be
        # hidden behind an erasing op placed next.
        self.erased_at = -1
        self.erased_op: int | None = None  # the id of that erasing op
        self.fresh = False
        # Look-ahead at reads not yet called costs more than it saves except
        # where the search thrashes: it is on for a stretch after a dead end.
        self.lookahead_until = -1
        # Choice points on the current branch: see _open_frame.
        self.stack: list[list[Any]] = []
        self._best_i = -1
        self._best_states: list[Any] = []

    def run(self) -> Outcome:
        """Search to a verdict, or raise OutOfBudgetError. After a step
        limit, calling `run` again (with a `budget` allowing more steps)
        resumes exactly where the search stopped: the limit is checked only
        once a move is made, when the loop's state is a fresh configuration."""
        n_events = len(self.tl.kind)
        while True:
            self._advance()
            if self.i >= n_events:
                self.out.events_done = n_events
                self.out.order = self._order()
                break
            self._open_frame()
            self.steps += 1
            if not self._next_child():
                self._fail()
                break
            if self.steps & self.check_mask == 0:
                if len(self.memo) > self.budget.max_memo:
                    self._shrink_memo()
                self.budget.check(self.steps)
        self.out.memo_size = len(self.memo)
        return self.out

    def _advance(self) -> None:
        """Walk forward through calls and already-linearized returns."""
        tl, model = self.tl, self.model
        kind, op_at, ops, slot, pure = tl.kind, tl.op_at, tl.ops, tl.slot, tl.pure
        slot_op = self.slot_op
        i, mask, n = self.i, self.mask, len(kind)
        while i < n:
            j = op_at[i]
            if kind[i] == _CALL:
                s = slot[j]
                if s < 0:
                    self.n_inst += 1
                else:
                    slot_op[s] = j
                    if pure[j] and model.step(self.state, ops[j]) is not ILLEGAL:
                        mask |= 1 << s
                        self.path.append(ops[j].id)
                        self.path_before.append(None)
            else:
                s = slot[j]
                if not mask & (1 << s):
                    break
                mask &= ~(1 << s)
                slot_op[s] = -1
            i += 1
        if i != self.i:
            self.fresh = False
        self.i, self.mask = i, mask

    def _greedy(self, state: Any, mask: int) -> int:
        """Linearize every pending pure op that is legal in `state`."""
        tl, model = self.tl, self.model
        for s, j in enumerate(self.slot_op):
            if j >= 0 and tl.pure[j] and not mask & (1 << s):
                op = tl.ops[j]
                if model.step(state, op) is not ILLEGAL:
                    mask |= 1 << s
                    self.path.append(op.id)
                    self.path_before.append(None)
        return mask

    def _hidden_mask(self) -> int:
        """Slots of pending ops that could be hidden behind the last erase."""
        tl, mask, erased_at = self.tl, self.mask, self.erased_at
        hidden = 0
        for s, j in enumerate(self.slot_op):
            if j >= 0 and tl.hideable[j] and tl.call_pos[j] < erased_at and not mask & (1 << s):
                hidden |= 1 << s
        return hidden

    def _seen(self) -> bool:
        """Record this choice point in the memo; True if it was explored."""
        key = (self.i, self.state, self.mask, self._hidden_mask())
        used = self.used
        known = self.memo.get(key)
        if known is None:
            self.memo[key] = [used]
            self.out.explored += 1
            return False
        for u in known:
            if u <= used:
                return True
        known[:] = [u for u in known if not used <= u]
        known.append(used)
        self.out.explored += 1
        return False

    def _viable(self) -> bool:
        """Whether every pending, unplaced pure op could still become legal."""
        tl, mask, state = self.tl, self.mask, self.state
        for s, j in enumerate(self.slot_op):
            if (
                j >= 0
                and tl.pure[j]
                and not mask & (1 << s)
                and not self.model.viable(state, tl.ops[j], tl.summary[j], self._is_open)
            ):
                return False
        return True

    def _next_read_viable(self) -> bool:
        """Whether the next few reads to be called could still be satisfied,
        given every writer that could be placed before each returns."""
        tl, i = self.tl, self.i
        g = tl.next_read[i + 1]
        if g < 0 or tl.ret_pos[g] - i > _LOOKAHEAD_EVENTS:
            return True
        base = [
            tl.ops[j]
            for s, j in enumerate(self.slot_op)
            if j >= 0 and not tl.pure[j] and not self.mask & (1 << s)
        ]
        base.extend(tl.ops[tl.inst_op[x]] for x in range(self.n_inst) if x not in self.used)
        for _ in range(_LOOKAHEAD_READS):
            writers = list(base)
            for pos in range(i + 1, tl.ret_pos[g]):
                j = tl.op_at[pos]
                if tl.kind[pos] == _CALL and not tl.pure[j]:
                    writers.append(tl.ops[j])
            op = tl.ops[g]
            if not self.model.viable(
                self.state, op, self.model.summarize(op, writers), _always_open
            ):
                return False
            g = tl.next_read[tl.call_pos[g] + 1]
            if g < 0 or tl.ret_pos[g] - i > _LOOKAHEAD_EVENTS:
                return True
        return True

    def _is_open(self, w: LinOp) -> bool:
        """Whether writer `w` is still unplaced in the current configuration."""
        tl = self.tl
        j = tl.index[w.id]
        if not w.known:
            return tl.inst[j] not in self.used
        if tl.call_pos[j] > self.i:
            return True
        if tl.ret_pos[j] < self.i:
            return False
        return not self.mask & (1 << tl.slot[j])

    def _moves(self) -> list[tuple[int, int]]:
        """The first moves at a choice point: place the returning op now, or
        hide it; the rest (ranked, costlier) only if those fail."""
        tl = self.tl
        o = tl.op_at[self.i]
        moves = [(_OP, o)]
        if tl.hideable[o] and tl.call_pos[o] < self.erased_at:
            moves.append((_HIDE, o))
        moves.append((_MORE, o))
        return moves

    def _more_moves(self) -> list[tuple[int, int]]:
        """Moves that place another op (or fire an unknown one) first, most
        promising first: those that let the returning read be placed, then
        those that let the most pending reads be placed."""
        tl, state, mask, model = self.tl, self.state, self.mask, self.model
        o = tl.op_at[self.i]
        # Ops that commute with o are never needed before it: whoever needs
        # them places them at its own choice point (partial-order reduction).
        target, commutes = tl.ops[o], model.commutes
        cands = [
            (_OP, j)
            for s, j in enumerate(self.slot_op)
            if j >= 0
            and j != o
            and not tl.pure[j]
            and not mask & (1 << s)
            and not commutes(tl.ops[j], target)
        ]
        seen_sigs: set[int] = set()
        for inst in range(self.n_inst):
            sig = tl.inst_sig[inst]
            if (
                inst not in self.used
                and sig not in seen_sigs
                and not commutes(tl.ops[tl.inst_op[inst]], target)
            ):
                seen_sigs.add(sig)
                cands.append((_INST, inst))
        reads = [
            j
            for s, j in enumerate(self.slot_op)
            if j >= 0 and tl.pure[j] and j != o and not mask & (1 << s)
        ]
        g = tl.next_read[self.i + 1]
        while g >= 0 and len(reads) < 16 and tl.call_pos[g] - self.i < _LOOKAHEAD_EVENTS:
            reads.append(g)
            g = tl.next_read[tl.call_pos[g] + 1]

        def is_open_no_reset(w: LinOp) -> bool:
            return not model.erases(w) and self._is_open(w)

        ranked = []
        for kind, x in cands:
            j = tl.inst_op[x] if kind == _INST else x
            after = model.step(state, tl.ops[j])
            if after is ILLEGAL or (kind == _INST and after == state):
                continue
            goal = 0
            probe = after
            if tl.pure[o]:
                if model.step(after, target) is ILLEGAL:
                    reachable = model.viable(after, target, tl.summary[o], is_open_no_reset)
                    goal = 1 if reachable else 2
            else:
                placed = model.step(after, target)
                probe = after if placed is ILLEGAL else placed
            # Reads that could still be met from here without a reset.
            hits = sum(
                1
                for r in reads
                if model.viable(probe, tl.ops[r], tl.summary[r], is_open_no_reset)
                or (
                    probe is not after
                    and model.viable(after, tl.ops[r], tl.summary[r], is_open_no_reset)
                )
            )
            tie = self.rng.random() if self.rng else tl.call_pos[j]
            ranked.append(((goal, -hits, kind, tie), (kind, x)))
        ranked.sort()
        return [move for _, move in ranked]

    def _open_frame(self) -> None:
        """Push the current choice point with its moves (none if seen)."""
        if self.i > self.out.events_done:
            self.out.events_done = self.i
        if self.trace and self.i >= self._best_i:
            self._note_deepest()
        dead = (
            self._seen()
            or not self._viable()
            or (self.i < self.lookahead_until and not self._next_read_viable())
        )
        moves: list[tuple[int, int]] = [] if dead else self._moves()
        self.stack.append(
            [self.i, self.state, self.mask, self.used, tuple(self.slot_op), self.n_inst,
             len(self.path), moves, 0, self.erased_at, self.fresh, self.erased_op]
        )  # fmt: skip

    def _next_child(self) -> bool:
        """Make the next untried move of the innermost open choice point."""
        tl, model = self.tl, self.model
        while self.stack:
            frame = self.stack[-1]
            i, state, mask, used, slots, n_inst, plen, moves, k, erased_at, fresh, erased_op = frame
            while k < len(moves):
                kind, x = moves[k]
                k += 1
                if kind == _MORE:
                    self._restore(i, slots, n_inst, plen)
                    self.state, self.mask, self.used = state, mask, used
                    self.erased_at, self.fresh, self.erased_op = erased_at, fresh, erased_op
                    moves.extend(self._more_moves())
                    continue
                j = tl.inst_op[x] if kind == _INST else x
                op = tl.ops[j]
                after = state if kind == _HIDE else model.step(state, op)
                if after is ILLEGAL or (kind == _INST and after == state):
                    continue
                erases = kind != _HIDE and tl.erases[j]
                if erases and fresh:
                    # The op placed just before this erasing one could as well
                    # be hidden behind it later: that branch covers this one.
                    continue
                frame[8] = k
                self._restore(i, slots, n_inst, plen)
                self.path.append(op.id)
                self.path_before.append(erased_op if kind == _HIDE else None)
                self.state = after
                self.used = used | {x} if kind == _INST else used
                self.erased_at = i if erases else erased_at
                self.erased_op = op.id if erases else erased_op
                new_mask = mask if kind == _INST else mask | (1 << tl.slot[j])
                greedy = self._greedy(after, new_mask) if after != state else new_mask
                self.mask = greedy
                self.fresh = (
                    (kind == _INST or (kind == _OP and tl.hideable[j]))
                    and j != tl.op_at[i]
                    and greedy == new_mask
                )
                return True
            self.stack.pop()
            self.lookahead_until = max(self.lookahead_until, i + _LOOKAHEAD_AFTER_DEAD_END)
        return False

    def _restore(self, i: int, slots: tuple[int, ...], n_inst: int, plen: int) -> None:
        """Return to a choice point's position, pending set and path."""
        self.i, self.n_inst = i, n_inst
        self.slot_op[:] = slots
        del self.path[plen:]
        del self.path_before[plen:]

    def _order(self) -> list[int]:
        """The path as a linearization: each hidden op just before the
        erasing op it hides behind."""
        hidden: dict[int, list[int]] = {}
        for op_id, before in zip(self.path, self.path_before, strict=True):
            if before is not None:
                hidden.setdefault(before, []).append(op_id)
        order: list[int] = []
        for op_id, before in zip(self.path, self.path_before, strict=True):
            if before is None:
                order.extend(hidden.get(op_id, ()))
                order.append(op_id)
        return order

    def _shrink_memo(self) -> None:
        """Drop the older half of the memo (dicts keep insertion order)."""
        drop = len(self.memo) // 2
        for key in list(self.memo)[:drop]:
            del self.memo[key]

    def _note_deepest(self) -> None:
        """Trace mode: remember the deepest choice point's states and path."""
        if self.i > self._best_i:
            self._best_i = self.i
            self._best_states = []
            self.out.prefix = list(self.path)
        if len(self._best_states) <= _MAX_REPORTED_STATES:
            rendered = self.model.describe(self.state)
            if rendered not in self._best_states:
                self._best_states.append(rendered)

    def _fail(self) -> None:
        self.out.valid = False
        if not self.trace or self._best_i < 0:
            return
        op = self.tl.ops[self.tl.op_at[self._best_i]]
        states = self._best_states[:_MAX_REPORTED_STATES]
        self.out.unplaceable = [
            Unplaceable(
                op=op,
                states_before=states,
                states_truncated=len(self._best_states) > _MAX_REPORTED_STATES,
            )
        ]
