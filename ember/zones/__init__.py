"""Distribution zones: definitions, data nodes and rendezvous assignment."""

from ember.zones.zone import Zone, ZoneError, assign, next_data_nodes

__all__ = ["Zone", "ZoneError", "assign", "next_data_nodes"]
