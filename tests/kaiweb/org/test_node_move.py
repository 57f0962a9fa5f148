"""`rules.node_move`: where a node's pool label should point now, and when it is held for draining."""

from __future__ import annotations

from kaiweb.org.rules import PoolSpec, node_move

GPU = "nvidia.com/gpu.product"
POOLS = [PoolSpec("h100", GPU, "H100"), PoolSpec("a100", GPU, "A100")]


def test_an_idle_node_follows_its_labels_at_once():
    assert node_move({GPU: "H100"}, POOLS, busy=False) == ("h100", False)
    assert node_move({GPU: "H100", "kai.scheduler/node-pool": "a100"}, POOLS, busy=False) == ("h100", False)
    assert node_move({"kai.scheduler/node-pool": "h100"}, POOLS, busy=False) == ("default", False)


def test_a_busy_node_whose_labels_choose_another_pool_is_held_in_its_own():
    assert node_move({GPU: "H100"}, POOLS, busy=True) == ("default", True)
    assert node_move({GPU: "A100", "kai.scheduler/node-pool": "h100"}, POOLS, busy=True) == ("h100", True)


def test_a_busy_node_already_in_its_pool_is_not_held():
    assert node_move({GPU: "H100", "kai.scheduler/node-pool": "h100"}, POOLS, busy=True) == ("h100", False)
    assert node_move({}, POOLS, busy=True) == ("default", False)
