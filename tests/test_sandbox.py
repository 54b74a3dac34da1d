"""The sandbox against hostile code: every program runs with both layers and with the kernel alone
(audit hook off), and each test asserts the containment it is about: the file is not there, the
listener heard nothing, the victim process got no signal, no process outlives the call, the score
is 0. Honest code is scored by the values it returns, compared in this process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from appliance.errors import ApplianceError
from appliance.sandbox.cases import TestCase, decode, judge_case
from appliance.sandbox.isolation import kernel_isolation_problem
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.run import TestRun, run_tests
from appliance.scenarios.deepeval.code_review import load_problems

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = load_problems(REPO / "scenarios" / "deepeval" / "code_problems.toml")
LIMITS = SandboxLimits(wall_s=4.0, cpu_s=2, test_s=1.0, memory_mb=256, output_kb=64, disk_mb=4)
ADD = [TestCase(call="add(1, 2)", expect="3"), TestCase(call="add(-1, 1)", expect="0")]


@pytest.fixture(scope="module", autouse=True)
def _kernel_isolation() -> None:
    problem = kernel_isolation_problem()
    assert problem is None, f"the sandbox tests need kernel isolation on this machine: {problem}"


@dataclass
class Arena:
    """What hostile code reaches for on the host: files, listeners of every socket family, a victim."""

    folder: Path
    sentinel: Path
    victim: subprocess.Popen[bytes]
    victim_flag: Path
    tcp_port: int = 0
    udp_port: int = 0
    unix_path: str = ""
    abstract_name: str = ""
    heard: list[str] = field(default_factory=list)

    def target(self, name: str) -> Path:
        return self.folder / name


def _listen(arena: Arena, sockets: list[socket.socket]) -> Callable[[], None]:
    stop = threading.Event()

    def serve(server: socket.socket) -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                if server.type == socket.SOCK_DGRAM:
                    data = server.recv(4096)
                    arena.heard.append(f"datagram {data!r}")
                else:
                    connection, _ = server.accept()
                    arena.heard.append(f"connection on {server.family.name}")
                    connection.close()
            except (TimeoutError, OSError):
                continue

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in sockets]
    for thread in threads:
        thread.start()

    def close() -> None:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
        for server in sockets:
            server.close()

    return close


VICTIM = """
import signal, sys, time
flag = sys.argv[1]
def hit(signum, frame):
    open(flag, "a").write(f"{signum}\\n")
for name in ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP"):
    signal.signal(getattr(signal, name), hit)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    folder = tmp_path_factory.mktemp("arena")
    os.chmod(folder, 0o777)  # writable by anyone: only the sandbox may stop a write there
    sentinel = folder / "keep.txt"
    sentinel.write_text("precious")
    flag = folder / "victim-was-signalled"
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, str(flag)], stdout=subprocess.PIPE)
    assert victim.stdout is not None and victim.stdout.readline() == b"ready\n"
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = str(folder / "host.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix.listen()
    os.chmod(unix_path, 0o777)
    abstract_name = f"appliance-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    for server in (tcp, unix, abstract):
        server.listen()
    state = Arena(folder, sentinel, victim, flag, tcp.getsockname()[1], udp.getsockname()[1], unix_path, abstract_name)
    close = _listen(state, [tcp, udp, unix, abstract])
    try:
        yield state
    finally:
        close()
        victim.kill()
        victim.wait()


def attack(body: str, setup: str = "") -> str:
    """A candidate whose `add` runs `body` and returns what came of it (so a test can see the attack ran)."""
    indented = textwrap.indent(textwrap.dedent(body).strip(), "        ")
    return (
        f"{textwrap.dedent(setup).strip()}\n"
        "def add(a, b):\n"
        "    try:\n"
        f"{indented}\n"
        "        return 'attack finished'\n"
        "    except BaseException as error:\n"
        "        return f'{type(error).__name__}: {error}'\n"
    )


def harness_processes() -> list[int]:
    """Pids of processes still in one of this process's run cgroups (they are named after its pid):
    wherever a process of the sandbox moved or whatever it calls itself, it cannot leave its cgroup."""
    mark = f"appliance-sandbox-{os.getpid()}-"
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "cgroup").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


