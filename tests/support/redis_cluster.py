"""A private Redis Cluster for tests: three masters, no replicas, on
127.0.0.1 and free ports, each a ``RedisServer`` (AOF on, ``appendfsync
always``) in a folder of its own.

``RedisCluster(dir, redis_server, redis_cli).start()`` starts the nodes,
joins them with ``redis-cli --cluster create`` and waits until every node
says the cluster is ``ok``. ``cluster-require-full-coverage no``: while one
master is down the others keep serving their slots (the production setting
the docs recommend). ``node_of(key)`` says which node holds a key; a node can
be killed and started again on its port with its data (``RedisServer``).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.redis_server import RedisServer
from tests.support.servers import free_port

#: Milliseconds before the others call an unreachable node failed; short, so
#: that the tests see the cluster's view change quickly.
NODE_TIMEOUT_MS = 1000


@dataclass
class RedisCluster:
    dir: Path
    server_binary: str
    cli_binary: str
    masters: int = 3
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """``redis+cluster://`` naming every node (any one would do)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self, timeout: float = 20.0) -> RedisCluster:
        for i in range(self.masters):
            node = RedisServer(
                self.server_binary,
                self.dir / f"node{i}",
                extra=[
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    # Its own free port: port + 10000 (the default) may be taken
                    # or beyond 65535.
                    "--cluster-port", str(free_port()),
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                    "--cluster-require-full-coverage", "no",
                ],
            )  # fmt: skip
            self.nodes.append(node.start())
        cmd = [
            self.cli_binary, "--cluster", "create",
            *(f"127.0.0.1:{n.port}" for n in self.nodes),
            "--cluster-replicas", "0", "--cluster-yes",
        ]  # fmt: skip
        created = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if created.returncode != 0:
            self.kill()
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        self.wait_ok(timeout)
        return self

    def wait_ok(self, timeout: float = 20.0, nodes: list[RedisServer] | None = None) -> None:
        """Until every node (or those given) says ``cluster_state:ok`` and
        knows every master (gossip takes a moment after a create or a restart)."""
        deadline = time.monotonic() + timeout
        for node in nodes or self.nodes:
            while not self._ok(node):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cluster not ok on :{node.port}: {node.log()}")
                time.sleep(0.05)

    def _ok(self, node: RedisServer) -> bool:
        try:
            with redis.Redis(port=node.port, socket_timeout=1) as client:
                info = client.cluster("INFO")
        except redis.RedisError:
            return False
        return (
            info.get("cluster_state") == "ok"
            and int(info.get("cluster_known_nodes", 0)) == self.masters
            and int(info.get("cluster_slots_ok", 0)) == 16384
        )

    def node_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot (as the first live node sees it)."""
        for asked in self.nodes:
            if asked.proc is None or asked.proc.poll() is not None:
                continue
            with redis.Redis(port=asked.port, socket_timeout=1) as client:
                slot = client.cluster("KEYSLOT", key)
                for low, high, primary, *_ in client.cluster("SLOTS"):
                    if low <= slot <= high:
                        port = primary[1]
                        return next(n for n in self.nodes if n.port == port)
        raise LookupError(f"no node serves {key!r}")

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
