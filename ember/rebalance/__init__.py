"""The rebalance protocol of seed 004: keys, invokes, the cancel table, the flow."""

from ember.rebalance.cancel import TABLE, cancel_outcome
from ember.rebalance.invokes import cancel_invoke, cancel_value, done_invoke, trigger_invoke
from ember.rebalance.keys import assignment_writes, key, parse

__all__ = [
    "TABLE",
    "assignment_writes",
    "cancel_invoke",
    "cancel_outcome",
    "cancel_value",
    "done_invoke",
    "key",
    "parse",
    "trigger_invoke",
]
