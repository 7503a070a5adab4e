"""The test runner that runs next to a program, inside its jail, as the same unprivileged user. Standard library only:
it runs with `python -I -S`, locally inside bubblewrap (see `jail.py`) or as the script of a remote sandbox.

It reads one request on stdin (a `marshal`led dict: {language, code, inputs, time_limit, memory_mb, max_output,
nproc, argv, files, test_files, output_file, contained}), and answers with JSON lines on stdout (outputs base64-encoded):

    {"ready": true}                       setup done; from here on only the program can make things fail
    {"compile": {"ok": bool, "stderr64": str}}         C++ only
    {"result": {status, stdout64, stderr64, exit_code, signal, seconds}}   one per test, in order
    {"done": true}

It imports only what it needs before a test starts (each import is start-up time paid per program).

It never sees expected outputs: judging happens in the trainer. Each test runs in its own child (forked from this
interpreter for Python, exec'd from the compiled binary for C++) with CPU-time, address-space, process, open-file and
output-size limits; its stdin, stdout and stderr are anonymous memory files this process created and reads back
through descriptors it holds, so the program cannot point them anywhere else. This process is not dumpable, so the
program cannot open its descriptors through /proc or trace it. Inside a jail of its own (`contained`), every process
left over after a test is killed.
"""

import binascii
import marshal
import os
import resource
import sys
import time

PASSED, RUNTIME, TIMEOUT, MEMORY = "passed", "runtime_error", "time_limit", "memory_limit"
SIGKILL, SIGXCPU, SIGXFSZ = 9, 24, 25  # numbers, not the `signal` module: it costs an enum import per program
COMPILER = "/usr/bin/g++"
COMPILE_LIMITS = {"memory_mb": 2048, "cpu_seconds": 30, "wall_seconds": 60, "output": 64 << 20, "nproc": 64}
READ_LIMIT = 4000


def set_not_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): /proc/<this pid>/fd, /mem and ptrace become root-only."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - without ctypes the jail still separates us from the host
        pass


def memfile(name, content=b""):
    fd = os.memfd_create(name, os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else _unlinked_file()
    if content:
        os.write(fd, content)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _unlinked_file():
    import tempfile

    fd, path = tempfile.mkstemp()
    os.unlink(path)
    return fd


def read_back(fd, limit):
    try:
        return os.pread(fd, limit, 0).decode("utf-8", "replace")
    except OSError:
        return ""


def limit(memory_mb, cpu_seconds, max_output, nproc):
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_output, max_output))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def run_python_in_child(code, argv):
    """In the forked child: run the program as __main__ with fresh standard streams."""
    import builtins
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    sys.argv = ["solution.py", *argv]
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
        import traceback

        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001 - e.g. output limit reached while flushing
        status = status or 1
    os._exit(status & 0xFF)


def _default_sigint():
    try:
        import _signal

        _signal.signal(2, _signal.default_int_handler)
    except (ImportError, OSError, ValueError):
        pass


def spawn(stdin, limits, run):
    """Forks a child with its own session, memory files for its standard streams and `limits`; `run()` becomes the
    child. Returns (pid, stdout fd, stderr fd)."""
    fd_in = memfile("stdin", stdin.encode())
    fd_out, fd_err = memfile("stdout"), memfile("stderr")
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            _default_sigint()
            for fd, target in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
                os.dup2(fd, target)
            run(limits)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(127)
    os.close(fd_in)
    return pid, fd_out, fd_err


