"""The child side of the sandbox: it only computes (never imported by the appliance; run with -c).

It reads its payload from stdin (the candidate's code, the test calls, the limits and a seccomp
program), then, before any untrusted code runs: remounts the device nodes read-only and drops every
capability (under bubblewrap it starts with CAP_SYS_ADMIN in its own user namespace for that
alone), writes what it set up to a pipe it then closes, sets no_new_privs, installs the seccomp filter
(no new processes, no exec, no sockets, no signals to other processes, no namespace or mount
calls), limits its resources and installs the audit hook (a second layer that the first can do
without). It then evaluates each call and writes what came back as plain data (JSON values with
tags for tuples, sets, dicts and bytes) to the file descriptor the parent named. The expected values never enter this
process: the parent decodes the data and compares it with its own equality, so whatever this
process writes, it can only claim values, never a verdict.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import resource
import signal
import sys
from types import FrameType
from typing import Any

#: a value's encoding stops at this depth and at this many elements (a huge result is no result)
MAX_DEPTH = 64
MAX_ITEMS = 100_000

#: the real built-in exception classes, taken before any untrusted code runs: a class the candidate
#: defines (or renames) to look like one is reported under its own module, never as the built-in
BUILTIN_EXCEPTIONS = {
    name: kind for name, kind in vars(builtins).items() if isinstance(kind, type) and issubclass(kind, BaseException)
}

BLOCKED_EVENTS = frozenset(
    (
        "os.remove",
        "os.rmdir",
        "os.rename",
        "shutil.rmtree",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.mkdir",
        "os.mkfifo",
        "os.mknod",
        "os.utime",
        "os.chdir",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.setsid",
        "subprocess.Popen",
        "_posixsubprocess.fork_exec",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.call_function",
        "ctypes.addressof",
        "sqlite3.connect",
        "sys.setprofile",
        "sys.settrace",
        "sys.addaudithook",
        "os.putenv",
        "os.unsetenv",
        "gc.get_referrers",
        "gc.get_referents",
        "gc.get_objects",
    )
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
#: device nodes a correct program may write to (what is written there goes nowhere)
WRITABLE_DEVICES = frozenset(("/dev/null", "/dev/zero", "/dev/full"))

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CLONE_NEWNS = 0x00020000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def seal_devices(nodes: list[str]) -> dict[str, str]:
    """Remount each device node read-only, keeping it usable (no nodev), then drop every capability;
    fails closed: the candidate's code never runs with a capability or a writable node."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # bubblewrap's --disable-userns puts this process in a nested user namespace, which does not own
    # the sandbox's mount namespace: a mount namespace of its own (a copy, its mounts locked) does
    if nodes and libc.unshare(CLONE_NEWNS) != 0:
        raise SystemExit(f"sandbox: a mount namespace for the device nodes failed: {os.strerror(ctypes.get_errno())}")
    for node in nodes:
        kept = os.statvfs(node).f_flag
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        # flags the mount has already are kept (a user namespace may not clear them); nodev only where
        # the host's own /dev has it, and then the nodes stay unusable, as on that host
        for flag, mounted in ((MS_NOSUID, os.ST_NOSUID), (MS_NOEXEC, os.ST_NOEXEC), (MS_NODEV, os.ST_NODEV)):
            flags |= flag if kept & mounted else 0
        if libc.mount(None, node.encode(), None, flags, None) != 0:
            raise SystemExit(f"sandbox: remounting {node} read-only failed: {os.strerror(ctypes.get_errno())}")

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))

    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = Header(_LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise SystemExit(f"sandbox: dropping capabilities failed: {os.strerror(ctypes.get_errno())}")
    with open("/proc/self/status", encoding="ascii") as proc_status:
        status = dict(re.findall(r"^(Cap\w+):\s*([0-9a-fA-F]+)\s*$", proc_status.read(), flags=re.MULTILINE))
    held = {key: status.get(key, "unknown") for key in ("CapInh", "CapPrm", "CapEff", "CapAmb")}
    if any(value == "unknown" or int(value, 16) for value in held.values()):
        raise SystemExit(f"sandbox: capabilities still held: {held}")
    return {"devices": f"{len(nodes)} nodes read-only" if nodes else "the host's", "capabilities": "none"}


def isolate(seccomp_program: bytes | None) -> dict[str, str]:
    """No privilege gain, then the seccomp filter (None: left off); returns what took effect, for the record."""
    import ctypes

    done: dict[str, str] = {}
    libc = ctypes.CDLL(None, use_errno=True)
    done["no_new_privs"] = "set" if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 else "refused"
    if seccomp_program is None or not seccomp_program:
        done["seccomp"] = "off" if seccomp_program is None else "no filter for this architecture"
        return done

    class Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    code = ctypes.create_string_buffer(seccomp_program, len(seccomp_program))
    program = Program(len(seccomp_program) // 8, ctypes.addressof(code))
    installed = libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) == 0
    done["seccomp"] = "filter installed" if installed else f"refused ({os.strerror(ctypes.get_errno())})"
    return done


def limit_resources(limits: dict[str, Any]) -> None:
    memory = int(limits["memory_mb"]) * 1024 * 1024
    output = int(limits["output_kb"]) * 1024
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # as its namespace's pid 1 the child would ignore a default SIGXCPU: end as the signal would
    signal.signal(signal.SIGXCPU, lambda signum, frame: os._exit(128 + signal.SIGXCPU))
    if limits["tasks"] is not None:  # counted per user namespace: meaningful only inside the sandbox's own
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["tasks"]), int(limits["tasks"])))


