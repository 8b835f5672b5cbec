"""The fork server (sandbox/forkserver.py): a forked child is what a fresh interpreter started by Popen
would be (folder, path, environment, arguments, descriptors, session, user, limits, exit status), ours
is not preloaded, and the server's children die with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from cuda_agent.sandbox import ChildFailed, Process, claim_user
from cuda_agent.sandbox import forkserver

PROBE = """
import json, os, resource, sys
before = sorted(m for m in sys.modules if m == 'torch' or m.startswith('cuda_agent'))
fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))
state = {'cwd': os.getcwd(), 'path0': sys.path[0], 'fds': fds, 'argv': sys.argv[1:], 'main': __name__,
         'home': os.environ.get('HOME'), 'mine': os.environ.get('CUDA_AGENT_PROBE'), 'before': before,
         'leader': os.getpgid(0) == os.getpid() == os.getsid(0), 'uid': os.getuid(),
         'as': resource.getrlimit(resource.RLIMIT_AS)[0], 'stdin': os.read(0, 10).decode(),
         'seccomp': [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')]}
os.write(int(sys.argv[2]), (json.dumps(state) + '\\n').encode())
line = os.fdopen(int(sys.argv[1])).readline()
print('to the log:', line.strip())
action = json.loads(line)
if action == 'segv':
    os.kill(os.getpid(), 11)
if action == 'sleep':
    import time; time.sleep(600)
if action == 'attack':  # its server: signal it, read its memory, find a descriptor of it left open; a namespace
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def namespace():
        if libc.unshare(0x10000000 | 0x40000000) != 0:  # a user namespace and a network namespace of its own
            raise OSError(ctypes.get_errno(), 'unshare')

    tried = {}
    for name, how in (('signal', lambda: os.kill(os.getppid(), 0)),
                      ('memory', lambda: open(f'/proc/{os.getppid()}/mem', 'rb').close()),
                      ('fds', lambda: os.listdir(f'/proc/{os.getppid()}/fd')), ('namespace', namespace)):
        try:
            how()
            tried[name] = 'done'
        except OSError as e:
            tried[name] = type(e).__name__
    os.write(int(sys.argv[2]), (json.dumps(tried) + '\\n').encode())
    sys.exit(0)
sys.exit(action)
"""


@pytest.fixture(scope="module")
def probe() -> Iterator[Path]:
    """One folder for the module's tests (so that they share a server: each start imports torch), readable
    by the sandbox users."""
    folder = Path(tempfile.mkdtemp(prefix="cuda_agent_probe_"))
    os.chmod(folder, 0o755)
    (folder / "probe.py").write_text(PROBE)
    (folder / "work").mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def start(probe: Path, forked: bool, **kwargs) -> Process:
    env = {"PYTHONPATH": str(probe), "CUDA_AGENT_PROBE": kwargs.pop("mine", "1")}
    return Process("probe", cwd=probe / "work", log=probe / "log", fork_server=forked, env=env, **kwargs)


def test_a_forked_child_is_what_a_fresh_one_would_be(probe):
    states = {}
    for forked in (False, True):
        p = start(probe, forked)
        try:
            states[forked] = p.recv(60)
            p.send(7)
            assert p.proc.wait(30) == 7
        finally:
            p.close()
        assert "to the log: 7" in (probe / "log").read_text()
    fresh, forked = states[False], states[True]
    for state in (fresh, forked):
        assert state["cwd"] == state["path0"] == state["home"] == str(probe / "work")
        assert state["main"] == "__main__" and state["mine"] == "1" and state["leader"] and state["stdin"] == ""
        assert len(state["fds"]) <= 6 and {0, 1, 2, *map(int, state["argv"])} <= set(state["fds"])  # + listdir's own
    assert fresh["before"] == [] and forked["before"] == ["torch"]  # torch preloaded, nothing of ours
    assert forked["uid"] == fresh["uid"]


def test_exit_by_signal_and_kill_read_as_from_popen(probe):
    for action, wait_s, reason, code in (("segv", 30, "SIGSEGV", -signal.SIGSEGV),
                                         ("sleep", 0.5, "timed out", -signal.SIGKILL)):
        p = start(probe, True)
        try:
            p.recv(60)
            p.send(action)
            with pytest.raises(ChildFailed, match=reason):
                p.recv(wait_s)
            assert p.proc.wait(10) == code
        finally:
            p.close()


def test_per_child_variables_share_one_server_and_others_do_not(probe):
    used = []
    for mine, threads in (("a", {}), ("b", {}), ("a", {"OMP_NUM_THREADS": "3"})):
        p = Process("probe", cwd=probe / "work", log=probe / "log", fork_server=True,
                    env={"PYTHONPATH": str(probe), "CUDA_AGENT_PROBE": mine, **threads})
        try:
            assert p.recv(60)["mine"] == mine
            p.send(0)
            used.append(p.proc.server)
        finally:
            p.close()
    assert used[0] is used[1] and used[2] is not used[0]
    assert forkserver.server_env({"HOME": "/x", "CUDA_AGENT_HOME": "/y", "OMP_NUM_THREADS": "1"}) == {
        "OMP_NUM_THREADS": "1"}


@pytest.mark.skipif(os.geteuid() != 0, reason="sandbox users need root")
def test_a_forked_child_gets_its_confinement(probe):
    slot = claim_user()
    try:
        os.chown(probe / "work", slot.user.uid, slot.user.gid)
        p = start(probe, True, user=slot.user, memory_bytes=3 << 30, limit_address_space=True)
        try:
            state = p.recv(60)
            p.send("attack")
            tried = p.recv(30)
        finally:
            p.close()
    finally:
        slot.release()
    assert state["uid"] == slot.user.uid and state["as"] == 3 << 30
    assert state["seccomp"] == ["2"]  # syscall_filter: in filter mode
    assert tried == {"signal": "PermissionError", "memory": "PermissionError", "fds": "PermissionError",
                     "namespace": "PermissionError"}, tried


def test_a_child_whose_confinement_fails_is_refused_as_popen_refuses_it(probe):
    """Process() returns only once the confinement holds; where it cannot be set up, no child runs."""
    with pytest.raises(subprocess.SubprocessError, match="could not be set up: FileNotFoundError"):
        Process("probe", cwd=probe / "no-such-folder", log=probe / "log", fork_server=True,
                env={"PYTHONPATH": str(probe)})


def test_a_server_whose_spawn_went_unanswered_is_replaced_and_closed_once_idle(probe):
    """A late reply must never be read as the next spawn's: such a server takes no more requests."""
    p = start(probe, True)
    try:
        p.recv(60)
        stuck = p.proc.server
        stuck._stale = True  # what a spawn that timed out leaves
        q = start(probe, True)
        try:
            q.recv(60)
            assert q.proc.server is not stuck
            assert stuck.proc.poll() is None  # p still runs there: not closed under it
            q.send(0)
        finally:
            q.close()
        p.send(0)
        assert p.proc.wait(30) == 0
    finally:
        p.close()
    forkserver._close_idle_retired()  # as the next server's start does
    assert stuck.proc.wait(15) is not None and stuck not in forkserver._retired


def test_the_servers_children_die_with_it(probe):
    p = start(probe, True, mine="dies")
    pid = p.proc.pid
    try:
        p.recv(60)
        forkserver.close_all()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    finally:
        p.close()


def test_a_server_that_cannot_start_leaves_a_fresh_interpreter(probe, monkeypatch, caplog):
    monkeypatch.setattr(forkserver, "BOOT", "raise SystemExit('no server today')")
    p = Process("probe", cwd=probe / "work", log=probe / "log", fork_server=True,
                env={"PYTHONPATH": str(probe), "MARKER": "fallback"})
    try:
        assert p.recv(60)["before"] == []  # a fresh interpreter: nothing preloaded
        p.send(0)
        assert p.proc.wait(30) == 0
    finally:
        p.close()
    assert "no server today" in caplog.text


def test_the_switch_overrides_the_callers_default(monkeypatch):
    monkeypatch.setenv(forkserver.SWITCH_ENV, "0")
    assert forkserver.wanted(True) is False
    monkeypatch.setenv(forkserver.SWITCH_ENV, "1")
    assert forkserver.wanted(False) is True
    monkeypatch.delenv(forkserver.SWITCH_ENV)
    assert forkserver.wanted(True) is True and forkserver.wanted(False) is False


def test_the_least_recently_used_idle_server_goes_first(probe, monkeypatch):
    forkserver.close_all()
    monkeypatch.setattr(forkserver, "MAX_SERVERS", 1)
    for n in ("4", "5"):
        p = Process("probe", cwd=probe / "work", log=probe / "log", fork_server=True,
                    env={"PYTHONPATH": str(probe), "OMP_NUM_THREADS": n})
        try:
            p.recv(60)
            p.send(0)
            p.proc.wait(30)
        finally:
            p.close()
    mine = [k for k in forkserver._servers if k[0] == os.getpid()]
    assert len(mine) == 1 and ("OMP_NUM_THREADS", "5") in mine[0][1]


def test_messages_stay_plain_data():
    """A request holds no object of ours: unpickling one would import our package into the server."""
    import dataclasses
    import pickle

    from cuda_agent.sandbox.isolation import Confinement, SandboxUser
    blob = pickle.dumps({"confinement": dataclasses.asdict(Confinement(SandboxUser(1, 2, "u"), 5, network=False))})
    assert b"cuda_agent" not in blob
    assert json.loads(json.dumps(pickle.loads(blob)))["confinement"]["user"] == {"uid": 1, "gid": 2, "name": "u"}


def test_a_servers_log_has_no_name_so_a_killed_client_leaves_no_file(probe):
    """Its log has no name: a client killed without closing it (a Ray worker, say) leaves nothing in /tmp."""
    before = set(Path(tempfile.gettempdir()).glob("cuda_agent_forkserver_*"))
    server = forkserver.ForkServer(forkserver.server_env(dict(os.environ)))
    try:
        assert set(Path(tempfile.gettempdir()).glob("cuda_agent_forkserver_*")) == before
        assert server.log_tail() == "(no output)"
    finally:
        server.close()


def test_where_a_gpu_is_visible_the_server_preloads_nothing_that_initialises_cuda(monkeypatch):
    """Importing torch's extension loader initialises CUDA where a GPU is visible (H100, 2026-11-27), and a child
    forked after that cannot use CUDA: those servers preload torch alone."""
    monkeypatch.setattr(forkserver.Path, "exists", lambda self: str(self) == "/dev/nvidiactl")
    assert forkserver.gpu_visible({})
    assert forkserver.gpu_visible({"CUDA_VISIBLE_DEVICES": "0"})
    assert not forkserver.gpu_visible({"CUDA_VISIBLE_DEVICES": ""})
    assert not forkserver.gpu_visible({"CUDA_VISIBLE_DEVICES": "-1"})
    monkeypatch.setattr(forkserver.Path, "exists", lambda self: False)
    assert not forkserver.gpu_visible({"CUDA_VISIBLE_DEVICES": "0"})
    assert forkserver.PRELOAD_WITH_GPU == ("torch",)


@pytest.mark.cuda
def test_a_forked_child_uses_the_gpu():
    """On the device: a child forked from the server initialises CUDA and computes there."""
    tmp_path = Path(tempfile.mkdtemp(prefix="cuda_agent_probe_"))
    os.chmod(tmp_path, 0o755)
    (tmp_path / "gpu.py").write_text(
        "import json, os, sys, torch\n"
        "x = torch.ones(1024, device='cuda')\n"
        "os.write(int(sys.argv[2]), (json.dumps({'sum': float(x.sum())}) + '\\n').encode())\n")
    p = Process("gpu", cwd=tmp_path, log=tmp_path / "log", fork_server=True, env={"PYTHONPATH": str(tmp_path)})
    try:
        assert p.recv(120) == {"sum": 1024.0}, p.log_tail()  # the channel carries objects (a bare number broke it)
        assert p.proc.wait(30) == 0
        assert isinstance(p.proc, forkserver.ForkedChild)
    finally:
        p.close()
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_compile_pool_size_reaches_the_children(probe, monkeypatch):
    """TORCHINDUCTOR_COMPILE_THREADS set for the harness reaches its workers (each compiling process starts a
    pool of that many; on a many-core host several evaluators' pools would otherwise take every core each)."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    p = start(probe, False)
    try:
        assert p.env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
        p.recv(60)
        p.send(0)
        assert p.proc.wait(30) == 0
    finally:
        p.close()