#: what guards the child: everything (as in runs), the kernel alone (seccomp and namespaces), and the
#: namespaces alone (no seccomp filter, no audit hook)
Layers = Literal["all-layers", "kernel-only", "namespaces-only"]
EVERYTHING: Layers = "all-layers"
KERNEL: Layers = "kernel-only"
NAMESPACES: Layers = "namespaces-only"
LAYERS: list[Layers] = [EVERYTHING, KERNEL, NAMESPACES]


def play(code: str, layers: Layers, cases: list[TestCase] = ADD) -> TestRun:
    result = run_tests(code, cases, LIMITS, audit_hook=layers == EVERYTHING, seccomp=layers != NAMESPACES)
    assert harness_processes() == [], "a child of the sandbox outlived run_tests"
    assert result.wall_s < LIMITS.wall_s + 3
    assert result.isolation["kernel"].startswith("bubblewrap") and result.isolation["claimed no_new_privs"] == "set"
    assert result.isolation["claimed seccomp"] == ("off" if layers == NAMESPACES else "filter installed")
    assert result.isolation["claimed audit_hook"] == ("on" if layers == EVERYTHING else "off")
    return result


def contained(body: str, setup: str, layers: Layers) -> TestRun:
    """An attack scores nothing; below the hook, it ran and the kernel (not the hook) refused it."""
    result = play(attack(body, setup), layers)
    assert result.passed == 0
    if layers != EVERYTHING:
        assert result.status in ("failed", "killed", "timeout") and "sandbox:" not in result.detail, result.detail
    return result


# --- writing outside the work folder, by every route -----------------------------------------------

WRITES = {
    "open": "open({target!r}, 'w').write('x')",
    "os.open": "os.close(os.open({target!r}, os.O_WRONLY | os.O_CREAT, 0o666))",
    "dir_fd": "d = os.open({folder!r}, os.O_RDONLY)\nos.close(os.open({name!r}, os.O_WRONLY | os.O_CREAT, dir_fd=d))",
    "sqlite3": "import sqlite3\nsqlite3.connect({target!r}).execute('create table t (x)')",
    "mkdir": "os.mkdir({target!r})",
    "mkfifo": "os.mkfifo({target!r})",
    "symlink": "os.symlink('/etc/passwd', {target!r})",
    "link": "os.link({sentinel!r}, {target!r})",
    "rename": "os.rename({sentinel!r}, {target!r})",
    "pathlib home": "import pathlib\n(pathlib.Path.home() / {name!r}).write_text('x')\nopen('/root/' + {name!r}, 'w')",
    "project folder": "open({project!r}, 'w').write('x')",
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(WRITES))
def test_no_write_outside_reaches_the_host(arena: Arena, route: str, layers: Layers) -> None:
    name = f"written-{route.replace(' ', '-')}-{layers}"
    target = arena.target(name)
    project = REPO / name
    body = WRITES[route].format(
        target=str(target), folder=str(arena.folder), name=name, sentinel=str(arena.sentinel), project=str(project)
    )
    contained(body, "import os", layers)
    assert not target.exists() and not project.exists() and not (Path.home() / name).exists()
    assert arena.sentinel.read_text() == "precious"


DAMAGE = {
    "remove": "os.remove({sentinel!r})",
    "truncate": "os.truncate({sentinel!r}, 0)",
    "overwrite": "open({sentinel!r}, 'w').write('gone')",
    "chmod": "os.chmod({sentinel!r}, 0o000)",
    "utime": "os.utime({sentinel!r}, (0, 0))",
    "rmtree": "import shutil\nshutil.rmtree({folder!r})",
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(DAMAGE))
def test_host_files_cannot_be_damaged(arena: Arena, route: str, layers: Layers) -> None:
    before = arena.sentinel.stat()
    contained(DAMAGE[route].format(sentinel=str(arena.sentinel), folder=str(arena.folder)), "import os", layers)
    after = arena.sentinel.stat()
    assert arena.sentinel.read_text() == "precious"
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


