"""`python -m ors_server.harbor base-image [--harbor-dir DIR]`: make the Debian base image ahead of time."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import anyio

from ors_server.harbor.images import DEBIAN_BASE, ImageError, Images
from ors_server.sandboxes.podman import Podman, default_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ors_server.harbor", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    base = commands.add_parser("base-image", help=f"make {DEBIAN_BASE} with mmdebstrap, unless it is there")
    base.add_argument("--harbor-dir", default=None, help="the server's container directory (as serve's flag)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    podman = Podman(Path(args.harbor_dir) if args.harbor_dir else default_dir())
    try:
        print(anyio.run(Images(podman, {}).debian_base))
    except ImageError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
