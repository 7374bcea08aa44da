"""Local multi-worker clusters for the tests that start real MultiWorkerMirroredStrategy processes."""
from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """`n` TCP ports free on 127.0.0.1 now (bound together, so all distinct, then released)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
