"""Scores answers with reasoning-gym's scorers inside the jail. Runs no model-written text itself.

    python -I -S -c SOURCE        (stdin: a header line, then one request line per answer; stdout: one line each)

Some scorers evaluate the answer as code (countdown and puzzle24 parse it with sympy's `parse_expr`, which calls
`eval`), so an answer could run Python. This process therefore never scores: it imports reasoning-gym once (from the
read-only folders the header names), then forks one child per answer. The child drops its standard streams and every
other descriptor but its result pipe, may not fork, start threads or grow its memory much, and runs the scorer with
`eval` allowed only on expressions of arithmetic, literals and sympy names (no attribute, subscript, lambda,
comprehension or builtin: `check_expression`) and `exec` only of sympy's own set-up; it writes its score and exits. This process waits
for it up to the time limit, kills every other process in the jail (as the jail's pid 1 with no signal handlers,
nothing inside can signal it, and it is not dumpable, so nothing can read its memory or descriptors), empties the
jail's /tmp and /dev/shm, and writes the verdict line. So an answer cannot run code, and even one that found a way
could not leave the jail or touch another answer's verdict.

Header: {"paths": [...], "timeout": seconds}. Request: {"generator", "options", "entry", "answer"}.
Reply lines: {"ready": true}, then per request in order {"score": x} | {"error": "time" | "crash" | <exception name>}
| {"unjudgeable": <why>}.
"""

import ast
import builtins
import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

MEMORY_HEADROOM = 512 << 20  # address space a child may add to what the imported scorer already maps
RESULT_BYTES = 64
EXPRESSION_NODES = (  # what an evaluated answer may contain: arithmetic, literals, calls of allowed names
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Constant, ast.Call, ast.keyword, ast.Name,
    ast.Load, ast.Tuple, ast.List,
)


def allowed_value(value) -> bool:
    """A name an answer may use: a sympy object or class (numbers, symbols, constants, `Integer`, `sin`, `Add`, ...)
    or one of sympy's root functions; never a builtin, module or anything with file, attribute or code access."""
    try:
        import sympy
    except ImportError:
        return False
    if isinstance(value, sympy.Basic) or isinstance(value, type) and issubclass(value, sympy.Basic):
        return True
    return value in (sympy.sqrt, sympy.cbrt, sympy.root)


def lookup(name: str, namespaces: list):
    """The value `name` would take in an eval with these namespaces (locals, globals, builtins); a sentinel when none
    has it (the eval then raises NameError, which is harmless)."""
    for namespace in namespaces:
        if isinstance(namespace, dict) and name in namespace:
            return namespace[name]
    return lookup


def check_expression(source, namespaces: list) -> None:
    """Raises ValueError unless `source` is an expression of allowed nodes whose names are allowed values: no
    attribute, subscript, lambda, comprehension, walrus or f-string, so no way from the answer to Python's internals."""
    if not isinstance(source, (str, bytes)):
        raise ValueError("refused: a compiled code object evaluated while scoring an answer")
    tree = ast.parse(source, "<answer>", "eval")
    for node in ast.walk(tree):
        if not isinstance(node, EXPRESSION_NODES):
            raise ValueError(f"refused in an evaluated answer: {type(node).__name__}")
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            raise ValueError("refused in an evaluated answer: a call of something other than a name")
        if isinstance(node, ast.Name):
            value = lookup(node.id, namespaces)
            if value is not lookup and not allowed_value(value):
                raise ValueError(f"refused name in an evaluated answer: {node.id[:40]}")


def guarded_eval(real):
    """`eval` that checks its expression first (`check_expression`) against the namespaces it will run in (the
    caller's, when none are given)."""

    def guarded(source, globals=None, locals=None):  # noqa: A002 - eval's own parameter names
        if globals is None:
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        inherited = globals.get("__builtins__", builtins)
        check_expression(source, [locals, globals, inherited if isinstance(inherited, dict) else vars(inherited)])
        return real(source, globals, locals)

    return guarded


TRUSTED_EXEC = {"from sympy import *"}  # parse_expr's own namespace set-up


def guarded_exec(real):
    """`exec` of nothing but sympy's own set-up statements (an answer never needs statements)."""

    def guarded(source, *args, **kwargs):
        if not (isinstance(source, str) and source.strip() in TRUSTED_EXEC):
            raise ValueError("refused: exec while scoring an answer")
        return real(source, *args, **kwargs)

    return guarded


