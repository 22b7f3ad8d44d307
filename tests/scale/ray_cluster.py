"""A 2-node Ray cluster on this machine, for the `--ray` tests (import Ray only inside `local_ray_cluster`: the
modules that use it skip when Ray is missing).

The cluster stays on loopback (Ray would otherwise advertise the host's outside address), with token auth off so
no `~/.ray/auth_token` is written; the environment variables and the SIGTERM handler it changes in this process
are put back when it shuts down.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.scale.deployment import ROOT

RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    # Ray resolves "this node" through the outside interface unless told it is a single-machine cluster.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}


@contextmanager
def local_ray_cluster() -> Iterator[tuple[Any, Any]]:
    """A head node and one worker node, one CPU each: yields (the `Cluster`, its worker node)."""
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    # The head node installs a SIGTERM handler in this process that outlives `cluster.shutdown()`: put ours back.
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.update(RAY_ENV)  # the cluster's processes (and so the worker actors) inherit these
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        worker_node = cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        yield cluster, worker_node
    finally:
        cluster.shutdown()
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
