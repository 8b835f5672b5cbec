"""Isolation (sandbox/isolation.py, shell.py): what a shell command of the agent can reach,
and that nothing it starts outlives it, a `setsid` daemon included."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from cuda_agent.home import home
from cuda_agent.sandbox import CommandRunner, claim_tool_user, prepare_workspace
from cuda_agent.sandbox.freezer import RAN_MS, Freezer, FrozenBlock
from cuda_agent.sandbox import syscall_filter
from cuda_agent.sandbox.isolation import Confinement, UserSlot, claim_user, eval_uids, kill_user_processes
from cuda_agent.tasks import EXAMPLES_DIR, load_task
from cuda_agent.workspace import create_workspace, read_manifest

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox users need root")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def workspace(tmp_path):
    base = tmp_path / "shared"
    base.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(base, 0o755)
    return create_workspace(load_task(EXAMPLES_DIR / "scale_bias_relu.py"), base / "ws", "cpu").path


@pytest.fixture
def isolated(workspace):
    """As root: a workspace handed to a tool user of its own; otherwise the current user's runner."""
    slot = claim_tool_user()
    if slot is not None:
        prepare_workspace(workspace, slot.user, set(read_manifest(workspace)[0].protected))
    runner = CommandRunner(workspace, slot)
    yield workspace, runner
    runner.close()


def sh(runner, command, timeout=20):
    r = runner.run(command, timeout=timeout)
    return r.text(), r.exit_code


def _pid_of(ws: Path, name: str) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        text = (ws / name).read_text().strip() if (ws / name).exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"{name} was not written")


def test_a_setsid_daemon_is_gone_when_its_command_ends(isolated):
    """A double-forked `setsid` process left the command's process group and session; it must not
    live on to change the workspace after the harness took its snapshot."""
    ws, runner = isolated
    out, code = sh(runner, "setsid bash -c 'echo $$ > daemon.pid; exec sleep 600' < /dev/null > /dev/null 2>&1 & "
                           "sleep 0.5; echo started")
    assert code == 0 and "started" in out
    pid = _pid_of(ws, "daemon.pid")
    if runner.user is None and not runner.own_pid_namespace():
        pytest.skip("not root and no PID namespace here: nothing can reach a setsid process")
    host_pid = _host_pid(pid, ws)
    assert host_pid is None or _wait_gone(host_pid), "the setsid daemon outlived its command"


