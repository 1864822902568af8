"""The placement driver (elected by a metastore lease; grants primary-replica
leases and sends rebalance requests) and the node's control plane wiring."""

from ember.placement.driver import DRIVER_KEY, PlacementDriver
from ember.placement.plane import ControlPlane

__all__ = ["DRIVER_KEY", "ControlPlane", "PlacementDriver"]
