"""The order pytest-xdist hands test modules to its workers (`--dist loadscope`): the longest first.

xdist's own order puts the modules with the most tests first, so the slow modules of one or two end-to-end
tests (an official client's venv, a container build, a Ray cluster) start last and run alone at the end while
the other workers sit idle. Handing out the longest first (the longest-processing-time rule) ends the run when
the bulk of short modules does. A module is still one unit (its module-scoped servers start once); only the
order and the moment a unit is handed out change, never which tests run.

`SECONDS` holds what each slow module took under `-n 4` on the 2-core machine (its tests' setup, call and
teardown, in a full run at load 10-16 with other work on the machine: their order is what counts). It only orders
the queue: a module missing from it goes after those listed, in xdist's order, so a stale figure costs wall time,
never a test.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

SECONDS: dict[str, float] = {
    "tests/test_docs_examples.py": 620,
    "tests/clients/test_openenv_client.py": 600,
    "tests/test_loading.py": 390,
    "tests/clients/test_through_front.py": 370,
    "tests/clients/test_trl.py": 240,
    "tests/harbor/test_ray.py": 240,
    "tests/scale/test_ray.py": 210,
    "tests/scale/test_fronts.py": 180,
    "tests/test_container.py": 170,
    "tests/hosts/test_openenv.py": 140,
    "tests/clients/test_openreward_client.py": 140,
    "tests/hosts/test_openreward_startup.py": 140,
    "tests/hosts/test_openreward.py": 120,
    "tests/reliability/test_openapi_fuzz.py": 120,
    "tests/clients/test_eval_protocol_client.py": 110,
    "tests/clients/test_ors_client.py": 110,
    "tests/harbor/test_episodes.py": 110,
    "tests/harbor/test_scale.py": 100,
    "tests/compose/test_composition.py": 96,
    "tests/records/test_durability.py": 89,
    "tests/test_api_key_sources.py": 66,
    "tests/hosts/test_openreward_contract.py": 66,
    "tests/records/test_cli_and_export.py": 62,
    "tests/clients/test_env_ports.py": 61,
    "tests/scale/test_mcp_episodes.py": 56,
    "tests/harbor/test_cleanup.py": 47,
    "tests/clients/test_tool_outcomes.py": 45,
    "tests/scale/test_workers.py": 44,
    "tests/compose/test_tool_server_processes.py": 42,
    "tests/clients/test_verifiers.py": 41,
    "tests/test_cli.py": 41,
    "tests/scale/test_ws_flood_front.py": 40,
    "tests/environments/test_shell.py": 40,
    "tests/test_one_way.py": 37,
    "tests/ui/test_dashboard.py": 35,
    "tests/test_port_in_use.py": 34,
    "tests/clients/test_mcp_ts_client.py": 31,
    "tests/scale/test_placement.py": 31,
    "tests/hosts/test_isolated.py": 31,
    "tests/environments/test_shell_driver.py": 31,
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
