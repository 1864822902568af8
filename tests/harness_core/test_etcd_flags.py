"""etcd `--db-setting`s are refused before any node starts when etcd would not
take them as the run means them: unknown or harness-owned flags, flags that
make the run test something else, and values of the wrong kind (which stop
the member at start-up, seen before only as a cluster that never got healthy)."""

from __future__ import annotations

import pytest

from harness.etcd_flags import ETCD_FLAGS, ETCD_OWNED, ETCD_REFUSED, KINDS, setting_error
from harness.honoured import refusal
from harness.plan import Plan


def _why(**settings: object) -> str | None:
    return refusal(Plan(db="etcd", db_settings=settings, workload=("register",)), phases=False)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("heartbeat_interval", "abc", "heartbeat_interval: etcd takes a whole number of at"),
        ("election-timeout", -1, "election-timeout: etcd takes a whole number"),
        ("snapshot-count", 1.5, "snapshot-count: etcd takes a whole number"),
        ("pre-vote", "yes", "pre-vote: etcd takes true or false here, got 'yes'"),
        ("grpc-keepalive-timeout", "5", "grpc-keepalive-timeout: etcd takes a duration"),
        ("log-level", "verbose", "log-level: etcd takes one of debug, info, warn, error, panic"),
        ("force-new-cluster", True, "force-new-cluster=true: makes a restarted member drop"),
        ("proxy", "on", "proxy=on: runs etcd as a proxy"),
        ("discovery", "http://d/x", "discovery=http://d/x: bootstraps by a discovery service"),
        ("peer-cert-file", "/c.pem", "peer-cert-file=/c.pem: names a certificate file"),
        ("name", "x", "name: set by the harness for every etcd member"),
        ("heartbeat-intervall", 50, "heartbeat-intervall: not an etcd 3.4 flag"),
    ],
)  # fmt: skip
def test_a_setting_etcd_would_not_take_is_one_precise_refusal(
    key: str, value: object, words: str
) -> None:
    why = _why(**{key: value})
    assert why is not None
    assert why.startswith(f"--db-setting {words}"), why


@pytest.mark.parametrize(
    "settings",
    [
        {"heartbeat-interval": 50, "election_timeout": "500"},
        {"pre-vote": True, "strict-reconfig-check": "false"},
        {"experimental-watch-progress-notify-interval": "1m30s"},
        {"backend-batch-interval": "0"},
        {"auto-compaction-mode": "revision", "auto-compaction-retention": "1000"},
        {"force-new-cluster": False, "proxy": "off", "discovery": ""},
        {"bootstrap": "n1,n2,n3"},
    ],
)
def test_settings_etcd_takes_as_given_are_accepted(settings: dict[str, object]) -> None:
    assert _why(**settings) is None


def test_every_kind_and_refusal_names_a_flag_etcd_has_and_the_harness_does_not_own() -> None:
    """A typo in the tables would leave a flag unchecked without a sign."""
    for flag in (*KINDS, *ETCD_REFUSED):
        assert flag in ETCD_FLAGS, flag
        assert flag not in ETCD_OWNED, flag
    assert setting_error("max_txn_ops", 128) is None
