"""`ors-server serve --ray [ADDRESS] --workers N`: workers as Ray actors across a cluster.

Ray places, watches and restarts workers; it stays off the request path. Each worker is an async actor that
runs the unchanged server under uvicorn on its node's address. A detached named controller actor keeps the
worker table (slot, incarnation, address, state) and waits on every worker: a worker whose actor dies (its
process, or its node) is marked dead at once and a new incarnation is started where Ray finds room. Fronts
long-poll the controller for table changes and route exactly as with local workers; one front per node
(or per deployment) attaches to the same controller by name, and the last front to detach drains the
deployment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ors_server.http.server import UvicornServer, announce, configure_logging, listen_all, uvicorn_config
from ors_server.ids import WorkerTag
from ors_server.loading import LoadError, resolve_environments
from ors_server.scale.assembly import build_front, front_config
from ors_server.scale.front import Front
from ors_server.scale.table import Address, State, Worker, WorkerTable
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.ray")

NAMESPACE = "ors-server"
CONTROLLER = "controller"
POLL_SECONDS = 10.0
PLACEMENTS = ("spread", "pack")


@ray.remote
class OrsWorker:
    """One worker: the server under uvicorn inside this actor, on the node's address and a free port."""

    async def start(self, envs: list[str], fields: dict[str, Any], app_dir: str | None) -> tuple[str, int]:
        from ors_server.http.app import create_app

        settings = Settings(**fields)
        configure_logging(settings.log_level)
        # `module:Class` environments come from the deployment's runtime_env (its working_dir is this actor's
        # cwd; it and py_modules are on sys.path), or without one from the driver's directory (on its host).
        self.app = create_app(resolve_environments(envs, app_dir), settings)
        host = ray.util.get_node_ip_address()
        config = uvicorn_config(self.app, settings, host=host, port=0)
        # Signals stay Ray's: uvicorn only captures them on the main thread, and an actor's loop is not there.
        self.server = UvicornServer(config)
        self.serving = asyncio.ensure_future(self.server.serve())
        while not self.server.started:
            if self.serving.done():
                self.serving.result()
                raise RuntimeError("the worker's server stopped while starting")
            await asyncio.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return host, port

    async def wait(self) -> None:
        """Returns when the server has stopped (the controller's watch; an actor death raises instead)."""
        await asyncio.shield(self.serving)

    async def drain(self) -> None:
        """As a single server on SIGTERM: stop admitting, finish calls in flight, tear every session down."""
        self.app.state.store.stop_admitting()
        self.server.should_exit = True
        await asyncio.shield(self.serving)

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0)
class Controller:
    """The worker table of one deployment, kept current from the workers' lives and deaths."""

    def __init__(
        self, envs: list[str], fields: dict[str, Any], count: int, placement: str, cpus: float, app_dir: str | None
    ) -> None:
        self.envs, self.fields, self.count, self.app_dir = envs, fields, count, app_dir
        self.placement, self.cpus = placement, cpus
        self.rows: list[dict[str, Any] | None] = [None] * count
        self.actors: list[Any] = [None] * count
        self.incarnations = [0] * count
        self.version = 0
        self.changed = asyncio.Condition()
        self.fronts = 0
        self.started: asyncio.Future[None] | None = None
        self.stopping = False
        self.tasks: list[asyncio.Task[None]] = []

    def shape(self) -> dict[str, Any]:
        """What this deployment serves, for a front to check it asks for the same before it attaches."""
        return {"envs": self.envs, "count": self.count}

    async def attach(self) -> int:
        """A front joins; the first one starts the workers. Returns the number of worker slots."""
        self.fronts += 1
        if self.started is None:
            self.started = asyncio.ensure_future(self._start_all())
        await asyncio.shield(self.started)
        return self.count

    async def detach(self) -> bool:
        """A front leaves; when it was the last, every worker drains (True) and the controller ends."""
        self.fronts -= 1
        if self.fronts > 0:
            return False
        self.stopping = True
        drains = [actor.drain.remote() for actor in self.actors if actor is not None]
        await asyncio.gather(*drains, return_exceptions=True)
        for task in self.tasks:
            task.cancel()
        for actor in self.actors:
            if actor is not None:
                ray.kill(actor)
        return True

    async def table(self, after: int = -1, patience: float = POLL_SECONDS) -> tuple[int, list[dict[str, Any] | None]]:
        """The table once its version is past `after` (or `patience` seconds have passed)."""
        async with self.changed:
            if self.version <= after:
                try:
                    await asyncio.wait_for(self.changed.wait_for(lambda: self.version > after), patience)
                except TimeoutError:
                    pass
            return self.version, list(self.rows)

    async def unreachable(self, index: int, incarnation: int) -> None:
        """A front found nothing at a worker's address: end that actor, so its watch starts the next one."""
        actor = self.actors[index]
        if actor is not None and self.incarnations[index] == incarnation:
            ray.kill(actor, no_restart=True)

    async def nodes(self) -> dict[str, str]:
        """Worker tag -> the node id its actor runs on (for operators and tests)."""
        found = {}
        for index, actor in enumerate(self.actors):
            row = self.rows[index]
            if actor is not None and row is not None and row["state"] == State.LIVE.value:
                try:
                    found[row["tag"]] = await actor.node.remote()
                except ray.exceptions.RayActorError:
                    pass
        return found

    async def _start_all(self) -> None:
        await asyncio.gather(*(self._spawn(index) for index in range(self.count)))

    async def _publish(self, index: int, row: dict[str, Any] | None) -> None:
        async with self.changed:
            self.rows[index] = row
            self.version += 1
            self.changed.notify_all()

    def _options(self, index: int, tag: WorkerTag) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.cpus, "name": f"worker-{tag}", "namespace": NAMESPACE}
        if self.placement == "spread":
            alive = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
            if alive:
                # Round-robin over the live nodes; soft, so a slot whose node is gone restarts elsewhere.
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(alive[index % len(alive)], soft=True)
        return options

    async def _spawn(self, index: int) -> None:
        self.incarnations[index] += 1
        tag = WorkerTag(index, self.incarnations[index])
        fields = {**self.fields, "worker_tag": str(tag)}
        actor = OrsWorker.options(**self._options(index, tag)).remote()  # type: ignore[attr-defined]
        self.actors[index] = actor
        await self._publish(index, {"tag": str(tag), "host": "", "port": 0, "state": State.STARTING.value})
        host, port = await actor.start.remote(self.envs, fields, self.app_dir)
        await self._publish(index, {"tag": str(tag), "host": host, "port": port, "state": State.LIVE.value})
        self.tasks.append(asyncio.ensure_future(self._watch(index, actor, tag)))

    async def _watch(self, index: int, actor: Any, tag: WorkerTag) -> None:
        try:
            await actor.wait.remote()
        except ray.exceptions.RayError:
            pass  # the actor died: its process, or its node
        row = self.rows[index]
        if row is not None and row["tag"] == str(tag):
            await self._publish(index, {**row, "state": State.DEAD.value})
        delay = 0.5
        while not self.stopping:
            try:
                await self._spawn(index)
                return
            except ray.exceptions.RayError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


