"""The lengths of the primary-replica lease (ember.rebalance.agent keeps it,
ember.placement.driver waits it out), in one place both import."""

# How long a renewal lets a primary act, counted from when it sent the renewal.
PRIMARY_LEASE_S = 3.0
RENEW_EVERY_S = PRIMARY_LEASE_S / 3
# Of a lease: how much sooner the holder stops than another may take over. It
# covers clock-rate differences between nodes and the holder's own delay
# between checking its lease and acting (the driver's own lease uses it too).
LEASE_MARGIN = 0.25
