# ors-server with bubblewrap, run as a non-root user.
#   docker build -t ors-server .
#   docker run --rm -p 127.0.0.1:8000:8000 --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       --security-opt systempaths=unconfined ors-server
# What the sandbox needs from the container runtime, and what the server says without it: README, "In a container".
# Not built on the machine this project is developed on (it has no container engine); tests/test_container.py
# checks this file statically there, and builds and runs it where docker or podman works.
FROM python:3.11-slim

# bubblewrap: the sandbox of the shell environment and of CodeAct steps.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/ors-server
COPY pyproject.toml README.md ./
COPY ors_server ./ors_server
RUN pip install --no-cache-dir . && rm -rf /opt/ors-server

# Agent code never runs as root: the server runs as this user, and sandboxed commands as uid 65534 inside.
RUN useradd --create-home --uid 10001 ors
USER ors
WORKDIR /home/ors

EXPOSE 8000
# Port 8000 published on the host's loopback is reached as localhost:8000, which the Host check accepts; add
# --allowed-host NAME:PORT for every other name clients dial.
CMD ["ors-server", "serve", "--host", "0.0.0.0", "--port", "8000"]
