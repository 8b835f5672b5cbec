"""`cuda-agent train` runs verl in a process group of its own. A time limit's SIGTERM, a closed
terminal's SIGHUP or a SIGKILL of the driver must not leave that group training: on the H100 a
`timeout` ended only the driver, and the resumed stage then ran a second trainer beside the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cuda_agent.rl.driver import launch

# a stand-in for verl: a process that starts a grandchild in its group, writes its pid, and runs on
VERL = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(sys.argv[1]).write_text(str(child.pid))
    print("step:1 - training", flush=True)
    time.sleep(600)
""")

DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from cuda_agent.rl.driver import launch
    folder = Path(sys.argv[1])
    try:
        launch.run_logged([sys.executable, str(folder / "verl.py"), str(folder / "grandchild.pid")], dict(__import__("os").environ),
                          folder, folder / "train.log", lambda line: print(line, end="", flush=True))
    except launch.Terminated as e:
        print(f"driver: {e}", flush=True)
        sys.exit(128 + e.signum)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _start(tmp_path: Path, background: bool = False) -> tuple[subprocess.Popen, int, int]:
    """The driver and its stand-in verl; `background`: the driver ignores SIGINT, as a job started with
    `&` from a script or under nohup does."""
    (tmp_path / "verl.py").write_text(VERL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if background else None
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env,
                              preexec_fn=ignore)
    assert driver.stdout is not None
    assert "step:1" in driver.stdout.readline()
    deadline = time.monotonic() + 20
    while not (tmp_path / "grandchild.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    verl = int((tmp_path / launch.PID_FILE).read_text().split()[0])
    return driver, verl, int((tmp_path / "grandchild.pid").read_text())


def _gone_soon(*pids: int, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_driver_stops_verl_and_everything_in_its_group(tmp_path, sig):
    driver, verl, grandchild = _start(tmp_path)
    driver.send_signal(sig)
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode == 128 + sig and f"stopped by {sig.name}" in out, out
    assert _gone_soon(verl, grandchild), "verl's group outlived the driver"
    assert not (tmp_path / launch.PID_FILE).exists()


def test_a_driver_started_in_the_background_still_stops_verl_with_its_first_gentle_signal(tmp_path):
    """An ignored SIGINT is inherited across exec: verl would ignore the gentle stop and every stop would
    wait out its 30 s before SIGTERM (how these tests took 31 s each when the suite ran under `&`)."""
    driver, verl, grandchild = _start(tmp_path, background=True)
    t0 = time.monotonic()
    driver.send_signal(signal.SIGTERM)
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode == 128 + signal.SIGTERM, out
    assert _gone_soon(verl, grandchild) and time.monotonic() - t0 < 15, time.monotonic() - t0


def test_after_a_sigkill_of_the_driver_the_next_run_stops_what_it_left(tmp_path):
    driver, verl, grandchild = _start(tmp_path)
    driver.kill()
    driver.wait(timeout=10)
    assert _alive(verl) and _alive(grandchild)   # nothing can run in a SIGKILLed process
    launch.stop_leftover(tmp_path, tmp_path / "train.log")
    assert _gone_soon(verl, grandchild)
    assert "an earlier run's verl (process group" in (tmp_path / "train.log").read_text()
    assert not (tmp_path / launch.PID_FILE).exists()


def test_a_pid_file_of_a_group_that_is_gone_is_only_removed(tmp_path):
    (tmp_path / launch.PID_FILE).write_text("999999999\n")
    launch.stop_leftover(tmp_path, tmp_path / "train.log")
    assert not (tmp_path / launch.PID_FILE).exists() and not (tmp_path / "train.log").exists()


def test_a_recycled_pid_that_runs_something_else_is_left_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        (tmp_path / launch.PID_FILE).write_text(f"{other.pid} verl.trainer.main_ppo\n")
        launch.stop_leftover(tmp_path, tmp_path / "train.log")
        assert _alive(other.pid) and not (tmp_path / launch.PID_FILE).exists()
    finally:
        other.kill()
        other.wait()
