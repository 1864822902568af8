"""etcd's flags as `--db-setting` sees them: which exist, which the harness
owns, which it refuses, and what value each takes.

Theory of operation. The EtcdDB passes every setting as an `ETCD_<FLAG>`
variable (harness/dbs/etcd.py). etcd 3.4 only warns about a variable it does
not know, and a value it cannot parse stops every member at start-up: the
run built its cluster only to end `unknown` ("etcd is not running on n1,
n2, n3 (log ends: ... invalid value "abc" for ETCD_HEARTBEAT_INTERVAL)"),
and a nightly cell did the same for each of its seeds. So the plan is
refused before anything starts (harness/honoured.py): an unknown flag, one
the harness sets itself, one that would make the run test something else
(a member that forgets its peers, a proxy, a discovery service, certificate
files the image does not carry), and a value of the wrong kind for the flag
(`etcd --help` of Debian's etcd-server 3.4.23 gives each flag's kind by its
default). Flags without a kind below take any string, as etcd does.
"""

from __future__ import annotations

import re

# etcd 3.4.23's flags, as `etcd --help` lists them.
ETCD_FLAGS = frozenset(
    """
advertise-client-urls auth-token auth-token-ttl auto-compaction-mode auto-compaction-retention
auto-tls backend-batch-interval backend-batch-limit bcrypt-cost cert-file cipher-suites
client-cert-allowed-hostname client-cert-auth client-crl-file cors data-dir debug discovery
discovery-fallback discovery-proxy discovery-srv discovery-srv-name election-timeout
enable-pprof enable-v2 experimental-backend-bbolt-freelist-type
experimental-compaction-batch-limit experimental-corrupt-check-time
experimental-enable-lease-checkpoint experimental-enable-v2v3
experimental-initial-corrupt-check experimental-peer-skip-client-san-verification
experimental-warning-apply-duration experimental-watch-progress-notify-interval
force-new-cluster grpc-keepalive-interval grpc-keepalive-min-time grpc-keepalive-timeout
heartbeat-interval host-whitelist initial-advertise-peer-urls initial-cluster
initial-cluster-state initial-cluster-token initial-election-tick-advance key-file
listen-client-urls listen-metrics-urls listen-peer-urls log-level log-outputs
log-package-levels logger max-concurrent-streams max-request-bytes max-snapshots
max-txn-ops max-wals metrics name peer-auto-tls peer-cert-allowed-cn
peer-cert-allowed-hostname peer-cert-file peer-client-cert-auth peer-crl-file
peer-key-file peer-trusted-ca-file pre-vote proxy proxy-dial-timeout proxy-failure-wait
proxy-read-timeout proxy-refresh-interval proxy-write-timeout quota-backend-bytes
snapshot-count strict-reconfig-check trusted-ca-file wal-dir
""".split()  # noqa: SIM905 -- as `etcd --help` lists them, one block
)  # fmt: skip

# What harness/dbs/etcd.py's `env` sets itself: a setting would break the cluster.
ETCD_OWNED = frozenset({
    "name", "data-dir", "listen-peer-urls", "listen-client-urls", "initial-advertise-peer-urls",
    "advertise-client-urls", "initial-cluster", "initial-cluster-state", "initial-cluster-token",
    "logger", "log-outputs",
})  # fmt: skip

_NO_CERTS = "names a certificate file the image does not carry (the harness speaks plain http)"
# Flags etcd would take but that, set to anything but their off value (see
# `_off`), turn the run into a test of something else.
_DISCOVERY = "bootstraps by a discovery service; the harness gives every member the cluster itself"
_CERT_FILES = """cert-file key-file trusted-ca-file client-crl-file peer-cert-file peer-key-file
peer-trusted-ca-file peer-crl-file"""
ETCD_REFUSED = {
    "force-new-cluster": "makes a restarted member drop its peers and go on as a cluster of one",
    "proxy": "runs etcd as a proxy of another cluster, not as a member",
    **dict.fromkeys(("discovery", "discovery-srv", "discovery-srv-name"), _DISCOVERY),
    **dict.fromkeys(_CERT_FILES.split(), _NO_CERTS),
}

