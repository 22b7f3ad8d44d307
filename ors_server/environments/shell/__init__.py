"""A stateful shell episode: the agent solves a small file-system exercise with a persistent bash, then submits.

Each session owns one bash in a private working directory. Tool `bash` runs one command in that shell (so `cd`,
`export` and functions persist between calls) and returns its exit code, stdout and stderr; tool `submit` stops
the shell, checks the working directory against the exercise and ends the episode with reward 1.0 or 0.0.

Limits. Each command may run `command_timeout` seconds (default 10; task spec `"command_timeout"`); then every
process the command started is killed and the shell lives on. Only if the shell itself stays busy (a loop of
builtins) or exits (`exit`) is a new one started in the same directory, and the agent is told that variables
were lost. A call the server abandons (its tool timeout) kills its command the same way, and the next command
still gets its own output. Each stream keeps its first `output_cap` bytes (64 KiB), with a note on the rest.

Isolation. By default bash runs in a bubblewrap sandbox (see `confinement.py`): its own pid, user, network and
mount namespaces, as uid 65534, with only its working directory and a small /tmp writable, and rlimits on memory,
processes and file size (the `ORS_SHELL_*` variables). Where bubblewrap cannot run, shell sessions fail to start
unless the operator sets `ORS_SHELL_SANDBOX=none`, which runs them unconfined and logs a warning for every session.

Modules: `confinement` (the sandbox; the bash driver is `ors_server.sandboxes.persistent_shell`, which Harbor
tasks' containers use too), `exercises` (the catalogue and its checks),
`environment` (the `Shell` environment).
"""

from ors_server.environments.shell.environment import Shell
from ors_server.environments.shell.exercises import EXERCISES, TEST, TRAIN, Exercise

__all__ = ["EXERCISES", "TEST", "TRAIN", "Exercise", "Shell"]
