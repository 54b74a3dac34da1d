"""The seccomp filter the child installs on itself before untrusted code runs.

A classic BPF program, written out here rather than taken from a library so that the child needs
nothing but the standard library. It refuses (EPERM) what computing a function never needs: new
processes (fork, vfork, clone without CLONE_THREAD; threads stay allowed), exec, sockets, signals
and ptrace towards other processes, namespaces, mounts, keyrings, BPF, io_uring, module loading,
and the per-user kernel objects (inotify, fanotify, message queues, POSIX timers). clone3 answers
ENOSYS so that the C library falls back to clone, whose flags a filter can read. Another
architecture than the one below gets no filter, and the run records that.
"""

from __future__ import annotations

import platform
import struct

# BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h)
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
EPERM, ENOSYS = 1, 38

# offsets in struct seccomp_data
_NR, _ARCH, _ARG0 = 0, 4, 16
CLONE_THREAD = 0x00010000

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
X86_64_CLONE, X86_64_CLONE3 = 56, 435
#: refused on x86-64, by number (arch/x86/entry/syscalls/syscall_64.tbl)
X86_64_REFUSED = {
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
    "kill": 62,
    "tkill": 200,
    "tgkill": 234,
    "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297,
    "pidfd_open": 434,
    "pidfd_send_signal": 424,
    "pidfd_getfd": 438,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "setsid": 112,
    "setpgid": 109,
    "socket": 41,
    "socketpair": 53,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "unshare": 272,
    "setns": 308,
    "mknod": 133,
    "mknodat": 259,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "quotactl": 179,
    # kernel objects counted per host user, which a run could exhaust for the user's other programs
    "inotify_init": 253,
    "inotify_init1": 294,
    "fanotify_init": 300,
    "mq_open": 240,
    "timer_create": 222,
}


def _op(code: int, k: int, true: int = 0, false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, true, false, k)


def x86_64_program() -> bytes:
    """The filter for x86-64: a wrong architecture or an x32 call kills; the list above is refused."""
    refused = sorted(set(X86_64_REFUSED.values()))
    # layout: header (6), one test per refused call, allow, clone's flag test (2), allow, deny, enosys, kill
    checks = len(refused)
    allow = 6 + checks
    clone_test = allow + 1
    allow_thread = clone_test + 2
    deny = allow_thread + 1
    enosys = deny + 1
    kill = enosys + 1

    def to(target: int, here: int) -> int:
        return target - here - 1

    program = [
        _op(_LOAD_WORD, _ARCH),
        _op(_JUMP_EQUAL, AUDIT_ARCH_X86_64, 0, to(kill, 1)),
        _op(_LOAD_WORD, _NR),
        _op(_JUMP_AT_LEAST, X32_SYSCALL_BIT, to(deny, 3), 0),
        _op(_JUMP_EQUAL, X86_64_CLONE, to(clone_test, 4), 0),
        _op(_JUMP_EQUAL, X86_64_CLONE3, to(enosys, 5), 0),
    ]
    program += [_op(_JUMP_EQUAL, number, to(deny, 6 + i), 0) for i, number in enumerate(refused)]
    program += [
        _op(_RETURN, _ALLOW),
        _op(_LOAD_WORD, _ARG0),
        _op(_JUMP_ANY_BIT, CLONE_THREAD, to(allow_thread, clone_test + 1), to(deny, clone_test + 1)),
        _op(_RETURN, _ALLOW),
        _op(_RETURN, _ERRNO | EPERM),
        _op(_RETURN, _ERRNO | ENOSYS),
        _op(_RETURN, _KILL_PROCESS),
    ]
    return b"".join(program)


def filter_program(machine: str | None = None) -> bytes:
    """The program for this machine's architecture; empty where none is written (recorded by the child)."""
    machine = machine or platform.machine()
    return x86_64_program() if machine in ("x86_64", "AMD64") else b""