# --- processes, native code, environment -----------------------------------------------------------

PROCESSES = {
    "os.system": "if os.system('touch {target}') != 0:\n    raise OSError('system() failed')",
    "subprocess": "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch {target}'])",
    "posix_spawn": "os.posix_spawn('/bin/sh', ['sh', '-c', 'touch {target}'], {{}})",
    "fork_exec": (
        "import _posixsubprocess, sys\n"
        "r, w = os.pipe()\n"
        "_posixsubprocess.fork_exec([sys.executable, '-c', 'open(\"{target}\", \"w\")'], [sys.executable.encode()],"
        " True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)\n"
        "if os.read(r, 100):\n    raise OSError('the child failed')"
    ),
    "fork and setsid": (
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    import time\n"
        "    while True:\n"
        "        open('{target}', 'a').write('alive')\n"
        "        time.sleep(0.05)"
    ),
    "execv": "import sys\nos.execv(sys.executable, [sys.executable, '-c', 'open(\"{target}\", \"w\")'])",
    "ctypes system": (
        "import ctypes\nif ctypes.CDLL(None).system(b'touch {target}') != 0:\n    raise OSError('system() failed')"
    ),
    "dlsym call_function": (
        "import _ctypes, ctypes\n"
        "handle = _ctypes.dlopen(None, 0)\n"
        "address = _ctypes.dlsym(handle, 'system')\n"
        "if ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)(address)(b'touch {target}') != 0:\n"
        "    raise OSError('system() failed')"
    ),
    "raw fork syscall": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nif libc.syscall(57) < 0:\n"
    "    raise OSError(ctypes.get_errno(), 'fork refused')",
    "LD_PRELOAD via setenv": (
        "import ctypes\nctypes.CDLL(None).setenv(b'LD_PRELOAD', b'/nonexistent.so', 1)\n"
        "if os.system('touch {target}') != 0:\n    raise OSError('system() failed')"
    ),
    "environ._data": (
        "os.environ._data[b'LD_PRELOAD'] = b'/x.so'\nimport subprocess\nsubprocess.run(['touch', '{target}'])"
    ),
    "fork bomb": "while True:\n    os.fork()",
    "thread bomb": (
        "import threading, time\n"
        "threads = [threading.Thread(target=time.sleep, args=(30,), daemon=True) for _ in range(10_000)]\n"
        "for t in threads:\n"
        "    t.start()"
    ),
}


# a fork bomb is refused by seccomp; with the namespaces alone the run's cgroup (pids.max) bounds it,
# also as root, where RLIMIT_NPROC does not apply
@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(PROCESSES))
def test_no_process_escapes_or_outlives_the_call(arena: Arena, route: str, layers: Layers) -> None:
    target = arena.target(f"process-{route.replace(' ', '-')}-{layers}")
    contained(PROCESSES[route].format(target=target), "import os", layers)  # play checks for leftovers
    time.sleep(0.2)  # a process that escaped would go on writing
    assert not target.exists()


# --- signals to other processes ------------------------------------------------------------------------

SIGNALS = {
    "kill": "os.kill({pid}, signal.SIGUSR1)",
    "killpg": "os.killpg(os.getpgid({pid}), signal.SIGUSR1)",
    "kill every process": "os.kill(-1, signal.SIGUSR1)",
    "pidfd_send_signal": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.syscall(434, {pid}, 0)\n"
        "if fd < 0 or libc.syscall(424, fd, int(signal.SIGUSR1), None, 0) < 0:\n"
        "    raise OSError(ctypes.get_errno(), 'refused')"
    ),
    "ptrace attach": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, {pid}, None, None) < 0:\n    raise OSError(ctypes.get_errno(), 'refused')"
    ),
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(SIGNALS))
def test_no_signal_reaches_another_process(arena: Arena, route: str, layers: Layers) -> None:
    contained(SIGNALS[route].format(pid=arena.victim.pid), "import os, signal", layers)
    time.sleep(0.1)
    assert arena.victim.poll() is None and not arena.victim_flag.exists()


