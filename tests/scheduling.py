"""The order pytest-xdist hands test modules to its workers (`--dist loadscope`): the longest first.

xdist's own order puts the modules with the most tests first, so the slow modules of one or two end-to-end
tests (an official client's venv, a container build, a Ray cluster) start last and run alone at the end while
the other workers sit idle. Handing out the longest first (the longest-processing-time rule) ends the run when
the bulk of short modules does. A module is still one unit (its module-scoped servers start once); only the
order and the moment a unit is handed out change, never which tests run.

`SECONDS` holds what each slow module took under `-n 4` on a 2-core machine (the sum of its tests' setup, call
and teardown from `--durations=0`). It only orders the queue: a module missing from it goes after those listed,
in xdist's order, so a stale figure costs wall time, never a test.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

SECONDS: dict[str, float] = {
    "tests/clients/test_openenv_client.py": 780,
    "tests/hosts/test_openreward.py": 300,
    "tests/hosts/test_openreward_startup.py": 300,
    "tests/test_docs_examples.py": 545,
    "tests/clients/test_trl.py": 405,
    "tests/clients/test_through_front.py": 365,
    "tests/test_loading.py": 340,
    "tests/scale/test_fronts.py": 330,
    "tests/hosts/test_openenv.py": 305,
    "tests/test_container.py": 240,
    "tests/records/test_cli_and_export.py": 215,
    "tests/reliability/test_openapi_fuzz.py": 205,
    "tests/harbor/test_scale.py": 180,
    "tests/records/test_durability.py": 180,
    "tests/harbor/test_ray.py": 165,
    "tests/scale/test_streaming.py": 160,
    "tests/clients/test_openreward_client.py": 150,
    "tests/clients/test_toolsets.py": 150,
    "tests/clients/test_verifiers.py": 135,
    "tests/test_port_in_use.py": 130,
    "tests/scale/test_placement.py": 105,
    "tests/scale/test_ws_flood_front.py": 100,
    "tests/harbor/test_cleanup.py": 85,
    "tests/records/test_stats.py": 80,
    "tests/records/test_codeact_episode.py": 75,
    "tests/clients/test_ors_sdk_client.py": 70,
    "tests/clients/test_mcp_ts_client.py": 65,
    "tests/clients/test_fastmcp_client.py": 65,
    "tests/scale/test_ray.py": 55,
    "tests/hosts/test_openreward_contract.py": 55,
    "tests/records/test_large_episodes.py": 55,
}


def _module(scope: str) -> str:
    return scope.split("::", 1)[0]


class LongestFirst(LoadScopeScheduling):
    """`--dist loadscope`, the longest modules first, and a module handed to a worker only as it runs the last
    test of its current one (xdist queues a second module behind a running one, which can then wait behind a
    slow module while another worker has nothing to do)."""

    _ordered = False

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The first hand-out comes once xdist has filled its queue (in its own order): sort it, stably.
        if not self._ordered:
            ordered = sorted(self.workqueue.items(), key=lambda item: -SECONDS.get(_module(item[0]), 0.0))
            self.workqueue = OrderedDict(ordered)
            self._ordered = True
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # 1, not xdist's 2: a worker holds its last test until it knows the next one (for fixture teardown),
        # so it is given the next module when it is down to that test, not earlier.
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)
