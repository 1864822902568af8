"""ember's node-to-node transport: asyncio TCP, one connection per node pair.

    t = Transport("n1", ("0.0.0.0", 7001), {"n2": ("10.0.0.2", 7001)}, on_message,
                  rng=random.Random(seed))
    await t.start()
    t.send(msg)          # never blocks; bounded queue per peer, drops oldest when full
    await t.close()

See `transport.py` for how connections, queues and reconnects work.
"""

from ember.net.framing import FrameError, Hello, encode_frame
from ember.net.links import PeerStats, TransportConfig
from ember.net.transport import Address, Transport

__all__ = [
    "Address",
    "FrameError",
    "Hello",
    "PeerStats",
    "Transport",
    "TransportConfig",
    "encode_frame",
]