def _host_pid(pid_in_namespace: int, ws: Path) -> int | None:
    """The daemon's pid as this process sees it (inside a PID namespace $$ is the namespace's)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if cwd == str(ws) and nspid and int(nspid[-1]) == pid_in_namespace and "sleep" in \
                Path(f"/proc/{entry}/comm").read_text():
            return int(entry)
    return None


def test_a_daemon_cannot_write_the_workspace_after_its_command(isolated):
    """The attack itself: a background writer started by one command keeps rewriting a file; after
    the command returns the file must stay as it is."""
    ws, runner = isolated
    if runner.user is None and not runner.own_pid_namespace():
        pytest.skip("not root and no PID namespace here: nothing can reach a setsid process")
    sh(runner, "setsid bash -c 'while true; do date +%s%N > kernels/late.txt; sleep 0.05; done' "
               "< /dev/null > /dev/null 2>&1 & sleep 0.3")
    time.sleep(0.3)
    first = (ws / "kernels/late.txt").read_text()
    time.sleep(0.5)
    assert (ws / "kernels/late.txt").read_text() == first


def test_a_timed_out_command_and_its_children_are_killed(isolated):
    ws, runner = isolated
    r = runner.run("sleep 600 & echo $! > bg.pid; sleep 600", timeout=1)
    assert r.timed_out and r.exit_code is None
    text = (ws / "bg.pid").read_text().strip()
    assert text.isdigit()
    host = _host_pid(int(text), ws)
    assert host is None or _wait_gone(host)


def test_commands_run_in_a_pid_namespace_of_their_own_where_the_kernel_allows(isolated):
    _, runner = isolated
    if runner.user is None:
        probe = subprocess.run(["unshare", "--user", "--pid", "--fork", "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip("this kernel refuses user and PID namespaces to unprivileged users")
    assert runner.own_pid_namespace()


@root_only
def test_commands_run_as_an_unprivileged_user(isolated):
    ws, runner = isolated
    out, code = sh(runner, "id -u; echo $HOME")
    assert code == 0 and out.split() == [str(runner.user.uid), str(ws)]
    assert runner.user.uid != 0


@root_only
def test_the_tool_user_can_write_kernels_but_not_protected_files(isolated):
    ws, runner = isolated
    before = {p: (ws / p).read_bytes() for p in ("model.py", "binding.cpp", "utils/verify.sh", ".cuda_agent/manifest.json")}
    out, code = sh(runner, "echo ok > kernels/mine.cu && echo ok > model_new.py && echo ok > notes.txt && echo done")
    assert out.strip() == "done"
    for attack in ("echo x >> model.py", "rm -f model.py", "mv binding.cpp b.cpp", "echo x > utils/verify.sh",
                   "rm -rf utils", "echo '{}' > .cuda_agent/manifest.json", "chmod 666 model.py"):
        sh(runner, attack)
    assert {p: (ws / p).read_bytes() for p in before} == before


@root_only
def test_the_harness_key_is_out_of_reach(isolated):
    ws, runner = isolated
    key = home() / "workspace.key"
    assert key.exists()
    out, code = sh(runner, f"cat {key}")
    assert code != 0 and "Permission denied" in out


@root_only
def test_secrets_are_not_in_the_environment(isolated, monkeypatch):
    ws, _ = isolated
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    runner = CommandRunner(ws, claim_tool_user())
    try:
        out, _ = sh(runner, "env")
    finally:
        runner.close()
    assert "sk-secret" not in out and "CUDA_AGENT_HOME" not in out


@root_only
def test_commands_have_no_network(isolated):
    _, runner = isolated
    assert runner.describe().endswith("no network")
    out, _ = sh(runner, "cat /proc/net/dev | tail -n +3 | awk '{print $1}'")
    assert out.split() == ["lo:"]


def test_commands_make_no_namespace_of_their_own_but_threads_forks_and_programs_run(isolated):
    """A user namespace would make the sandbox user root over a network namespace of its own, where a
    packet looped by tc keeps a CPU busy in softirq through every stop (syscall_filter)."""
    _, runner = isolated
    out, code = sh(runner, "grep Seccomp: /proc/self/status; unshare -Urn true 2>/dev/null; echo unshare=$?; "
                           "unshare -U true 2>/dev/null; echo user=$?; "
                           f"{sys.executable} -c 'import threading, subprocess, os; t = threading.Thread(target=print, "
                           "args=(\"thread\",)); t.start(); t.join(); print(subprocess.run([\"echo\", \"program\"], "
                           "capture_output=True, text=True).stdout.strip()); pid = os.fork(); pid or os._exit(3); "
                           "print(\"fork\", os.waitpid(pid, 0)[1] >> 8)'")
    assert code == 0, out
    assert out.split() == ["Seccomp:", "2", "unshare=1", "user=1", "thread", "program", "fork", "3"], out


def test_the_filter_refuses_namespaces_clone3_io_uring_and_handing_descriptors_on_and_nothing_else_a_program_needs():
    probe = """
import array, ctypes, errno, os, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    r = libc.syscall(*args)
    return 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]
seen = {'unshare_user': call(272, 0x10000000), 'unshare_net': call(272, 0x40000000), 'unshare_time': call(272, 0x80),
        'unshare_files': call(272, 0x400), 'clone_newuser': call(56, 0x10000000 | 17, 0, 0, 0, 0),
        'setns': call(308, 0, 0), 'clone3': call(435, 0, 0), 'io_uring_setup': call(425, 8, 0),
        'bpf': call(321, 0, 0, 0), 'x32_getpid': call(0x40000000 | 39), 'getpid': call(39),
        'pidfd_getfd': call(438, 0, 0, 0), 'sendmmsg': call(307, -1, 0, 0, 0)}
a, b = socket.socketpair()
try:
    a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [b.fileno()]))])
    seen['sendmsg_fd'] = 'ok'
except OSError as e:
    seen['sendmsg_fd'] = errno.errorcode[e.errno]
try:
    a.sendmsg([b'x'])
    seen['sendmsg'] = 'ok'