# --- sockets of every family -----------------------------------------------------------------------------

SOCKETS = {
    "tcp": "socket.create_connection(('127.0.0.1', {tcp}), timeout=1).send(b'x')",
    "udp": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp}))",
    "unix path": "s = socket.socket(socket.AF_UNIX)\ns.connect({unix!r})",
    "unix abstract": "s = socket.socket(socket.AF_UNIX)\ns.connect('\\0' + {abstract!r})",
    "raw _socket": "import _socket\n_socket.socket(_socket.AF_INET, _socket.SOCK_STREAM).connect(('127.0.0.1', {tcp}))",
    "netlink": "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
    "packet": "socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)",
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(SOCKETS))
def test_no_socket_reaches_the_host(arena: Arena, route: str, layers: Layers) -> None:
    body = SOCKETS[route].format(
        tcp=arena.tcp_port, udp=arena.udp_port, unix=arena.unix_path, abstract=arena.abstract_name
    )
    contained(body, "import socket", layers)
    time.sleep(0.3)  # the listeners poll every 0.2 s
    assert arena.heard == []


# --- the hook removed, then the kernel alone ---------------------------------------------------------------


def test_removing_the_audit_hook_leaves_the_kernel_in_charge(arena: Arena) -> None:
    target = arena.target("after-hook-removal")
    body = f"""
    import sys
    sys.modules['__main__'].BLOCKED_EVENTS = frozenset()
    os.mkdir({str(target)!r})
    """
    result = play(attack(body, "import os"), EVERYTHING)
    assert not target.exists() and result.passed == 0
    assert "FileNotFoundError" in result.detail  # the hook let it through; the host folder is not mounted


# --- forged scores --------------------------------------------------------------------------------------------

FORGERIES = {
    "patched json.dumps": (
        "import json\n"
        'json.dumps = lambda *a, **k: \'{"loaded": true, "tests": [{"passed": true}, {"passed": true}]}\'\n'
        "def add(a, b):\n    return None"
    ),
    "report line and exit": (
        "import os, sys\nfor fd in range(3, 20):\n    try:\n"
        '        os.write(fd, b\'{"loaded": true, "passed": 2, "status": "passed"}\\n\')\n'
        "    except OSError:\n        pass\n"
        "print('passed')\nos._exit(0)"
    ),
    "claims to every descriptor, then exits": (
        'import os\nline = b\'{"loaded": true, "error": "", "cases": [{"value": "3"}, {"value": [0]}]}\\n\'\n'
        "for fd in range(0, 64):\n    try:\n        os.write(fd, line)\n    except OSError:\n        pass\nos._exit(0)"
    ),
    "always-equal object": (
        "class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes()"
    ),
    "int subclass that equals anything": (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Liar(7)"
    ),
    "fake list class": (
        "class Fake:\n    __class__ = list\n    def __iter__(self):\n        return iter([])\n"
        "def add(a, b):\n    return Fake()"
    ),
    "answers from the problem file": (
        f"def add(a, b):\n    text = open({str(REPO / 'scenarios' / 'deepeval' / 'code_problems.toml')!r}).read()\n"
        "    return text"
    ),
    "exit inside a test": "import sys\ndef add(a, b):\n    sys.exit(0)",
    "keyboard interrupt": "def add(a, b):\n    raise KeyboardInterrupt",
    "patched builtins": "import builtins\nbuiltins.isinstance = lambda *a: True\ndef add(a, b):\n    return 'x'",
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(FORGERIES))
def test_no_forgery_scores(route: str, layers: Layers) -> None:
    result = play(FORGERIES[route], layers)
    assert result.passed == 0 and result.fraction == 0.0 and result.status != "passed"