class RayMembership:
    """The front's side: attach to the controller, mirror its table, tell it about unreachable workers."""

    def __init__(self, controller: Any, table: WorkerTable) -> None:
        self.controller, self.table = controller, table
        self.front: Front | None = None
        self.detached: asyncio.Future[bool] | None = None

    def apply(self, rows: Sequence[dict[str, Any] | None]) -> None:
        for index, row in enumerate(rows):
            if row is None:
                continue
            tag = WorkerTag.parse(row["tag"])
            current = self.table.slots[index]
            state = State(row["state"])
            if current is not None and current.tag == tag:
                if current.state is not State.DEAD:  # a front's own verdict of death stands
                    self.table.mark(tag, state)
            else:
                self.table.put(Worker(tag, Address(row["host"], row["port"]), state))

    async def _follow_table(self, version: int) -> None:
        while True:
            try:
                version, rows = await self.controller.table.remote(version)
            except ray.exceptions.RayError:
                logger.exception("lost the controller")
                await asyncio.sleep(1.0)
                continue
            self.apply(rows)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[RayMembership]:
        await self.controller.attach.remote()
        version, rows = await self.controller.table.remote(-1, 0.0)
        self.apply(rows)
        tasks = [asyncio.ensure_future(self._follow_table(version))]
        if self.front is not None:
            tasks.append(asyncio.ensure_future(self.front.watch_health()))
        try:
            yield self
        finally:
            await self.detach()
            for task in tasks:
                task.cancel()

    def start_detach(self) -> None:
        if self.detached is None:
            self.detached = asyncio.ensure_future(self.controller.detach.remote())

    async def detach(self) -> None:
        self.start_detach()
        assert self.detached is not None
        try:
            await self.detached
        except ray.exceptions.RayError:
            logger.exception("the controller failed to drain the workers")

    def unreachable(self, worker: Worker) -> None:
        self.controller.unreachable.remote(worker.tag.index, worker.tag.incarnation)


