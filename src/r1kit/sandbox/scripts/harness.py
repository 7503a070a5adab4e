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


def stdin_source(content, as_pipe):
    """(descriptor a test reads as its stdin, pid of a feeder process or None). A memory file by default (a program may
    mmap or seek its own input). A pipe when the program shares its process with a grader that reads hidden input
    (IOI): a pipe cannot be rewound, so what the grader read cannot be read again from offset 0. Input larger than
    the pipe holds is written by a feeder forked from this (not dumpable) process, which the program cannot read."""
    if not as_pipe:
        return memfile("stdin", content), None
    read_end, write_end = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(write_end, 1031, min(max(len(content), 1 << 16), 1 << 20))  # F_SETPIPE_SZ, up to 1 MiB
        capacity = fcntl.fcntl(write_end, 1032)  # F_GETPIPE_SZ
    except (ImportError, OSError):
        capacity = 1 << 16
    feeder = None
    if len(content) <= capacity:
        os.write(write_end, content)
    else:
        feeder = os.fork()
        if feeder == 0:
            try:
                os.closerange(0, write_end)
                os.closerange(write_end + 1, 65536)
                view = memoryview(content)
                while view:
                    view = view[os.write(write_end, view):]
            finally:
                os._exit(0)
    os.close(write_end)
    return read_end, feeder


def new_process_group():
    """The child's own process group (killpg reaches the whole test). In a jail, setsid is refused by seccomp so that
    every process of a jail shares one session: the kernel's autogroup scheduling then shares the CPU between jails,
    not between processes, and 60 busy processes in one jail cannot starve its siblings."""
    try:
        os.setsid()
    except OSError:
        os.setpgid(0, 0)


def spawn(stdin, limits, run, stdin_pipe=False):
    """Forks a child with its own process group, memory files for its standard streams and `limits`; `run()` becomes
    the child. Returns (pid, stdout fd, stderr fd, feeder pid or None)."""
    fd_in, feeder = stdin_source(stdin.encode(), stdin_pipe)
    fd_out, fd_err = memfile("stdout"), memfile("stderr")
    pid = os.fork()
    if pid == 0:
        try:
            new_process_group()
            _default_sigint()
            for fd, target in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
                os.dup2(fd, target)
            run(limits)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(127)
    os.close(fd_in)
    return pid, fd_out, fd_err, feeder


def stop_feeder(feeder):
    if feeder is None:
        return
    try:
        os.kill(feeder, SIGKILL)
        os.waitpid(feeder, 0)
    except OSError:  # already reaped with the test's leftovers
        pass