except OSError as e:
    seen['sendmsg'] = errno.errorcode[e.errno]
a.send(b'y'); a.sendall(b'z'); seen['send'] = 'ok' if b.recv(8) == b'yz' else 'lost'
r, w = os.pipe(); os.write(w, b'p'); seen['pipe'] = 'ok' if os.read(r, 1) == b'p' else 'lost'
t = threading.Thread(target=lambda: seen.update(thread='ok')); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
seen['fork'] = 'ok' if os.waitpid(pid, 0)[1] == 0 else 'failed'
print(sorted(seen.items()))
"""
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64's system call numbers")
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60,
                          preexec_fn=Confinement(network=True, new_session=False).preexec())
    assert done.returncode == 0, done.stderr
    assert dict(eval(done.stdout)) == {
        "unshare_user": "EPERM", "unshare_net": "EPERM", "unshare_time": "EPERM", "unshare_files": "ok",
        "clone_newuser": "EPERM", "setns": "EPERM", "bpf": "EPERM", "clone3": "ENOSYS", "io_uring_setup": "ENOSYS",
        "x32_getpid": "ENOSYS", "getpid": "ok", "thread": "ok", "fork": "ok", "pidfd_getfd": "EPERM",
        "sendmmsg": "EPERM", "sendmsg_fd": "EPERM", "sendmsg": "EPERM", "send": "ok", "pipe": "ok"}


def test_a_process_whose_filter_cannot_be_installed_is_not_started(monkeypatch):
    """Fails closed: where the machine took the filter before, a process that cannot have it does not run
    without it (Popen raises, as for any confinement that fails). A machine that takes none says so."""
    from cuda_agent.sandbox import isolation

    assert syscall_filter.works() == (syscall_filter.program() is not None)  # this kernel takes it
    monkeypatch.setattr(isolation, "install_filter", lambda: False)
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run([sys.executable, "-S", "-c", "print('ran')"], timeout=60,
                       preexec_fn=Confinement(network=True, new_session=False).preexec())
    assert Confinement(syscall_filter=False).syscall_filter is False
    if os.geteuid() == 0:
        monkeypatch.setattr(isolation, "filter_works", lambda: False)
        assert "takes no seccomp filter" in isolation.sandbox_user()[1]


def test_the_filter_is_known_for_both_machines_and_its_jumps_land_inside_it():
    for machine in ("x86_64", "aarch64"):
        code = syscall_filter.program(machine)
        assert code[-1][0] == code[-2][0] == 0x06  # ends in returns
        for i, (op, jt, jf, _) in enumerate(code):
            assert op == 0x06 or i + 1 + max(jt, jf) < len(code)
    assert syscall_filter.program("riscv64") is None  # unknown numbers: no filter rather than a wrong one


@root_only
def test_two_runs_get_two_tool_users(workspace):
    first, second = claim_tool_user(), claim_tool_user()
    try:
        assert first.user.uid != second.user.uid and first.user.name.startswith("cuda-agent-tool-")
    finally:
        first.release()
        second.release()


@root_only
def test_releasing_a_sandbox_user_kills_what_still_runs_as_it():
    slot = claim_user()  # the machine's slots: a folder of its own would take users that others hold
    assert slot is not None
    u = slot.user

    def become():
        os.setsid()
        os.setgroups([])
        os.setgid(u.gid)
        os.setuid(u.uid)

    escaped = subprocess.Popen(["sleep", "60"], preexec_fn=become)
    again = claim_user()  # the slot is held: another claim gets another user
    assert again is not None and again.user.uid != u.uid
    again.release()
    slot.release()
    assert escaped.wait(timeout=10) == -9


# The programs below run as a sandbox user with two descriptors: `alive`, a pipe's write end that
# every process they start inherits (the test sees its end when the last of them is gone: no
# listing of /proc, which a fork chain outruns, ps included), and `counter`, a file they write
# progress to.
FORK_CHAIN = """
import os, sys, time
alive, counter = int(sys.argv[1]), int(sys.argv[2])
os.write(alive, b"%d\\n" % os.getpid())
if os.fork() == 0:          # a daemon in a session of its own
    os.setsid()
    time.sleep(600)
    os._exit(0)
for _ in range(2):          # three chains side by side
    if os.fork() == 0:
        break
