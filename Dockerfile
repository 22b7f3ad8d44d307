# ors-server with bubblewrap, run as a non-root user.
#   docker build -t ors-server .
#   docker run --rm -p 127.0.0.1:8000:8000 --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       --security-opt systempaths=unconfined ors-server
# What the sandbox needs from the container runtime, and what the server says without it: README, "In a container".
# tests/test_container.py checks this file statically, and builds and runs it where podman or docker works: on the
# Debian base made locally with mmdebstrap (no registry is reachable from the machine this project is developed on).
# BASE: any Debian 12 image with or without Python, e.g. that base:
#   podman build --build-arg BASE=localhost/ors-harbor/debian:bookworm -t ors-server .
ARG BASE=python:3.11-slim
FROM ${BASE}
# PIP_CERT: a CA bundle for pip where a proxy intercepts TLS (mount it into the build, e.g. podman build
#   --volume /etc/ssl/certs/ca-certificates.crt:/host-ca.pem:ro --build-arg PIP_CERT=/host-ca.pem).
ARG PIP_CERT

# bubblewrap: the sandbox of the shell environment and of CodeAct steps. Python 3.11 from Debian where the base
# has none (a plain Debian 12 base), and a virtual environment either way (Debian's Python refuses system installs).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && if ! python3 -c "import venv, ensurepip" 2>/dev/null; then \
        apt-get install -y --no-install-recommends python3 python3-venv; fi \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/ors-venv
ENV PATH=/opt/ors-venv/bin:$PATH

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