def wait(pid, seconds, contained):
    """Waits for `pid` at most `seconds` of wall time; returns (status word or None on time-out, elapsed)."""
    start = time.monotonic()
    deadline = start + seconds
    wait_status = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            wait_status = status
            break
        if time.monotonic() >= deadline:
            try:
                os.killpg(pid, SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            break
        time.sleep(0.0005 if time.monotonic() - start < 0.02 else 0.005)
    elapsed = time.monotonic() - start
    kill_leftovers(pid, contained)
    return wait_status, elapsed


def kill_leftovers(pid, contained):
    """Kills what a test left running. In a jail of our own that is every process but us (the jail's pid 1; orphans
    become our children and are reaped here); elsewhere (a remote sandbox) only the test's process group, never the
    host's other processes."""
    me = os.getpid()
    for _ in range(200):
        if contained:
            try:
                os.kill(-1, SIGKILL)
            except OSError:
                pass
        else:
            try:
                os.killpg(pid, SIGKILL)
            except OSError:
                pass
        reap()
        if not contained or not [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]:
            return
        time.sleep(0.001)


def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def classify(wait_status, stderr):
    """(status, exit code, signal) of a finished test."""
    if wait_status is None:
        return TIMEOUT, None, SIGKILL
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        return (TIMEOUT if sig == SIGXCPU else RUNTIME), None, sig
    code = os.WEXITSTATUS(wait_status)
    if code == 0:
        return PASSED, 0, None  # ran cleanly; the trainer compares the output
    if "MemoryError" in stderr or "std::bad_alloc" in stderr:
        return MEMORY, code, None
    return RUNTIME, code, None


def run_test(request, stdin, binary_fd):
    time_limit = float(request["time_limit"])
    limits = (int(request["memory_mb"]), int(time_limit) + 1, int(request["max_output"]), int(request["nproc"]))
    argv = [str(a) for a in request.get("argv") or []]

    def become_program(limits):
        if binary_fd is not None:
            os.dup2(binary_fd, 3)
            os.closerange(4, 65536)
            limit(*limits)
            os.set_inheritable(3, False)
            os.execve(3, ["solution", *argv], {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        os.closerange(3, 65536)
        limit(*limits)
        run_python_in_child(request["code"], argv)

    pid, fd_out, fd_err = spawn(stdin, limits, become_program)
    wait_status, seconds = wait(pid, time_limit, request.get("contained", False))
    stderr = read_back(fd_err, 1 << 20)
    status, exit_code, sig = classify(wait_status, stderr)
    if sig == SIGXFSZ:
        stderr += "\noutput limit exceeded"
    stdout = read_back(fd_out, int(request["max_output"]))
    os.close(fd_out)
    os.close(fd_err)
    return {"status": status, "stdout": stdout, "stderr": stderr[-READ_LIMIT:], "exit_code": exit_code, "signal": sig,
            "seconds": round(seconds, 4)}


TEXT_FIELDS = ("stdout", "stderr")  # the program's text: base64, so nothing it writes can break the line


def encode_line(item):
    """One reply line as JSON, written by hand (no `json` import): the program's text in base64, the rest fixed
    words, numbers, booleans or null."""
    (key, value), = item.items()
    if not isinstance(value, dict):
        return f'{{"{key}": true}}'
    fields = []
    for name, field in value.items():
        if name in TEXT_FIELDS:
            text = binascii.b2a_base64(str(field).encode("utf-8", "replace"), newline=False).decode()
            fields.append(f'"{name}64": "{text}"')
        elif isinstance(field, bool) or field is None:
            fields.append(f'"{name}": {"null" if field is None else str(field).lower()}')
        elif isinstance(field, str):
            fields.append(f'"{name}": "{field}"')  # a status word
        else:
            fields.append(f'"{name}": {field!r}')
    return f'{{"{key}": {{{", ".join(fields)}}}}}'


def compile_cpp(request):
    """Compiles solution.cpp (plus grader .cpp files) as this unprivileged user, with limits; returns
    ({ok, stderr}, descriptor of the binary or None)."""
    with open("solution.cpp", "w") as f:
        f.write(request["code"])
    graders = sorted(n for n in request.get("files") or {} if n.endswith(".cpp") and n != "solution.cpp")
    cmd = [COMPILER, "-O2", "-std=c++17", "-o", "solution", "solution.cpp", *graders]
    c = COMPILE_LIMITS

    def become_compiler(limits):
        os.closerange(3, 65536)
        limit(*limits)
        os.execve(cmd[0], cmd, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": os.getcwd()})

    pid, fd_out, fd_err = spawn("", (c["memory_mb"], c["cpu_seconds"], c["output"], c["nproc"]), become_compiler)
    wait_status, _ = wait(pid, c["wall_seconds"], request.get("contained", False))
    stderr = read_back(fd_err, READ_LIMIT) + read_back(fd_out, 1000)
    os.close(fd_out)
    os.close(fd_err)
    ok = wait_status is not None and os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == 0
    if wait_status is None:
        stderr += "\ncompilation exceeded its time limit"
    if not ok:
        return {"ok": False, "stderr": stderr[-READ_LIMIT:]}, None
    try:
        return {"ok": True, "stderr": stderr[-READ_LIMIT:]}, os.open("solution", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return {"ok": False, "stderr": f"no binary: {e}"}, None


def write_files(files):
    """Writes `files` into the working folder, replacing what is there: never through a link the program planted
    (O_NOFOLLOW after unlinking, O_EXCL). Raises OSError when the program made that impossible (a folder there)."""
    for name, content in (files or {}).items():
        path = os.path.basename(str(name))
        if not path or path.startswith("."):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(str(content))


def read_output_file(name, limit):
    """The program's output file, read without following links or blocking on a FIFO; "" when it is not a regular
    file."""
    import stat

    try:
        fd = os.open(os.path.basename(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        return read_back(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    finally:
        os.close(fd)


def run_one(request, index, binary_fd):
    """Test `index`: its own files first (a checker's inputs, or input.txt for file I/O), then the run; with
    `output_file`, what the program wrote there is its output."""
    per_test = request.get("test_files") or []
    output_file = request.get("output_file")
    try:
        if output_file:
            write_files({output_file: ""})
        write_files(per_test[index] if index < len(per_test) else {})
    except OSError as e:
        return {"status": RUNTIME, "stdout": "", "stderr": f"could not prepare the test's files: {e}", "exit_code": None,
                "signal": None, "seconds": 0.0}
    result = run_test(request, str(request["inputs"][index]), binary_fd)
    if output_file:
        result["stdout"] = read_output_file(output_file, int(request["max_output"]))
    return result


def serve(request, emit):
    """Runs one program's tests, calling `emit(dict)` for each reply line."""
    set_not_dumpable()
    workdir = None
    if not request.get("contained"):  # a remote sandbox: a fresh folder of our own
        import tempfile

        workdir = tempfile.mkdtemp(prefix="r1kit-")
        os.chdir(workdir)
    if request["language"] == "cpp" and not os.access(COMPILER, os.X_OK):
        # the sandbox cannot judge C++ at all: an infrastructure failure (no `ready`), never the program's fault
        sys.stderr.write(f"no C++ compiler at {COMPILER} in the sandbox: install g++\n")
        return
    emit({"ready": True})
    try:
        write_files(request.get("files"))
        binary_fd = None
        if request["language"] == "cpp":
            compiled, binary_fd = compile_cpp(request)
            emit({"compile": compiled})
            if not compiled["ok"]:
                emit({"done": True})
                return
        for index in range(len(request["inputs"])):
            emit({"result": run_one(request, index, binary_fd)})
        emit({"done": True})
    finally:
        if workdir:
            import shutil

            os.chdir("/")
            shutil.rmtree(workdir, ignore_errors=True)


def main():
    import _signal  # the C module: `signal` would import enum, start-up time paid per program

    _signal.signal(2, _signal.SIG_IGN)  # as the jail's pid 1, SIGINT is the one signal a program could send us
    request = marshal.loads(sys.stdin.buffer.read())
    reply = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)

    def emit(line):
        reply.write(encode_line(line) + "\n")
        reply.flush()

    serve(request, emit)


if __name__ == "__main__":
    main()
