"""Where agent code runs, isolated from the server.

bubblewrap.py   the one builder of bubblewrap sandboxes: CodeAct steps and the shell's, with the same hardening
interface.py    `Sandbox`: the one interface toolsets act through (run a command, read and write a file)
directory.py    `BubblewrapSandbox`: a host directory at `/work`, each command in bubblewrap (the shell's)
persistent_shell.py  `BashDriver`: one bash kept open over pipes (the shell environment's, a container's)
podman.py       podman with the server's own configuration and storage; containers labelled with their server
container.py    a task's container (limits, uid map, no network), its persistent shell, and `ContainerSandbox`
"""
