"""Runs inside the sandbox subprocess (never imported by the appliance): loads untrusted code and
runs a problem's tests against it.

Order matters: the payload is read from stdin first; then the process isolates itself as far as
the machine lets an unprivileged user (`isolate`: no new privileges, and a user plus network
namespace, so no network interface but a loopback that is down), sets resource limits, and
installs an audit hook that refuses to delete, rename or write files outside the sandbox folder,
start processes, open sockets, load native libraries or trace the harness; only then does
untrusted code run. Each test gets its own alarm. The result is one line on stdout, prefixed with
a nonce that the untrusted code is not given, and says which isolation took effect. Reading files
is not prevented: run untrusted models' code in a container as well.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from types import FrameType
from typing import Any

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
        "os.chdir",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "subprocess.Popen",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "sys.setprofile",
        "sys.settrace",
        "sys.addaudithook",
        "os.putenv",
        "os.unsetenv",
    )
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def isolate() -> dict[str, str]:
    """What the kernel grants without privileges: no privilege gain, and a network of its own.

    Returns what took effect, for the report; where a step is refused the audit hook is the only
    guard for that part.
    """
    import ctypes

    done: dict[str, str] = {}
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return {"no_new_privs": "unavailable", "network": "audit hook only"}
    done["no_new_privs"] = "set" if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 else "refused"
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 or libc.unshare(CLONE_NEWNET) == 0:
        done["network"] = "own namespace (no interface up)"
    else:
        done["network"] = f"audit hook only (unshare refused: {os.strerror(ctypes.get_errno())})"
    return done


def limit_resources(limits: dict[str, Any]) -> None:
    memory = int(limits["memory_mb"]) * 1024 * 1024
    output = int(limits["output_kb"]) * 1024
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def install_guard(root: str) -> None:
    def guard(event: str, args: tuple[Any, ...]) -> None:
        if event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and isinstance(args[0], str | bytes):
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            writing = bool(flags & WRITE_FLAGS) or any(ch in mode for ch in "wax+")
            path = os.path.realpath(os.fsdecode(args[0]))
            if writing and not path.startswith(root + os.sep):
                raise PermissionError(f"sandbox: writing {path} is not allowed")

    sys.addaudithook(guard)


def on_alarm(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError("test took too long")


def run(payload: dict[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "candidate"}
    test_s = float(payload["limits"]["test_s"])
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, test_s)
    try:
        exec(compile(payload["code"], "candidate.py", "exec"), namespace)
    except BaseException as error:  # untrusted code may raise anything, SystemExit included
        return {"loaded": False, "error": f"{type(error).__name__}: {error}"[:300], "tests": []}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    results = []
    for test in payload["tests"]:
        signal.setitimer(signal.ITIMER_REAL, test_s)
        try:
            exec(compile(test, "test.py", "exec"), dict(namespace))
            results.append({"passed": True, "error": ""})
        except BaseException as error:
            results.append({"passed": False, "error": f"{type(error).__name__}: {error}"[:300]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return {"loaded": True, "error": "", "tests": results}


def main() -> None:
    payload = json.loads(sys.stdin.read())
    sys.stdin.close()
    nonce = str(payload.pop("nonce"))
    result_fd = os.dup(1)
    isolation = isolate()
    limit_resources(payload["limits"])
    install_guard(os.path.realpath(payload["root"]))
    result = run(payload) | {"isolation": isolation}
    os.write(result_fd, f"\n{nonce}{json.dumps(result)}\n".encode())


if __name__ == "__main__":
    main()
