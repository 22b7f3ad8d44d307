"""The supervisor's child processes (workers, fronts): waiting for them to exit, boundedly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

logger = logging.getLogger("ors_server.scale")


async def wait_or_kill(processes: Iterable[asyncio.subprocess.Process], patience: float, what: str) -> None:
    """Wait until every process has exited; kill those still running after `patience` seconds (and log it)."""
    processes = list(processes)
    try:
        await asyncio.wait_for(asyncio.gather(*(process.wait() for process in processes)), patience)
    except TimeoutError:
        for process in processes:
            if process.returncode is None:
                logger.error("%s pid %d did not exit %.0f s after its stop: killed", what, process.pid, patience)
                process.kill()
        await asyncio.gather(*(process.wait() for process in processes))