# Each flag's kind, from its default in `etcd --help`.
_UINTS = """auth-token-ttl backend-batch-limit bcrypt-cost election-timeout
experimental-compaction-batch-limit heartbeat-interval max-concurrent-streams max-request-bytes
max-snapshots max-txn-ops max-wals proxy-dial-timeout proxy-failure-wait proxy-read-timeout
proxy-refresh-interval proxy-write-timeout quota-backend-bytes snapshot-count"""
_BOOLS = """auto-tls client-cert-auth debug enable-pprof enable-v2 force-new-cluster
experimental-enable-lease-checkpoint experimental-initial-corrupt-check
experimental-peer-skip-client-san-verification initial-election-tick-advance peer-auto-tls
peer-client-cert-auth pre-vote strict-reconfig-check"""
_DURATIONS = """backend-batch-interval experimental-corrupt-check-time
experimental-warning-apply-duration experimental-watch-progress-notify-interval
grpc-keepalive-interval grpc-keepalive-min-time grpc-keepalive-timeout"""
_CHOICES = {
    "auto-compaction-mode": ("periodic", "revision"),
    "log-level": ("debug", "info", "warn", "error", "panic", "fatal"),
    "experimental-backend-bbolt-freelist-type": ("map", "array"),
    "metrics": ("basic", "extensive"),
    "proxy": ("off", "readonly", "on"),
    "discovery-fallback": ("exit", "proxy"),
}
KINDS: dict[str, str] = {
    **dict.fromkeys(_UINTS.split(), "uint"),
    **dict.fromkeys(_BOOLS.split(), "bool"),
    **dict.fromkeys(_DURATIONS.split(), "duration"),
}
# What Go's strconv.ParseBool takes, and which of it means false.
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_GO_BOOLS = _GO_FALSE | {"1", "t", "T", "TRUE", "true", "True"}
# Go's time.ParseDuration: "0", or one or more number-unit pairs ("1m30s", "1.5s").
_GO_PAIR = r"(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)"
_GO_DURATION = re.compile(rf"0|({_GO_PAIR})+")


def flag_of(key: str) -> str:
    """The etcd flag a setting key names: heartbeat_interval -> heartbeat-interval."""
    return key.replace("_", "-").lower()


def setting_error(key: str, value: object) -> str | None:
    """Why etcd would not take `--db-setting key=value` as the run means it, or None."""
    flag = flag_of(key)
    where = f"--db-setting {key}"
    if flag in ETCD_OWNED:
        return f"{where}: set by the harness for every etcd member"
    if flag not in ETCD_FLAGS:
        return f"{where}: not an etcd 3.4 flag (etcd would ignore it)"
    kind, text = KINDS.get(flag), _text(value)
    if kind == "uint" and not (text.isascii() and text.isdigit()):
        return f"{where}: etcd takes a whole number of at least 0 here, got {value!r}"
    if kind == "bool" and text not in _GO_BOOLS:
        return f"{where}: etcd takes true or false here, got {value!r}"
    if kind == "duration" and not _GO_DURATION.fullmatch(text):
        return f"{where}: etcd takes a duration such as 500ms, 1s or 1m30s here, got {value!r}"
    choices = _CHOICES.get(flag)
    if choices is not None and text not in choices:
        return f"{where}: etcd takes one of {', '.join(choices)} here, got {value!r}"
    if flag in ETCD_REFUSED and not _off(flag, text):
        return f"{where}={text}: {ETCD_REFUSED[flag]}"
    return None


def _off(flag: str, text: str) -> bool:
    """Whether a refused flag's value leaves it as etcd's default does (off)."""
    if KINDS.get(flag) == "bool":
        return text in _GO_FALSE
    return text == ("off" if flag == "proxy" else "")


def _text(value: object) -> str:
    """The value as the EtcdDB writes it into the variable (`str`), booleans as JSON gave them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