n = 0
while True:                 # each generation forks the next and exits: no pid lives long
    n += 1
    os.pwrite(counter, b"%12d" % n, 0)
    if os.fork() > 0:
        os._exit(0)
"""

SPINNER = """
import os, sys
os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
while True:
    pass
"""

# Runs as root: starts the program as the user, and reaps every orphan at once (a child subreaper)
# as a machine's init does; an init that reaps slowly (this one's) lets a chain's zombies use up
# the pids, and the chain ends by itself.
REAPER = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
uid, gid, code, fds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
if os.fork() == 0:
    os.setsid()
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    os.execv(sys.executable, [sys.executable, "-S", "-c", code, *fds])
for fd in fds:
    os.close(int(fd))
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.01)
"""


@dataclass
class Sandboxed:
    slot: UserSlot
    pid: int       # the program's first process
    alive: int     # the pipe's read end: EOF once all its processes are gone
    counter: int

    def progress(self) -> int:
        return int(os.pread(self.counter, 12, 0) or b"0")

    def ends_within(self, seconds: float) -> bool:
        readable, _, _ = select.select([self.alive], [], [], seconds)
        return bool(readable) and os.read(self.alive, 1) == b""


@contextmanager
def sandboxed(code: str) -> Iterator[Sandboxed]:
    """`code` running as a sandbox user of its own (the machine's slots, so that no concurrent
    test's user is touched); whatever the code under test missed is killed at the end."""
    slot = claim_user()
    assert slot is not None
    alive, write_end = os.pipe()
    counter, path = tempfile.mkstemp()
    os.unlink(path)
    reaper = subprocess.Popen([sys.executable, "-S", "-c", REAPER, str(slot.user.uid), str(slot.user.gid), code,
                               str(write_end), str(counter)], pass_fds=(write_end, counter), cwd="/")
    os.close(write_end)
    try:
        with os.fdopen(os.dup(alive), "rb", buffering=0) as f:
            pid = int(f.readline())
        yield Sandboxed(slot, pid, alive, counter)
    finally:
        box = Sandboxed(slot, 0, alive, counter)
        for _ in range(100):
            kill_user_processes(slot.user.uid)
            if box.ends_within(0.1):
                break
        reaper.kill()
        reaper.wait()
        slot.release()
        os.close(alive)
        os.close(counter)


