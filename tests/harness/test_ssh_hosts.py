"""Hosts files for the ssh backend: format and its errors."""

from pathlib import Path

import pytest

from harness.backends.ssh import HostsFileError, SshBackend, parse_hosts


def test_hosts_file_lines_become_node_handles(tmp_path: Path) -> None:
    """Each line's name, user, host, port, key and ip land in the handle."""
    key = tmp_path / "id"
    key.write_text("k")
    nodes = parse_hosts(
        f"# cluster\nn1 root@10.0.0.1\n\nn2 admin@db2.example:2222 {key}  # second\n"
        f"n3 root@127.0.0.1:40022 {key} ip=172.18.0.4\n"
    )
    assert [(n.name, n.ip) for n in nodes] == [
        ("n1", "10.0.0.1"),
        ("n2", "db2.example"),
        ("n3", "172.18.0.4"),
    ]
    assert nodes[1].ssh.user == "admin"
    assert nodes[1].ssh.port == 2222
    assert nodes[1].ssh.key_path == str(key)
    assert nodes[0].ssh.port == 22
    assert nodes[0].ssh.key_path is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n1\n", r"hosts:1: expected 'name user@host\[:port\]"),
        ("n1 root@h\nn2 10.0.0.2\n", r"hosts:2: '10.0.0.2' is not user@host\[:port\]"),
        ("n1 root@h:0\n", "hosts:1: port 0 is out of range"),
        ("n1 root@h /no/such/key\n", "hosts:1: key file /no/such/key does not exist"),
        ("n1 root@a\nn1 root@b\n", "node names repeat: n1"),
        ("# nothing\n", "lists no hosts"),
    ],
)
def test_malformed_hosts_files_name_the_line(text: str, message: str) -> None:
    """A bad line is reported with the file name, line number and what is wrong."""
    with pytest.raises(HostsFileError, match=message):
        parse_hosts(text, "hosts")


def test_missing_hosts_file_is_one_clear_error(tmp_path: Path) -> None:
    """Reading a hosts file that does not exist names the path."""
    with pytest.raises(HostsFileError, match=r"cannot read hosts file .*nope"):
        SshBackend.from_file(tmp_path / "nope")