def test_a_forged_result_is_only_a_claimed_value() -> None:
    """The parent rebuilds values from tags; anything else is malformed, never 'passed'."""
    case = TestCase(call="f()", expect="[1, 2]")
    assert judge_case(case, {"value": {"list": [{"int": "1"}, {"int": "2"}]}}) == (True, "")
    for forged in (
        {"passed": True},
        {"value": [1, 2]},
        {"value": {"list": [1, 2], "x": 1}},
        {"value": {"eval": "[1, 2]"}},
    ):
        assert judge_case(case, forged)[0] is False
    assert judge_case(TestCase(call="f()", expect="True"), {"value": {"int": "1"}})[0] is False  # `is True`, not == 1
    assert decode({"tuple": [{"int": "1"}]}) == (1,) and decode({"tuple": [{"int": "1"}]}) != [1]


# --- resources --------------------------------------------------------------------------------------------------

RESOURCES = {
    "memory": ("x = bytearray(8 * 1024 ** 3)", ("MemoryError",)),
    "cpu": ("while True:\n    pass", ("TimeoutError", "CPU time limit")),
    "stubborn sleep": (
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n"
        "    try:\n        time.sleep(60)\n    except BaseException:\n        pass",
        ("killed after",),
    ),
    "disk": (
        "i = 0\nwhile True:\n    open(f'/work/f{i}', 'wb').write(b'x' * 32_000)\n    i += 1",
        ("No space left on device",),
    ),
    "output": ("import sys\nwhile True:\n    sys.stdout.write('y' * 4096)", ("output limit", "File too large")),
    "one huge file": ("open('/work/big', 'wb').write(b'x' * 10_000_000)", ("File too large",)),
    "deep result": ("x = []\nfor _ in range(10_000):\n    x = [x]\nreturn x", ("too large or too deep",)),
}


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("route", sorted(RESOURCES))
def test_exhaustion_is_contained(route: str, layers: Layers) -> None:
    body, evidence = RESOURCES[route]
    result = contained(body, "", layers)
    assert any(word in result.detail for word in evidence), result.detail


# --- honest code ------------------------------------------------------------------------------------------------


def test_every_problem_has_tests_its_reference_passes() -> None:
    assert len(PROBLEMS) >= 20 and len({p.id for p in PROBLEMS}) == len(PROBLEMS)
    for problem in PROBLEMS:
        assert problem.function in problem.description and len(problem.tests) >= 3
        run = run_tests(problem.reference, problem.tests, LIMITS)
        assert (run.status, run.passed) == ("passed", len(problem.tests)), (problem.id, run.detail)
        wrong = f"def {problem.function}(*args, **kwargs):\n    return None\n"
        assert run_tests(wrong, problem.tests, LIMITS).status == "failed", problem.id


PARTIAL = {
    # running_max forgets the empty list: 3 of 4
    "running_max": (
        "def running_max(values):\n    return [max(values[: i + 1]) for i in range(len(values))] or None\n",
        3,
    ),
    # counts y as a vowel: 'rhythm' fails, 3 of 4
    "vowel_count": ("def count_vowels(text):\n    return sum(ch in 'aeiouy' for ch in text.lower())\n", 3),
    # chunk without the ValueError: 3 of 4
    "chunk": (
        "def chunk(items, size):\n    return [items[i : i + size] for i in range(0, len(items), max(size, 1))]\n",
        3,
    ),
}


def test_honest_code_is_scored_by_the_values_it_returns() -> None:
    problems = {problem.id: problem for problem in PROBLEMS}
    for problem_id, (code, passed) in PARTIAL.items():
        run = run_tests(code, problems[problem_id].tests, LIMITS)
        assert (run.status, run.passed) == ("failed", passed), (problem_id, run.detail)
    threads = (
        "import threading\ndef add(a, b):\n    out = []\n    t = threading.Thread(target=lambda: out.append(a + b))\n"
        "    t.start()\n    t.join()\n    return out[0]\n"
    )
    assert run_tests(threads, ADD, LIMITS).passed == 2  # threads are allowed; processes are not
    values = "def add(a, b):\n    return {(a, b): {a, b}, 'bytes': b'\\x00', 'f': a / 2}\n"
    expected = TestCase(call="add(1, 2)", expect="{(1, 2): {1, 2}, 'bytes': b'\\x00', 'f': 0.5}")
    assert run_tests(values, [expected], LIMITS).passed == 1


