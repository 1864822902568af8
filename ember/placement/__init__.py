"""The placement driver (elected by a metastore lease; grants primary-replica
leases and sends rebalance requests) and the node's control plane wiring
(`ember.placement.plane.ControlPlane`, imported from there: it imports the
rebalance agent, which imports `ember.placement.peers`, so importing it here
would make that a cycle)."""

from ember.placement.driver import DRIVER_KEY, PlacementDriver

__all__ = ["DRIVER_KEY", "PlacementDriver"]