def controller_for(
    envs: Sequence[str], settings: Settings, count: int, placement: str, cpus: float, app_dir: str | None = None
) -> Any:
    """The deployment's controller: the running one of that name, or a new detached one."""
    per_worker = dataclasses.replace(settings, max_sessions=math.ceil(settings.max_sessions / count), api_key=None)
    fields = {k: v for k, v in dataclasses.asdict(per_worker).items()}
    fields["api_key"] = settings.api_key  # travels inside Ray, never on a command line
    return Controller.options(  # type: ignore[attr-defined]
        name=CONTROLLER, namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote(list(envs), fields, count, placement, cpus, app_dir)


@ray.remote(num_cpus=0)
def _load_problem(envs: list[str], app_dir: str | None) -> str | None:
    """What a worker would meet loading `envs` on a node of the cluster, in the deployment's runtime_env: a
    module that did not reach the nodes is one line at startup, not a worker that fails to start, again."""
    try:
        resolve_environments(envs, app_dir)
    except LoadError as exc:
        return str(exc)
    return None


class OtherDeployment(LoadError):
    """A front asked for other workers or environments than the deployment already running on the cluster."""


def _check_same_deployment(running: dict[str, Any], envs: list[str], count: int) -> None:
    """A front joins the cluster's one deployment as it is: with another --workers or --env it would route to
    worker slots that do not exist, or to environments the workers do not serve."""
    if running["count"] != count or running["envs"] != envs:
        raise OtherDeployment(
            f"the Ray cluster already runs a deployment with --workers {running['count']} and "
            f"--env {' --env '.join(running['envs'])}: start this front with the same flags, or stop every "
            "front of that deployment first"
        )


def serve(
    envs: Sequence[str],
    settings: Settings,
    count: int,
    address: str | None,
    placement: str,
    cpus: float,
    runtime_env: dict[str, Any] | None = None,
) -> None:
    """Serve `envs` from `count` Ray-actor workers behind a front on `settings.host:settings.port`.

    `runtime_env` (Ray's: `working_dir`, `py_modules`, `pip`, ...) is the job's, so the controller and every
    worker it starts run in it: that is how a `module:Class` environment reaches the other nodes."""
    sockets = listen_all(settings)  # before Ray starts: an address in use is one line
    configure_logging(settings.log_level)
    try:
        ray.init(
            address=address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env
        )
    except ConnectionError as exc:  # no cluster where --ray points (Ray's message says how to name one)
        raise SystemExit(f"ors-server: --ray {address}: {exc}") from None
    try:
        table = WorkerTable(count)
        app_dir = None if runtime_env else os.getcwd()
        problem = ray.get(_load_problem.remote(list(envs), app_dir))
        if problem is not None:
            raise LoadError(f"on the Ray cluster: {problem} (a worker's node needs the module: --ray-runtime-env)")
        controller = controller_for(envs, settings, count, placement, cpus, app_dir)
        _check_same_deployment(ray.get(controller.shape.remote()), list(envs), count)
        membership = RayMembership(controller, table)
        front = build_front(settings, table, lifespan=membership.run, on_unreachable=membership.unreachable)
        membership.front = front
        announce(sockets, settings.port_envs)

        def detach() -> None:
            # A shutdown signal detaches this front first: the last one drains the workers while fronts relay.
            asyncio.get_event_loop().call_soon_threadsafe(membership.start_detach)

        UvicornServer(front_config(front, settings), on_exit=detach).run(sockets=sockets)
    finally:
        ray.shutdown()