def score_in_child(scorer, answer, entry, timeout, write_fd) -> None:
    """The forked child: isolate, limit, score, report, exit (never returns)."""
    try:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, 4096)
        used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (used + MEMORY_HEADROOM, used + MEMORY_HEADROOM))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        seconds = max(1, int(timeout) + 1)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        builtins.eval, builtins.exec = guarded_eval(builtins.eval), guarded_exec(builtins.exec)
        score = float(scorer.score_answer(answer, entry))
        os.write(write_fd, repr(score).encode()[:RESULT_BYTES])
    except BaseException as e:  # noqa: BLE001 - whatever the answer caused is its own verdict
        os.write(write_fd, ("!" + type(e).__name__).encode()[:RESULT_BYTES])
    finally:
        os._exit(0)


def wait_result(read_fd, timeout) -> bytes | None:
    """The child's result, or None when it did not finish writing within `timeout` seconds."""
    deadline, data = time.monotonic() + timeout, b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read_fd], [], [], left)[0]:
            return None
        chunk = os.read(read_fd, RESULT_BYTES + 1)
        if not chunk:
            return data
        data += chunk
        if len(data) > RESULT_BYTES:
            return data[:RESULT_BYTES]


def clear_children(child: int) -> None:
    """Kills whatever the answer left running, then reaps. As the jail's pid 1, kill(-1) reaches every other process
    in the jail; outside a jail (the explicit no-jail opt-in) only the child's own process group is killed."""
    if os.getpid() != 1:
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(child, 0)
        return
    os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def warm_up(scorer, entry) -> None:
    """Scores the gold and a non-answer once here, before any child: the modules a scorer imports on first use (some
    build classes with `eval`) are then loaded without the children's guard."""
    for answer in (str(entry.get("answer", "")), "0", "x"):
        try:
            scorer.score_answer(answer, entry)
        except Exception:  # noqa: BLE001 - only the imports matter here
            pass


def verdict(raw: bytes | None) -> dict:
    if raw is None:
        return {"error": "time"}
    text = raw.decode("ascii", "replace")
    if text.startswith("!"):
        name = text[1:]
        return {"error": name if name.isidentifier() else "crash"}
    try:
        score = float(text)
    except ValueError:
        return {"error": "crash"}
    return {"score": score if score == score else 0.0}


def drop_signal_handlers() -> None:
    """Default dispositions for every signal: the kernel then drops whatever another process of the jail sends to
    its init (this process, as pid 1). Python's own SIGINT handler would otherwise let an answer stop it."""
    for number in signal.valid_signals():
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):  # SIGKILL, SIGSTOP
            pass


def wipe(folder: str, keep: tuple = ()) -> None:
    """Removes what answers left in a writable folder of the jail (the next answer starts from an empty one); the
    folders named in `keep` stay, emptied."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                wipe(entry.path)
                if entry.path not in keep:
                    os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def main() -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no other process of the jail may read this one's memory or fds
    if os.getpid() == 1:
        drop_signal_handlers()
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    out = os.fdopen(os.dup(1), "w")
    lines = sys.stdin.buffer
    header = json.loads(lines.readline())
    sys.path[:0] = header["paths"]
    timeout = float(header["timeout"])
    import reasoning_gym

    scorers = {}
    out.write('{"ready": true}\n')
    out.flush()
    for line in lines:
        request = json.loads(line)
        key = json.dumps([request["generator"], request["options"]], sort_keys=True)
        try:
            if key not in scorers:
                scorers[key] = reasoning_gym.create_dataset(request["generator"], size=1, seed=0, **request["options"])
                warm_up(scorers[key], request["entry"])
        except Exception as e:  # noqa: BLE001 - the data names a generator or options it cannot build
            out.write(json.dumps({"unjudgeable": f"{type(e).__name__}: {e}"[:300]}) + "\n")
            out.flush()
            continue
        read_fd, write_fd = os.pipe()
        child = os.fork()
        if child == 0:
            if os.getppid() != 1:
                os.setpgid(0, 0)
            score_in_child(scorers[key], request["answer"], request["entry"], timeout, write_fd)
        os.close(write_fd)
        raw = wait_result(read_fd, timeout)
        os.close(read_fd)
        clear_children(child)
        if os.getpid() == 1:  # in the jail: its tmpfs folders hold only what answers wrote
            wipe("/tmp", keep=("/tmp/work",))  # the working folder bwrap made (this process's cwd)
            wipe("/dev/shm")
        out.write(json.dumps(verdict(raw)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
