"""The tool-server launcher reaches a Python run from a virtual environment inside a directory only root may enter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv

import pytest

from ors_server.compose import launch


@pytest.mark.skipif(os.geteuid() != 0, reason="the launcher drops to 65534 only when the server runs as root")
def test_a_venv_python_inside_a_closed_directory_starts_as_the_unprivileged_user() -> None:
    closed = tempfile.mkdtemp(prefix="ors-launch-")  # mode 0700, as .ci/run's own venv directory
    try:
        venv.create(os.path.join(closed, "venv"), symlinks=True, with_pip=False)
        python = os.path.join(closed, "venv", "bin", "python")
        argv = [
            sys.executable,
            "-I",
            "-S",
            launch.__file__,
            "65534",
            python,
            "-c",
            "import os, sys; print(os.getuid(), sys.prefix)",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["65534", os.path.join(closed, "venv")]
    finally:
        shutil.rmtree(closed)
