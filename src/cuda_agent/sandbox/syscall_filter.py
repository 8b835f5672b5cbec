"""The system calls a sandboxed process may not make, refused by a seccomp filter that it and every
process it starts keep (installed last in `isolation._confine`, after the user change).

Why: a sandbox user could make a user namespace of its own (`unshare -Urn`), be root there over a
network namespace, and set up work that runs in the kernel on no thread of theirs: a packet looped
on a mirrored loopback device kept a CPU busy in softirq, untouched by the freezer's stop, and
slowed the baselines timed beside it two to five times (a review of the freezer, 2026-11-28).

Refused (EPERM):
- unshare and clone with any CLONE_NEW* flag, and setns: no namespace of its own, none entered;
- bpf: no programs in the kernel;
- sendmsg, sendmmsg and pidfd_getfd: no file descriptor is handed to another process. A descriptor in
  flight (SCM_RIGHTS, in a socket's queue) keeps a CUDA context alive after every process of the
  solution that held it has exited: its queued work shares the GPU with the baselines while NVML names
  only a dead pid, which no look can tie to the solution if none saw it alive (2026-11-28, H200: a
  parked context of the corpus ran 90 s of kernels beside other evaluations on that GPU, which then
  all ended as harness faults). Plain send, sendto and write stay allowed, and so does receiving.
Answered ENOSYS, as a kernel without them would, so libraries fall back:
- clone3 (its flags lie in memory a filter cannot read; glibc then uses clone);
- io_uring_setup (a kernel thread polling a ring runs while its owner is stopped);
- every system call of another ABI (32-bit int 0x80, x32), whose numbers this filter does not know.
Everything else is allowed: threads, fork, vfork, exec, CUDA, compilers.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_EPERM, _ENOSYS = 1, 38

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

# classic BPF, as seccomp reads it: load a word of seccomp_data, compare, return
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in seccomp_data; _ARG0 is the low word (little-endian)
_X32_BIT = 0x40000000

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET; NEWTIME (0x80) is a clone
# flag only for unshare and clone3 (clone's low byte is the exit signal)
_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_NEW_TIME = 0x00000080


@dataclass(frozen=True)
class _Abi:
    audit_arch: int
    clone: int
    unshare: int
    setns: int
    bpf: int
    sendmsg: int
    sendmmsg: int
    pidfd_getfd: int = 438
    clone3: int = 435
    io_uring_setup: int = 425
    x32: bool = False  # numbers with _X32_BIT set are another ABI on this machine


_ABIS = {
    "x86_64": _Abi(audit_arch=0xC000003E, clone=56, unshare=272, setns=308, bpf=321, sendmsg=46, sendmmsg=307,
                   x32=True),
    "aarch64": _Abi(audit_arch=0xC00000B7, clone=220, unshare=97, setns=268, bpf=280, sendmsg=211, sendmmsg=269),
}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def program(machine: str | None = None) -> list[tuple[int, int, int, int]] | None:
    """The filter as (code, jt, jf, k) instructions for `machine` (this one's by default), or None
    where its system call numbers are not known here."""
    abi = _ABIS.get(machine or platform.machine())
    if abi is None:
        return None
    deny, nosys = _ERRNO | _EPERM, _ERRNO | _ENOSYS
    # (op, k, label if true, label if false) with labels resolved below; None: the next instruction
    body: list[tuple] = [
        (_LD_ABS_W, _ARCH, None, None),
        (_JEQ, abi.audit_arch, None, "nosys"),
        (_LD_ABS_W, _NR, None, None),
    ]
    if abi.x32:
        body.append((_JGE, _X32_BIT, "nosys", None))
    body += [
        (_JEQ, abi.clone3, "nosys", None),
        (_JEQ, abi.io_uring_setup, "nosys", None),
        (_JEQ, abi.setns, "deny", None),
        (_JEQ, abi.bpf, "deny", None),
        (_JEQ, abi.sendmsg, "deny", None),
        (_JEQ, abi.sendmmsg, "deny", None),
        (_JEQ, abi.pidfd_getfd, "deny", None),
        (_JEQ, abi.unshare, "unshare", None),
        (_JEQ, abi.clone, "clone", None),
        ("ret", _ALLOW),
        ("label", "unshare"),
        (_LD_ABS_W, _ARG0, None, None),
        (_JSET, _NEW_NAMESPACES | _NEW_TIME, "deny", None),
        ("ret", _ALLOW),
        ("label", "clone"),
        (_LD_ABS_W, _ARG0, None, None),
        (_JSET, _NEW_NAMESPACES, "deny", None),
        ("ret", _ALLOW),
        ("label", "deny"),
        ("ret", deny),
        ("label", "nosys"),
        ("ret", nosys),
    ]
    labels, at = {}, 0
    for item in body:
        if item[0] == "label":
            labels[item[1]] = at
        else:
            at += 1
    out: list[tuple[int, int, int, int]] = []
    for item in body:
        if item[0] == "label":
            continue
        if item[0] == "ret":
            out.append((_RET, 0, 0, item[1]))
            continue
        op, k, yes, no = item
        here = len(out)
        jump = [0 if target is None else labels[target] - here - 1 for target in (yes, no)]
        out.append((op, jump[0], jump[1], k))
    return out


def _compiled() -> _Program | None:
    code = program()
    if code is None:
        return None
    return _Program(len(code), (_Filter * len(code))(*[_Filter(*ins) for ins in code]))


# Made at import, in the parent: install() runs between fork and exec of a process that may have other threads,
# where a dlopen (ctypes.CDLL) could wait forever on a loader lock another thread held at the fork.
_LIBC = ctypes.CDLL(None, use_errno=True)
_PROGRAM = _compiled()


def install() -> bool:
    """Installs the filter in this process (and so in everything it starts): True, or False where it
    could not be (an unknown machine, a kernel without seccomp). Sets no-new-privileges, which the
    kernel asks of an unprivileged process that installs one, so set-user-ID programs no longer raise
    privileges either. Between fork and exec it makes two prctl calls and nothing else."""
    if _PROGRAM is None or _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(_PROGRAM), 0, 0) == 0


@functools.cache
def works() -> bool:
    """Whether this machine takes the filter: tried once a process, in a new interpreter (~20 ms), so that a
    sandboxed process asks for it only where it can be had, and fails to start where it then cannot."""
    if program() is None:
        return False
    code = Path(__file__).read_text() + "\nraise SystemExit(0 if install() else 1)\n"
    try:
        return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
