"""Running code we do not trust. This module is its one door; code outside imports only from here.

- `isolation.py`: who a sandboxed process runs as (a user slot of its own when we are root), what
  it may use (no network, memory, a PID namespace, the system calls `syscall_filter.py` allows), and
  killing its processes on release; `freezer.py`: stopping them while something is timed,
  `bystanders.py`: stopping the other sandbox users' processes on the timed GPU while it is timed, and
  `gpu_contexts.py`: the CUDA contexts left running by processes that are gone.
- `groups.py`: ending a process group (a sandboxed child, a build's compilers, verl's trainer).
- `process.py`: a confined child process speaking JSON lines, and its scratch folders.
- `forkserver.py`: where such a child is forked from a process that imported torch once (CPU backend).
- `shell.py`: the agent's shell, `Environment` and its `CommandRunner`.

Used by the harness (the solution's child and the reference worker, its builds), by synth (the
worker where candidates run), by the agent (its shell commands) and by rl (verl's process).
"""

from cuda_agent.sandbox.bystanders import Bystanders
from cuda_agent.sandbox.groups import group_alive, kill_group, stop_group
from cuda_agent.sandbox.freezer import GPU_FILES, Freezer, FrozenBlock
from cuda_agent.sandbox.gpu_contexts import ContextWatch
from cuda_agent.sandbox.isolation import (SandboxUser, UserSlot, claim_user, eval_uids, reachable_by_others,
                                          sandbox_user)
from cuda_agent.sandbox.process import ChildChannel, ChildFailed, Exchange, Process
from cuda_agent.sandbox.shell import (CommandResult, CommandRunner, Environment, claim_tool_user, prepare_workspace,
                                      shared_workspace_dir)

__all__ = [
    "Bystanders", "ChildChannel", "ChildFailed", "CommandResult", "CommandRunner", "ContextWatch", "Environment",
    "Exchange", "Freezer", "FrozenBlock", "GPU_FILES", "Process", "SandboxUser", "UserSlot",
    "claim_tool_user", "claim_user", "eval_uids", "group_alive", "kill_group", "prepare_workspace",
    "reachable_by_others", "sandbox_user", "shared_workspace_dir", "stop_group",
]
