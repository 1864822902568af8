"""Settings that name nodes, and labels that are not settings, as the dbs read them.

`--db-setting bootstrap=n1,n2` arrives as the string "n1,n2" (a bare word
is a string), and a nightly matrix or plan file may give a list: both mean
the same two nodes. A version label (`--db-setting version=...`) is kept in
the plan for the reports but never reaches a node: etcd would read
ETCD_VERSION as its --version flag.
"""

from __future__ import annotations

import tomllib

import pytest

from harness.backends.base import NodeHandle, SshTarget
from harness.db import EmberDB
from harness.dbs.etcd import EtcdDB
from harness.honoured import refusal
from harness.plan import Plan
from harness.process_db import DBError, bootstrap_names, node_names

NAMES = ("n1", "n2", "n3", "n4", "n5")
NODES = [NodeHandle(name=n, ip=f"10.0.0.{i}", ssh=SshTarget(host=f"10.0.0.{i}"))
         for i, n in enumerate(NAMES, 1)]  # fmt: skip


@pytest.mark.parametrize("given", ["n4,n2", "n4, n2", ["n4", "n2"], ("n4", "n2")])
def test_bootstrap_as_text_or_list_names_the_same_nodes(given: object) -> None:
    assert bootstrap_names({"bootstrap": given}, NAMES) == ["n4", "n2"]
    assert EmberDB(NODES, {"bootstrap": given}, 1).bootstrap() == ["n4", "n2"]
    assert EtcdDB(NODES, {"bootstrap": given}, 1).members == {"n4", "n2"}


def test_without_bootstrap_the_first_three_nodes_form_the_cluster() -> None:
    assert bootstrap_names({}, NAMES) == ["n1", "n2", "n3"]
    assert bootstrap_names({"bootstrap": ""}, NAMES[:2]) == ["n1", "n2"]


def test_ember_config_carries_the_bootstrap_nodes_not_their_letters() -> None:
    db = EmberDB(NODES, {"bootstrap": "n1,n2,n4"}, 1)
    config = tomllib.loads(db._config(NODES[0]))
    assert config["bootstrap"] == "n1,n2,n4"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("n1,n9", "bootstrap: unknown node(s) n9; the nodes are n1, n2, n3, n4, n5"),
        (3, "bootstrap: expected node names (n1,n2 or a list), got 3"),
        (["n1", 2], "bootstrap: expected node names (n1,n2 or a list), got ['n1', 2]"),
    ],
)
def test_a_bad_node_naming_setting_is_one_precise_error(value: object, words: str) -> None:
    with pytest.raises(DBError) as err:
        node_names(value, "bootstrap", NAMES)
    assert str(err.value) == words


@pytest.mark.parametrize(
    ("db", "settings", "words"),
    [
        ("ember", {"bootstrap": "n1,n6"}, "--db-setting bootstrap: unknown node(s) n6"),
        ("etcd", {"bootstrap": "n1,n6"}, "--db-setting bootstrap: unknown node(s) n6"),
        ("ember", {"meta_nodes": "n2,x"}, "--db-setting meta_nodes: unknown node(s) x"),
    ],
)
def test_the_plan_is_refused_when_a_setting_names_no_node_of_it(
    db: str, settings: dict[str, object], words: str
) -> None:
    why = refusal(Plan(db=db, db_settings=settings, workload=("register",)), phases=False)
    assert why is not None
    assert why.startswith(words), why


@pytest.mark.parametrize("settings", [{"meta_nodes": "auto"}, {"bootstrap": ["n5", "n1"]}])
def test_settings_naming_the_plan_s_nodes_are_accepted(settings: dict[str, object]) -> None:
    assert refusal(Plan(db_settings=settings, workload=("register",)), phases=False) is None


def test_auto_metastore_voters_are_picked_as_ember_node_picks_them() -> None:
    """ember-node sorts the bootstrap nodes and takes the first three; the
    harness must talk to the same three."""
    db = EmberDB(NODES, {"bootstrap": "n5,n4,n1,n2", "meta_nodes": "auto"}, 1)
    assert db.meta_voters() == ["n1", "n2", "n4"]
    assert EmberDB(NODES, {"meta_nodes": "n3, n5"}, 1).meta_voters() == ["n3", "n5"]


@pytest.mark.parametrize("label", ["version", "ember_version", "git_rev"])
def test_a_version_label_never_reaches_a_node(label: str) -> None:
    settings = {label: "2.0-rc1", "heartbeat_interval": 50}
    env = EtcdDB(NODES, settings, 1).env("n1", {"n1": "http://10.0.0.1:2380"}, "new")
    assert "ETCD_HEARTBEAT_INTERVAL=50\n" in env
    assert "2.0-rc1" not in env
    assert "2.0-rc1" not in EmberDB(NODES, {label: "2.0-rc1"}, 1)._config(NODES[0])


@pytest.mark.parametrize("meta", [["n5", "n3"], "n5,n3"])
def test_metastore_voters_given_as_a_list_reach_ember_node_as_names(meta: object) -> None:
    """ember-node reads meta_nodes as "n1,n2"; a list from a plan file must
    not arrive as a TOML array it would read as one odd name."""
    import tomllib

    from ember.server import config_from_settings

    config = EmberDB(NODES, {"meta_nodes": meta}, 1)._config(NODES[0])
    assert config_from_settings(tomllib.loads(config)).meta_nodes == ("n3", "n5")
