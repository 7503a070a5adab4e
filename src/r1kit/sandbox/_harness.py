"""The in-sandbox test runner. Started once per program by the local provider, as a fresh interpreter with a scrubbed
environment and, where the machine allows, in new network, PID and mount namespaces.

It reads one JSON request on stdin: {language, code, inputs, time_limit, memory_mb, max_output, uid, hide}, and
writes one JSON reply on stdout: {"compile": {...} | null, "results": [{status, stdout, stderr, exit_code, signal,
seconds}]}. It never sees expected outputs: judging happens in the trainer, so a program cannot read the answers out
of this process's memory.

Each test runs in its own child process: forked from this interpreter for Python (no interpreter start-up per test),
or exec'd for a compiled binary. The child drops to an unprivileged uid, gets CPU-time, address-space, process,
open-file and file-size limits, and its stdin/stdout/stderr are files in a private working directory. After each test
every other process in the namespace is killed, so nothing a test starts outlives it.

This file must only use the standard library: it runs with `python -I -S`.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback

PASSED, WRONG, RUNTIME, TIMEOUT, MEMORY, COMPILE, SANDBOX = (
    "passed", "wrong_answer", "runtime_error", "time_limit", "memory_limit", "compile_error", "sandbox_error"
)
NAMESPACED = os.environ.pop("R1KIT_SANDBOX_NAMESPACED", "") == "1"
IS_ROOT = os.geteuid() == 0


MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
STDLIB_VIEW = "/tmp/.r1kit-stdlib"  # where the standard library is visible to the unprivileged test uid
PATH_MAP = []  # (original prefix, visible prefix) pairs applied to sys.path in test children


def private_mounts(hide):
    """In our own mount namespace: a /proc that shows only this namespace's processes, fresh tmpfs over the
    world-writable folders (so writes vanish with the sandbox) and over the trainer's folders (so they cannot be
    read), and a read-only view of the standard library where the test uid can reach it (Python often lives under
    a home folder that other users cannot enter)."""
    import sysconfig

    mount("proc", "/proc", "proc", "")
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    stdlib_fd = os.open(stdlib, os.O_RDONLY | os.O_DIRECTORY)  # still reachable if a tmpfs below covers its path
    for path in ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", *hide]:
        if os.path.isdir(path) and not os.path.islink(path):
            mount("tmpfs", path, "tmpfs", "size=256m,mode=1777")
    os.makedirs(STDLIB_VIEW, mode=0o755)
    mount(f"/proc/self/fd/{stdlib_fd}", STDLIB_VIEW, "", "", MS_BIND | MS_REC)
    mount("none", STDLIB_VIEW, "", "", MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.close(stdlib_fd)
    PATH_MAP.append((stdlib, STDLIB_VIEW))


def mount(source, target, fstype, options, flags=0):
    """mount(2) through libc: a `mount` process per call would cost more than the tests."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode() or None, flags, options.encode() or None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {fstype or source} on {target}: {os.strerror(errno)}")


# Imported before tests start when the standard library could not be re-mounted for the test uid (no namespace):
# what solutions commonly import stays usable even where the interpreter's folder is unreadable to that uid.
COMMON_MODULES = (
    "typing", "collections", "heapq", "bisect", "functools", "itertools", "re", "string", "fractions", "decimal",
    "random", "statistics", "datetime", "copy", "array", "dataclasses", "operator", "math", "cmath", "json", "queue",
)


def preimport_common_modules():
    import importlib

    for name in COMMON_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def remap_sys_path():
    """In a test child: find the standard library through its visible view."""
    for original, visible in PATH_MAP:
        sys.path[:] = [visible + p[len(original):] if p.startswith(original) else p for p in sys.path]


