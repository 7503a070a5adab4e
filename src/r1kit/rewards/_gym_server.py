"""Scores answers with reasoning-gym's scorers inside the jail. Runs no model-written text itself.

    python -I -S -c SOURCE        (stdin: a header line, then one request line per answer; stdout: one line each)

Some scorers evaluate the answer as code (countdown and puzzle24 parse it with sympy's `parse_expr`, which calls
`eval`), so an answer can run Python. This process therefore never scores: it imports reasoning-gym once (from the
read-only folders the header names), then forks one child per answer. The child drops its standard streams and every
other descriptor but its result pipe, may not fork or grow its memory much, runs the scorer with `eval`/`exec`
guarded (no names starting with `_`, no builtins that reach files, attributes or code), writes its score and exits.
This process waits for it up to the time limit, then kills every other process in the jail (it is the jail's pid 1,
which nothing inside can signal or read: it is not dumpable) and writes the verdict line. So an answer can at worst
choose its own score, inside a jail with no host files, network or privileges, and never another answer's.

Header: {"paths": [...], "timeout": seconds}. Request: {"generator", "options", "entry", "answer"}.
Reply lines: {"ready": true}, then per request in order {"score": x} | {"error": "time" | "crash" | <exception name>}
| {"unjudgeable": <why>}.
"""

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
FORBIDDEN_NAMES = {
    "open", "exec", "eval", "compile", "getattr", "setattr", "delattr", "globals", "locals", "vars", "dir", "input",
    "breakpoint", "exit", "quit", "help", "memoryview", "type", "object", "super", "classmethod", "staticmethod",
    "property", "lambdify", "preview", "plot", "init_session", "init_printing", "var", "sympify", "parse_expr",
    "format", "format_map", "mro", "subclasses", "func_globals", "gi_frame", "f_globals", "f_back", "tb_frame",
}


def code_names(code) -> set:
    """Every global, attribute and variable name a code object (and the code objects nested in it) refers to, and
    its string constants (a format string can reach attributes too)."""
    names = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= code_names(const)
        elif isinstance(const, str):
            names.add(const)
    return names


def refused(name: str) -> bool:
    return "__" in name or name in FORBIDDEN_NAMES


def guard(real, mode: str):
    """`eval`/`exec` that refuse code naming dunders (`__import__`, `__class__`, ...) or builtins that reach files,
    attributes, code or formatting; sympy's arithmetic (`Integer (6 )*Symbol ('x')`) passes."""

    def guarded(source, *args, **kwargs):
        code = source if hasattr(source, "co_names") else compile(source, "<answer>", mode)
        bad = sorted(n for n in code_names(code) if refused(n))
        if bad:
            raise ValueError(f"refused names in an evaluated answer: {bad[:3]}")
        return real(code, *args, **kwargs)

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
        builtins.eval, builtins.exec = guard(builtins.eval, "eval"), guard(builtins.exec, "exec")
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
        return {"error": text[1:] or "crash"}
    try:
        score = float(text)
    except ValueError:
        return {"error": "crash"}
    return {"score": score if score == score else 0.0}


def main() -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no other process of the jail may read this one's memory or fds
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
        out.write(json.dumps(verdict(raw)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