def test_a_raises_case_needs_the_real_exception_not_one_named_like_it() -> None:
    """`raises = "ValueError"` passes for the built-in and its subclasses only; the candidate's own
    class called ValueError (even one claiming the builtins module) is reported under its module."""
    cases = [TestCase(call="check(0)", raises="ValueError")]
    real = "class Empty(ValueError):\n    pass\ndef check(n):\n    raise Empty('n is 0')"
    assert run_tests(real, cases, LIMITS).passed == 1
    for impostor in (
        "class ValueError(Exception):\n    pass\ndef check(n):\n    raise ValueError('n is 0')",
        "class ValueError(Exception):\n    __module__ = 'builtins'\ndef check(n):\n    raise ValueError('n')",
    ):
        run = run_tests(impostor, cases, LIMITS)
        assert run.passed == 0 and "should raise ValueError" in run.detail, run.detail
    own = [TestCase(call="check(0)", raises="candidate.ValueError")]
    assert run_tests(impostor.replace("'builtins'", "'candidate'"), own, LIMITS).passed == 1


def test_unsafe_execution_has_no_kernel_layer_and_says_so() -> None:
    run = run_tests("def add(a, b):\n    return a + b\n", ADD, LIMITS, "unsafe")
    assert run.passed == 2 and run.isolation["kernel"].startswith("none: --unsafe-code-execution")
    assert run.isolation["claimed seccomp"] == "filter installed"  # the child's own filter still holds
    forked = run_tests(attack("os.fork()", "import os"), ADD, LIMITS, "unsafe", audit_hook=False)
    assert "Operation not permitted" in forked.detail  # seccomp, not the hook, refused it


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ("{ call = 'f(1)' }", "give exactly one of 'expect' and 'raises'"),
        ("{ call = 'f(1)', expect = 'os.getcwd()' }", "'expect' 'os.getcwd()' is not a Python literal"),
        ("{ call = 'f(', expect = '1' }", "'call' is not a Python expression"),
    ],
)
def test_a_malformed_test_is_refused_naming_the_file_and_field(tmp_path: Path, test: str, message: str) -> None:
    path = tmp_path / "code_problems.toml"
    path.write_text(
        f'[[problem]]\nid = "p"\nfunction = "f"\ndescription = "f"\ntests = [{test}]\n'
        'reference = "def f(x): return x"\n',
        encoding="utf-8",
    )
    with pytest.raises(ApplianceError) as refused:
        load_problems(path)
    assert str(refused.value).startswith(f"{path}: field 'tests.0'") and message in str(refused.value)


@pytest.mark.parametrize("layers", [EVERYTHING, NAMESPACES])
def test_a_correct_program_may_use_the_device_nodes(layers: Layers) -> None:
    """Writing to os.devnull and reading /dev/urandom is ordinary code: it passes under every layer,
    the audit hook included, while the nodes themselves stay unchangeable (test_sandbox_host)."""
    code = """
import os
def running_max(values):
    with open(os.devnull, 'w') as log:
        log.write('starting')
    with open('/dev/urandom', 'rb') as noise:
        assert len(noise.read(8)) == 8
    best, out = None, []
    for value in values:
        best = value if best is None or value > best else best
        out.append(best)
    return out
"""
    cases = [
        TestCase(call="running_max([3, 1, 4, 1, 5])", expect="[3, 3, 4, 4, 5]"),
        TestCase(call="running_max([])", expect="[]"),
    ]
    result = play(code, layers, cases)
    assert (result.status, result.passed) == ("passed", 2), result.detail
