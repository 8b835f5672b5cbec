"""The process that runs verl for a stage: its own process group (its Ray included), its output
appended to a log and followed line by line, stopped whole on Ctrl-C, SIGTERM or SIGHUP, and found
and stopped by the next run after a SIGKILL (its group's id in `verl.pid`)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from typing import Callable

from cuda_agent.sandbox import group_alive, stop_group


class Terminated(Exception):
    """SIGTERM or SIGHUP reached `cuda-agent train` while verl ran (a time limit, a closed terminal)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


PID_FILE = "verl.pid"


def run_logged(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, on_line: Callable[[str], None]) -> int:
    """Run `cmd`, its output appended to `log` and passed line by line to `on_line`. verl runs in a process
    group of its own (its Ray included); Ctrl-C, SIGTERM or SIGHUP here stop that whole group before they
    end this process (SIGTERM as such would end only this one: on the H100 a `timeout` left verl training
    on, and the resumed stage ran a second trainer beside it). The group's id is kept in `cwd`/verl.pid
    while it runs, so a run after a SIGKILL stops what it left (`stop_leftover`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    stop_leftover(cwd, log)
    with log.open("a") as f, _signals_raise():
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        with _sigint_heard():
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    bufsize=1, errors="replace", start_new_session=True)
        pid_file = cwd / PID_FILE
        try:
            pid_file.write_text(f"{proc.pid} {_program(cmd)}\n")
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                on_line(line)
            return proc.wait()
        except BaseException:
            stop_group(proc.pid, proc)
            raise
        finally:
            stop_group(proc.pid, proc, signals=((signal.SIGKILL, 5),))   # what verl left behind in its group
            pid_file.unlink(missing_ok=True)


def stop_leftover(folder: Path, log: Path) -> None:
    """A process group that an earlier run in `folder` started and did not stop (it was killed with
    SIGKILL, or its machine's tool ended only the run's own process) is stopped now, and the log says so."""
    pid_file = folder / PID_FILE
    try:
        pgid, *names = pid_file.read_text().split()
        pgid = int(pgid)
    except (OSError, ValueError):
        return
    if group_alive(pgid) and _leader_is(pgid, names):
        with log.open("a") as f:
            f.write(f"\n# an earlier run's verl (process group {pgid}) was still running: stopping it\n")
        stop_group(pgid, None)
    pid_file.unlink(missing_ok=True)


def _program(cmd: list[str]) -> str:
    """What a command runs, as its leader's command line shows it: the module after -m, else the script."""
    if len(cmd) > 2 and cmd[1] == "-m":
        return cmd[2]
    return Path(cmd[1] if len(cmd) > 1 else cmd[0]).name


def _leader_is(pgid: int, names: list[str]) -> bool:
    """Whether the group's leader still runs what the pid file names (a recycled pid is someone else's);
    a leader that is gone while its group lives on cannot be checked and counts as ours."""
    try:
        cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True
    return not names or any(name in cmdline for name in names)


@contextlib.contextmanager
def _sigint_heard():
    """verl is stopped gently with SIGINT first (sandbox.groups.GENTLY), but a process started in the
    background (`cmd &` in a script, `nohup`) ignores SIGINT, and an ignored signal stays ignored across
    exec: verl would ignore it too and every stop would wait out SIGINT's 30 s before SIGTERM (each of
    test_launch_signals' three tests took 31 s run so). A handler is reset to the default at exec, so
    one set here while verl starts gives verl the default; the ignore is put back after."""
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM and SIGHUP raise `Terminated` in the main thread (they would end the process at once)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