def limit(memory_mb, cpu_seconds, max_output, nproc):
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_output, max_output))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def drop_privileges(uid):
    if IS_ROOT and uid:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def run_python_in_child(code, argv):
    """In the forked child: run the program as __main__ with fresh standard streams."""
    import builtins
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    sys.argv = ["solution.py", *argv]
    remap_sys_path()
    status = 0
    try:
        exec(compile(code, "solution.py", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            sys.stderr.write(str(e.code) + "\n")
    except MemoryError:
        sys.stderr.write("MemoryError\n")
        status = 1
    except BaseException:  # noqa: BLE001 - report the program's own error
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001 - e.g. output limit reached while flushing
        status = status or 1
    os._exit(status)


def run_test(request, index, argv):
    """Runs one test in a child process; returns its result."""
    workdir = os.getcwd()
    stdin_path = os.path.join(workdir, f"in{index}")
    out_path, err_path = os.path.join(workdir, f"out{index}"), os.path.join(workdir, f"err{index}")
    with open(stdin_path, "w") as f:
        f.write(request["inputs"][index])
    for path in (out_path, err_path):
        open(path, "w").close()
        if IS_ROOT and request["uid"]:
            os.chown(path, request["uid"], request["uid"])
    time_limit = float(request["time_limit"])
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: become the program
        try:
            os.setsid()
            fd_in = os.open(stdin_path, os.O_RDONLY)
            fd_out = os.open(out_path, os.O_WRONLY | os.O_TRUNC)
            fd_err = os.open(err_path, os.O_WRONLY | os.O_TRUNC)
            for fd, target in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
                os.dup2(fd, target)
            os.closerange(3, 4096)
            drop_privileges(request["uid"])
            limit(request["memory_mb"], int(time_limit) + 1, request["max_output"], request["nproc"])
            if argv is None:
                run_python_in_child(request["code"], request.get("argv", []))
            os.execv(argv[0], [*argv, *request.get("argv", [])])
        except BaseException:  # noqa: BLE001
            os._exit(127)
    status, exit_code, sig = None, None, None
    deadline = start + time_limit
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            os.killpg(pid, signal.SIGKILL) if _alive(pid) else None
            os.waitpid(pid, 0)
            status = TIMEOUT
            break
        time.sleep(0.001 if time.monotonic() - start < 0.05 else 0.01)
    seconds = time.monotonic() - start
    kill_strays(request["uid"])
    if status is None:
        if os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            status = TIMEOUT if sig == signal.SIGXCPU else RUNTIME
        else:
            exit_code = os.WEXITSTATUS(wait_status)
            status = PASSED if exit_code == 0 else RUNTIME  # PASSED = ran cleanly; the trainer compares the output
    stderr = _read(err_path, 4000)
    if status == RUNTIME and ("MemoryError" in stderr or "std::bad_alloc" in stderr):
        status = MEMORY
    if sig == signal.SIGXFSZ:
        stderr += "\noutput limit exceeded"
    return {
        "status": status,
        "stdout": _read(out_path, request["max_output"]),
        "stderr": stderr[-4000:],
        "exit_code": exit_code,
        "signal": sig,
        "seconds": round(seconds, 4),
    }


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def kill_strays(uid):
    """Kills every process the test left behind. In our own PID namespace that is simply everyone but us; outside
    one, every process of the sandbox uid (unique to this program)."""
    if NAMESPACED:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    elif IS_ROOT and uid:
        pid = os.fork()
        if pid == 0:
            try:
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)  # everything this uid may signal: the program's processes
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    while True:  # reap
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


def _read(path, limit_bytes):
    try:
        with open(path, "rb") as f:
            return f.read(limit_bytes).decode("utf-8", "replace")
    except OSError:
        return ""


def compile_cpp(request):
    with open("solution.cpp", "w") as f:
        f.write(request["code"])
    extra = sorted(n for n in request.get("files", {}) if n.endswith(".cpp") and n != "solution.cpp")  # graders
    cmd = ["g++", "-O2", "-std=c++17", "-o", "solution", "solution.cpp", *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"ok": False, "stderr": str(e)}
    if proc.returncode == 0 and IS_ROOT and request["uid"]:
        os.chown("solution", request["uid"], request["uid"])
    return {"ok": proc.returncode == 0, "stderr": proc.stderr[-4000:]}


def serve(request):
    """Runs one program's tests; returns the reply."""
    if NAMESPACED and IS_ROOT:
        private_mounts(request.get("hide", []))
    elif IS_ROOT and request["uid"]:
        preimport_common_modules()
    workdir = os.path.join("/tmp", f"r1kit-run-{os.getpid()}-{time.monotonic_ns()}")
    os.makedirs(workdir, mode=0o755, exist_ok=True)
    if IS_ROOT and request["uid"]:
        os.chown(workdir, request["uid"], request["uid"])
    os.chdir(workdir)
    reply = {"compile": None, "results": []}
    try:
        for name, content in request.get("files", {}).items():
            with open(os.path.basename(name), "w") as f:
                f.write(content)
        argv = None
        if request["language"] == "cpp":
            reply["compile"] = compile_cpp(request)
            if not reply["compile"]["ok"]:
                return reply
            argv = [os.path.join(workdir, "solution")]
        for i in range(len(request["inputs"])):
            reply["results"].append(run_test(request, i, argv))
    finally:
        os.chdir("/")
        if not NAMESPACED:  # in a namespace the tmpfs vanishes with us
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    return reply


def main():
    reply = serve(json.loads(sys.stdin.read()))
    sys.stdout.write(json.dumps(reply))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