def install_guard(root: str) -> None:
    def guard(event: str, args: tuple[Any, ...]) -> None:
        if event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and isinstance(args[0], str | bytes):
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            writing = bool(flags & WRITE_FLAGS) or any(ch in mode for ch in "wax+")
            name = os.fsdecode(args[0])
            path = os.path.realpath(name)
            # relative paths are refused: the event does not say which folder a dir_fd names
            outside = not path.startswith(root + os.sep) and path not in WRITABLE_DEVICES
            if writing and (not os.path.isabs(name) or outside):
                raise PermissionError(f"sandbox: writing {path} is not allowed")

    sys.addaudithook(guard)


def on_alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("test took too long")


def plain(value: object, depth: int = 0, budget: list[int] | None = None) -> object:
    """`value` as JSON data; containers are tagged so that the parent rebuilds their exact kind."""
    budget = [MAX_ITEMS] if budget is None else budget
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise ValueError("the result is too large or too deep")
    if value is None or isinstance(value, bool | str):
        return value if not isinstance(value, str) else str.__str__(value)
    if isinstance(value, int):
        return {"int": int.__repr__(int(value))}
    if isinstance(value, float):
        return {"float": float.__repr__(float(value))}
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).hex()}
    for kind, tag in ((list, "list"), (tuple, "tuple"), (set, "set"), (frozenset, "frozenset")):
        if isinstance(value, list | tuple | set | frozenset) and isinstance(value, kind):
            return {tag: [plain(item, depth + 1, budget) for item in list(value)]}
    if isinstance(value, dict):
        return {"dict": [[plain(k, depth + 1, budget), plain(v, depth + 1, budget)] for k, v in list(value.items())]}
    return {"object": type(value).__name__}


def exception_name(kind: type) -> str:
    """A built-in exception by its plain name; any other class as `module.qualname`."""
    name = str(type.__dict__["__name__"].__get__(kind))
    if BUILTIN_EXCEPTIONS.get(name) is kind:
        return name
    return f"{type.__dict__['__module__'].__get__(kind)}.{type.__dict__['__qualname__'].__get__(kind)}"


def outcome(call: str, namespace: dict[str, Any], test_s: float) -> dict[str, Any]:
    signal.setitimer(signal.ITIMER_REAL, test_s)
    try:
        return {"value": plain(eval(compile(call, "test", "eval"), dict(namespace)))}
    except BaseException as error:  # untrusted code may raise anything, SystemExit included
        try:
            names = [exception_name(kind) for kind in type(error).__mro__]
            message = f"{names[0]}: {error}"[:300]
        except BaseException:
            names, message = ["BaseException"], "an exception that cannot be described"
        return {"raised": names, "message": message}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "candidate"}
    test_s = float(payload["limits"]["test_s"])
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, test_s)
    try:
        exec(compile(payload["code"], "candidate.py", "exec"), namespace)
    except BaseException as error:
        return {"loaded": False, "error": f"{type(error).__name__}: {error}"[:300], "cases": []}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"loaded": True, "error": "", "cases": [outcome(call, namespace, test_s) for call in payload["calls"]]}


def main() -> None:
    payload = json.loads(sys.stdin.read())
    sys.stdin.close()
    isolation = seal_devices(payload["devices"])
    results = os.fdopen(int(payload["results_fd"]), "w", encoding="utf-8")
    isolation |= isolate(None if payload["seccomp"] is None else bytes.fromhex(payload["seccomp"]))
    limit_resources(payload["limits"])
    if payload["audit_hook"]:
        install_guard(os.path.realpath(payload["root"]))
    isolation["audit_hook"] = "on" if payload["audit_hook"] else "off"
    # the claim goes through a pipe closed before the candidate's code runs: nothing it does can rewrite it
    os.write(int(payload["claims_fd"]), json.dumps(isolation).encode())
    os.close(int(payload["claims_fd"]))
    report = run(payload)
    results.write(json.dumps(report) + "\n")
    results.flush()
    os._exit(0)


#: `python -c HARNESS --seal-only NODE...`: only seal the nodes and drop the capabilities, as the
#: sandbox's probe does to learn whether this host allows it
SEAL_ONLY = "--seal-only"

if __name__ == "__main__":
    if sys.argv[1:2] == [SEAL_ONLY]:
        seal_devices(sys.argv[2:])
        os._exit(0)
    main()