def _wait_progress(box: Sandboxed, beyond: int, seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while (n := box.progress()) <= beyond and time.monotonic() < deadline:
        time.sleep(0.01)
    return n


@root_only
@pytest.mark.parametrize("attempt", range(5))
def test_a_fork_chain_that_outruns_a_listing_of_proc_dies_with_its_user(attempt):
    """A solution leaves a chain of processes, each replacing itself before a listing of /proc
    reaches it, and a daemon: killing the user's processes (what releasing its slot does) must end
    all of it at once, not seconds after the verdict."""
    with sandboxed(FORK_CHAIN) as box:
        assert _wait_progress(box, 200) > 200, "the chain did not start"
        box.slot.kill_processes()
        assert box.ends_within(1.0), "the chain or its daemon outlived the kill"


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@root_only
def test_what_a_solution_left_running_is_frozen_while_baselines_are_timed():
    """A spinning process (threads a solution left behind) and a fork chain, as two sandbox users:
    inside `frozen` neither uses any CPU nor makes progress, and both run again after it."""
    with sandboxed(SPINNER) as spinner, sandboxed(FORK_CHAIN) as chain:
        assert _wait_progress(chain, 200) > 200, "the chain did not start"
        uids = [spinner.slot.user.uid, chain.slot.user.uid]
        assert set(uids) <= set(eval_uids())
        with Freezer(uids) as freezer, freezer.frozen() as block:
            ticks, count = _cpu_ticks(spinner.pid), chain.progress()
            time.sleep(0.3)
            assert block.stopped and _state_of(spinner.pid) == "T"
            assert _cpu_ticks(spinner.pid) == ticks, "the spinner ran while frozen"
            assert chain.progress() == count, "the chain forked on while frozen"
        assert block.quiet, block
        assert _wait_progress(chain, count, 5.0) > count, "the chain was not continued"
        deadline = time.monotonic() + 5
        while _cpu_ticks(spinner.pid) == ticks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cpu_ticks(spinner.pid) > ticks, "the spinner was not continued"


@root_only
def test_frozen_processes_run_again_when_the_timed_block_raises():
    with sandboxed(SPINNER) as spinner:
        with pytest.raises(RuntimeError), Freezer([spinner.slot.user.uid]) as freezer, freezer.frozen():
            assert _state_of(spinner.pid) == "T"
            raise RuntimeError("the baseline failed")
        deadline = time.monotonic() + 5
        while _state_of(spinner.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state_of(spinner.pid) in "RS"


def _uids_of(pid: int) -> list[str]:
    return next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:")).split()[1:]


def _readable_as(user, pid: int) -> bool:
    """Whether a process of `user` may read /proc/`pid`/environ (ptrace's read access)."""
    child = os.fork()
    if child == 0:
        code = 2
        try:
            os.setgroups([])
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
            try:
                Path(f"/proc/{pid}/environ").read_bytes()
                code = 0
            except PermissionError:
                code = 1
        finally:
            os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    assert code in (0, 1), code
    return code == 0


def _continued(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _state_of(pid) == "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    return _state_of(pid) in "RS"


@root_only
def test_a_kept_freezer_stops_the_user_in_every_block_through_one_helper_that_holds_nothing_of_the_harness():
    """A paired run freezes the solution's user around each round's baseline windows (about 20 rounds): one
    helper, started once, does every round. It is the sandbox user's process, not dumpable and root in its
    saved uid (the user's processes may read their own /proc entries, not its: nor ptrace it), holds no
    descriptor of the harness but its two pipes (a lock it kept open would outlive the harness's own) and
    is not taken for a process left running. Each block says it was quiet: the spinner never ran in it."""
    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        with Freezer([uid]) as freezer:
            helpers = set()
            for _ in range(5):
                with freezer.frozen() as block:
                    helper = freezer._helpers[uid]
                    assert block.stopped and helper is not None and _state_of(spinner.pid) == "T"
                    helpers.add(helper.proc.pid)
                    ticks = _cpu_ticks(spinner.pid)
                    time.sleep(0.05)
                    assert _cpu_ticks(spinner.pid) == ticks, "the spinner ran while frozen"
                assert block.quiet and block.ran_ms < RAN_MS, block
                assert _continued(spinner.pid)
            assert len(helpers) == 1
            (pid,) = helpers
            assert _uids_of(pid) == [str(uid), str(uid), "0", str(uid)]
            assert [_readable_as(spinner.slot.user, p) for p in (spinner.pid, pid)] == [True, False]  # not dumpable
            assert sorted(os.listdir(f"/proc/{pid}/fd")) == ["0", "1", "2"]   # stdin, stdout, /dev/null
        assert not _alive(pid), "the helper outlived the freezer"


@root_only
@pytest.mark.parametrize("attack", ["stop", "kill"])
def test_a_helper_stopped_or_killed_by_the_user_between_blocks_freezes_nothing_less(attack):
    """The user's processes may signal its helper (it is theirs) while they run, between blocks: the next
    block still stops all of them (a helper for every signal) and continues them after."""
    import signal

    with sandboxed(SPINNER) as spinner:
        uid = spinner.slot.user.uid
        with Freezer([uid]) as freezer:
            with freezer.frozen() as block:
                assert block.stopped
            helper = freezer._helpers[uid]
            os.kill(helper.proc.pid, signal.SIGSTOP if attack == "stop" else signal.SIGKILL)
            for _ in range(3):
                with freezer.frozen() as block:
                    assert block.stopped and _state_of(spinner.pid) == "T"
                    ticks = _cpu_ticks(spinner.pid)
                    time.sleep(0.05)
                    assert _cpu_ticks(spinner.pid) == ticks, "the spinner ran while frozen"
                assert block.quiet, block
                assert _continued(spinner.pid)
            assert freezer._helpers[uid] is None   # replaced for good: a stopped helper costs one wait, once
        assert not _alive(helper.proc.pid)


def _self_continuing() -> str:
    """The corpus case self_continuing_spinner's process (a spinner whose one-shot timers send it SIGCONT), as
    a program for `sandboxed`: it says its pid first."""
    import ast

    source = (Path(__file__).resolve().parent.parent / "hacks" / "cpu" / "self_continuing_spinner" / "model_new.py")
    code = next(node.value.value for node in ast.parse(source.read_text()).body
                if isinstance(node, ast.Assign) and node.targets[0].id == "SELF_CONTINUING")
    return 'import os, sys\nos.write(int(sys.argv[1]), b"%d\\n" % os.getpid())\n' + code


@root_only
def test_a_process_that_continues_itself_makes_the_block_not_quiet():
    """Stopping cannot hold a process whose own timers send it SIGCONT (2026-11-28 review: it ran at 70-100%
    through every block, old helper or kept): the block must say that it ran, so that the timing it
    covered is not believed (harness/profiling.py fails the evaluation)."""
    with sandboxed(_self_continuing()) as attacker:
        uid = attacker.slot.user.uid
        time.sleep(0.3)   # its timers armed
        with Freezer([uid]) as freezer:
            blocks = []
            for _ in range(3):
                with freezer.frozen() as block:
                    time.sleep(0.2)
                blocks.append(block)
        # every block caught; by how much it ran depends on the CPU it got (a loaded CI machine): one is enough
        assert all(not b.quiet for b in blocks) and any(b.ran_ms > RAN_MS for b in blocks), blocks
        assert "ran for" in blocks[0].why_not_quiet()


HOLDER = """
import ctypes, mmap, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
held = threading.Event()

def hold(files_of_its_own):
    global f, kept
    if files_of_its_own:   # a descriptor table of this thread's own: not in /proc/PID/fd
        assert libc.unshare(0x400) == 0   # CLONE_FILES
    f = open({path!r}, "rb")
    if not files_of_its_own:   # there: the descriptor alone
        kept = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    if {how!r} == "map":   # a mapping alone: the descriptor closed
        f.close()
    held.set()
    time.sleep(600)

if {how!r} in ("fd", "map"):
    threading.Thread(target=hold, args=(False,), daemon=True).start()
    held.wait()
    os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
    time.sleep(600)
threading.Thread(target=hold, args=({how!r} == "thread_files",)).start()
held.wait()
os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
if {how!r} == "leader_gone":   # /proc/PID/fd and /proc/PID/maps now read empty; the thread holds both
    libc.pthread_exit(None)
time.sleep(600)
"""


@root_only
@pytest.mark.parametrize("how", ["fd", "map", "leader_gone", "thread_files"])
def test_a_process_of_the_solution_that_holds_the_gpu_makes_the_block_not_quiet_unless_it_is_the_child(how):
    """Kernels queued before the stop run on through it: a process of the solution's user that holds the
    GPU (here a file standing for /dev/nvidia*: open, only mapped, held by a thread whose leader has exited or
    in a thread's own descriptor table) fails the block, but the child's own."""
    fake = Path(tempfile.mkdtemp(prefix="cuda_agent_gpu_")) / "nvidia0"
    fake.write_bytes(b"x" * 4096)
    os.chmod(fake.parent, 0o755)
    os.chmod(fake, 0o644)
    try:
        with sandboxed(HOLDER.format(path=str(fake), how=how)) as box:
            for allowed, holders in (((), (box.pid,)), ((box.pid,), ())):
                with Freezer([box.slot.user.uid], gpu_allowed=allowed, gpu_files=(str(fake.parent),)) as freezer:
                    with freezer.frozen() as block:
                        pass
                assert block.gpu_holders == holders and block.quiet == (not holders), block
            assert "held the GPU while the baselines were timed" in \
                FrozenBlock(stopped=True, gpu_holders=(box.pid,)).why_not_quiet()
    finally:
        fake.unlink()
        fake.parent.rmdir()


def test_a_harness_child_runs_at_normal_priority_whatever_its_parents(tmp_path):
    """Ray runs its workers at nice 15; the solution child they start times, so it must not."""
    from cuda_agent.sandbox import Process

    probe = tmp_path / "probe.py"
    probe.write_text("import json, os, sys\n"
                     "os.write(int(sys.argv[2]), (json.dumps({'nice': os.getpriority(os.PRIO_PROCESS, 0)}) + '\\n').encode())\n")
    script = (f"import os; os.nice(5); from pathlib import Path; from cuda_agent.sandbox import Process\n"
              f"p = Process('probe', cwd=Path({str(tmp_path)!r}), log=Path({str(tmp_path / 'log')!r}), "
              f"env={{'PYTHONPATH': {str(tmp_path)!r}}})\nprint(p.recv(30)['nice']); p.close()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    expected = 0 if os.geteuid() == 0 else 5  # only root may lower a priority
    assert out.stdout.strip() == str(expected)


def _block_over(monkeypatch, before: dict, after: dict):
    """A freezer's block for one made-up user whose listings as the block begins and ends are these."""
    from cuda_agent.sandbox import freezer as freezing

    seen = iter([before, after])
    monkeypatch.setattr(freezing, "listing", lambda uid, only=None: next(seen))
    monkeypatch.setattr(freezing.Freezer, "_signal", lambda self, uid, sig: True)
    freezer = freezing.Freezer([])
    freezer.uids = [4242]
    with freezer.frozen() as block:
        pass
    return block


def test_a_thread_that_ends_while_another_starts_is_a_change_whatever_the_totals(monkeypatch):
    """Run time is compared thread by thread: a process whose long-lived thread ends while a new one runs
    keeps its thread count and may lower its total, yet two threads came and went, which only a process
    that ran can do."""
    from cuda_agent.sandbox.user_signals import Seen, Thread

    block = _block_over(monkeypatch, {7: Seen({7: Thread("T", 5_000_000_000, 90), 8: Thread("T", 10, 3)})},
                        {7: Seen({7: Thread("T", 5_000_000_000, 90), 9: Thread("T", 1_000_000, 4)})})
    assert block.stopped and (block.ran_ms, block.changed, block.quiet) == (0.0, 2, False)


def test_a_stopped_thread_scheduled_in_is_not_quiet_however_briefly(monkeypatch):
    """A process continued by its own timer may do its work in a thread or child that starts and ends inside
    the block, and stop itself again: its own run time grows by ~0.4 ms, below the late stop's allowance,
    but a thread seen stopped was scheduled in (2026-11-28 review: 150 ms of work in 7 of 8 blocks called
    quiet before this)."""
    from cuda_agent.sandbox.user_signals import Seen, Thread

    block = _block_over(monkeypatch, {7: Seen({7: Thread("T", 5_000_000_000, 90)})},
                        {7: Seen({7: Thread("T", 5_000_400_000, 93)})})
    assert (block.ran_ms, block.scheduled, block.quiet) == (0.4, 1, False)


def test_a_thread_dead_as_the_block_begins_and_gone_at_its_end_is_no_change(monkeypatch):
    """A thread whose exit is over (Z or X, not yet reaped) as the block begins runs nothing more: that it is
    gone at the end is no change (an honest child's thread ending then failed a CI run, 2026-11-28)."""
    from cuda_agent.sandbox.user_signals import Seen, Thread

    block = _block_over(monkeypatch, {7: Seen({7: Thread("T", 100, 5), 8: Thread("Z", 10, 2), 9: Thread("X", 1, 1)})},
                        {7: Seen({7: Thread("T", 100, 5)})})
    assert block.stopped and block.quiet, block


def test_a_process_still_exiting_as_the_block_begins_counts_like_any_other(monkeypatch):
    """No stop reaches a process that is exiting, and its exit may run hundreds of milliseconds in the kernel
    (gigabytes of pages freed: 177-288 ms of CPU inside a block, 2026-11-28 review). The block waits for it;
    one still exiting when the wait is over, then gone, is a change."""
    from cuda_agent.sandbox import freezer as freezing
    from cuda_agent.sandbox.user_signals import Seen, Thread

    stopped = {7: Seen({7: Thread("T", 100, 5)})}
    ended = []   # set inside the block: process 8's exit is over by its end
    monkeypatch.setattr(freezing, "listing", lambda uid, only=None: stopped if ended else
                        {**stopped, 8: Seen({8: Thread("R", 10, 2)})})
    monkeypatch.setattr(freezing.Freezer, "_signal", lambda self, uid, sig: True)
    freezer = freezing.Freezer([])
    freezer.uids, freezer._patience_s = [4242], 0.01
    with freezer.frozen() as block:
        ended.append(True)
    assert not block.stopped and block.changed == 1 and not block.quiet, block