def wait(pid, seconds, contained, cpu_seconds=None):
    """Waits for `pid` at most `seconds` of wall time and, in a jail of our own, `cpu_seconds` of CPU time summed over
    every process of the test (a program cannot split its work over many processes to take more than one test's CPU
    budget from its siblings). Returns (status word or None on time-out, elapsed)."""
    start = time.monotonic()
    deadline = start + seconds
    wait_status = None
    budget = cpu_seconds if contained and cpu_seconds else None
    baseline = jail_cpu_seconds() if budget else 0.0
    next_cpu_check = start + CPU_CHECK_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            wait_status = status
            break
        now = time.monotonic()
        over_cpu = False
        if budget and now >= next_cpu_check:
            next_cpu_check = now + CPU_CHECK_SECONDS
            over_cpu = jail_cpu_seconds() - baseline > budget
        if now >= deadline or over_cpu:
            try:
                os.killpg(pid, SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            break
        time.sleep(0.0005 if now - start < 0.02 else 0.005)
    elapsed = time.monotonic() - start
    kill_leftovers(pid, contained)
    return wait_status, elapsed


CPU_CHECK_SECONDS = 0.02


def jail_cpu_seconds():
    """CPU seconds used so far by every process of this jail but us (live or zombie, with the children each reaped),
    plus those we reaped. Only meaningful in a jail of our own, where every other process is the program's."""
    me, ticks, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        except (OSError, IndexError, ValueError):
            continue
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total / ticks + reaped.ru_utime + reaped.ru_stime


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

    pid, fd_out, fd_err, feeder = spawn(stdin, limits, become_program, stdin_pipe=bool(grader_sources(request)))
    wait_status, seconds = wait(pid, time_limit, request.get("contained", False), cpu_seconds=time_limit)
    stop_feeder(feeder)
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


def grader_sources(request):
    """The grader's .cpp files compiled with the solution (IOI), sorted; [] for a program of its own."""
    return sorted(n for n in request.get("files") or {} if str(n).endswith(".cpp") and n != "solution.cpp")


def run_tool(cmd, deadline, contained, output=READ_LIMIT):
    """Runs a compiler-side tool (g++, nm) as this unprivileged user with the compile limits, until `deadline` at
    most. Returns (ok, stdout, stderr)."""
    c = COMPILE_LIMITS

    def become_tool(limits):
        os.closerange(3, 65536)
        limit(*limits)
        os.execve(cmd[0], cmd, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": os.getcwd()})

    pid, fd_out, fd_err, _ = spawn("", (c["memory_mb"], c["cpu_seconds"], c["output"], c["nproc"]), become_tool)
    wait_status, _ = wait(pid, max(0.0, deadline - time.monotonic()), contained)
    stdout, stderr = read_back(fd_out, output), read_back(fd_err, READ_LIMIT)
    os.close(fd_out)
    os.close(fd_err)
    if wait_status is None:
        stderr += "\ncompilation exceeded its time limit"
    return wait_status is not None and os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == 0, stdout, stderr


def compile_cpp(request):
    """Compiles solution.cpp (plus grader .cpp files) as this unprivileged user, with limits; returns
    ({ok, stderr}, descriptor of the binary or None)."""
    with open("solution.cpp", "w") as f:
        f.write(request["code"])
    graders = grader_sources(request)
    deadline = time.monotonic() + COMPILE_LIMITS["wall_seconds"]
    contained = request.get("contained", False)
    if graders:
        ok, stderr = compile_with_grader(graders, deadline, contained)
    else:
        ok, stdout, stderr = run_tool([COMPILER, "-O2", "-std=c++17", "-o", "solution", "solution.cpp"], deadline,
                                      contained)
        stderr += stdout[:1000]
    if not ok:
        return {"ok": False, "stderr": stderr[-READ_LIMIT:]}, None
    try:
        return {"ok": True, "stderr": stderr[-READ_LIMIT:]}, os.open("solution", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return {"ok": False, "stderr": f"no binary: {e}"}, None


# IOI's function-call graders run in the solution's process: the grader's main() reads the hidden test and calls the
# solution's functions directly, sharing its memory. Running them in two processes would need a stub per problem
# that forwards each call (IOI's own "manager" tasks do that; open-r1/ioi's graders do not), so this is not done
# generically. What is done: the solution is compiled alone and refused (a compile error: wrong) when it defines a
# symbol the C/C++ libraries or the grader define (its own `puts` would replace the grader's), or refers to the
# grader's data (its globals holding the answer); the grader is linked first and the binary stripped; stdin is a
# pipe (see `stdin_source`). Left open: a solution that reads or patches the grader's memory at run time (scanning
# its own address space, mprotect on the GOT) is not detected in one process.
LIBRARIES = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1")
WEAK = ("W", "V", "w", "v", "u")
DATA = ("B", "b", "D", "d", "R", "r", "G", "g", "S", "s", "C", "V", "v", "u")
NM_OUTPUT = 16 << 20


def compile_with_grader(graders, deadline, contained):
    """(ok, stderr): the solution and each grader compiled to objects, the solution's symbols checked against the
    libraries' and the grader's (`symbol_conflict`), then linked with the grader first and stripped."""
    base = [COMPILER, "-O2", "-std=c++17", "-c"]
    objects = [f"r1kit-grader-{i}.o" for i in range(len(graders))]
    for source, obj in [("solution.cpp", "r1kit-solution.o"), *zip(graders, objects)]:
        ok, stdout, stderr = run_tool([*base, source, "-o", obj], deadline, contained)
        if not ok:
            return False, stderr + stdout[:1000]
    tables = {}
    for name, args in [("solution", ["r1kit-solution.o"]), ("grader", objects),
                       *[(lib, ["-D", library_path(lib, deadline, contained)]) for lib in LIBRARIES]]:
        ok, stdout, stderr = run_tool(["/usr/bin/nm", "-P", "-g", *args], deadline, contained, NM_OUTPUT)
        if not ok and name in ("solution", "grader"):
            return False, "could not read the symbols of the compiled objects: " + stderr
        tables[name] = symbol_table(stdout)
    conflict = symbol_conflict(tables)
    if conflict:
        return False, conflict
    ok, stdout, stderr = run_tool([COMPILER, "-s", "-o", "solution", *objects, "r1kit-solution.o"], deadline, contained)
    return ok, stderr + stdout[:1000]


def library_path(name, deadline, contained):
    ok, stdout, _ = run_tool([COMPILER, f"-print-file-name={name}"], deadline, contained)
    return stdout.strip() if ok and stdout.strip() else name


def symbol_table(nm_output):
    """{name: type letter} from `nm -P` output (a library's symbol versions dropped). A name with odd characters
    maps to "?" (always a conflict)."""
    table = {}
    for line in nm_output.splitlines():
        fields = line.split()
        if len(fields) < 2 or (fields[0].endswith(":") and len(fields) == 1):
            continue
        if len(fields) > 4 or len(fields[1]) != 1:
            table[line] = "?"
            continue
        table[fields[0].split("@", 1)[0]] = fields[1]
    return table


def symbol_conflict(tables):
    """Why the solution may not be linked with its grader, or None. Refused: a global symbol the solution defines
    that libc, libm or libgcc define, that libstdc++ defines strongly (weak template code from the headers is
    shared, as in any program), or that the grader defines unless both are weak (the same inline code); and a
    reference to data the grader defines."""
    solution, grader = tables["solution"], tables["grader"]
    for name, kind in sorted(solution.items()):
        if kind == "?":
            return f"refused: the solution defines an unreadable symbol {name[:80]!r}"
        if kind in ("U", "w", "v"):
            if grader.get(name, "U") in DATA:
                return f"refused: the solution refers to the grader's data {name!r}"
            continue
        weak = kind in WEAK
        for lib in ("libc.so.6", "libm.so.6", "libgcc_s.so.1"):
            if tables.get(lib, {}).get(name, "U") != "U":
                return f"refused: the solution defines {name!r}, which {lib} defines (it would replace the grader's)"
        if tables.get("libstdc++.so.6", {}).get(name, "U") not in ("U", *WEAK) or (
                not weak and tables.get("libstdc++.so.6", {}).get(name, "U") != "U"):
            return f"refused: the solution defines {name!r}, which libstdc++ defines"
        if grader.get(name, "U") != "U" and not (weak and grader[name] in WEAK):
            return f"refused: the solution defines {name!r}, which the grader defines"
    return None


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
