"""Where agent code runs, isolated from the server.

    bubblewrap.py   the one builder of bubblewrap sandboxes: CodeAct steps and the shell's, with the same hardening
    interface.py    `Sandbox`: the one interface toolsets act through (run a command, read and write a file)
    directory.py    `BubblewrapSandbox`: a host directory at `/work`, each command in bubblewrap (the shell's)

A container backend (podman) implements the same interface for container tasks.
"""
