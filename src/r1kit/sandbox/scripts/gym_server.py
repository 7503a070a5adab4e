"""Scores answers with reasoning-gym's scorers inside the jail. Runs no model-written text itself.

    python -I -S -c SOURCE        (stdin: a header line, then one request line per answer; stdout: one line each)

Some scorers evaluate the answer as code (countdown and puzzle24 parse it with sympy's `parse_expr`, which calls
`eval`), so an answer could run Python. This process therefore never scores: it imports reasoning-gym once (from the
read-only folders the header names), then forks one child per answer. The child drops its standard streams and every
other descriptor but its result pipe, may not fork, start threads or grow its memory much, and runs the scorer with
`eval` allowed only on expressions of arithmetic, literals, numbers, symbols and elementary functions (no attribute,
subscript, lambda, comprehension, builtin, nor an operator that would do the problem for the answer, such as
`Integral`: `check_expression`) and `exec` only of sympy's own set-up; it writes its score and exits. This process
waits for it up to the time limit, kills every other process in the jail (as the jail's pid 1 with no signal
handlers, nothing inside can signal it, and it is not dumpable, so nothing can read its memory or descriptors),
empties the jail's /tmp and /dev/shm, and writes the verdict line. So an answer cannot run code, and even one that
found a way could not leave the jail or touch another answer's verdict.

Degenerate answers earn nothing (the reward must not pay what the scorer's rules let through):
- countdown and puzzle24 answers must be arithmetic (`arithmetic_numbers`: integers, + - * /, brackets) on exactly
  the row's numbers; their scorers accept any sympy expression of the right value, and puzzle24's any numbers;
- an answer with any positive score is scored once more against foils, other questions of the same generator
  whose gold differs and that the scorer tells apart from this one (neither's gold takes full marks on the other).
  An answer that is not specific to its question scores 0 (`{"degenerate": "constant"}`): one that scores on a foil
  at least what it scores on its own question (coin_flip's "0" on every probability below 1), or one that earns on
  a foil more than its own question's gold earns there (it carries another question's answer: "off on undetermined"
  is paid by acre's containment credit on every row). A question from which the scorer tells no foil apart cannot
  be judged. Which foils a question is told apart from is kept for its next answers (`Scorer.foil_check`);
- strict (the header's `strict`, the reward's default): an answer to a question that lists its premises
  (propositional_logic) is copied, and scores 0 (`{"degenerate": "copied"}`), when one premise alone gives it or
  when it only restates several premises together; a question whose premises contradict each other pays every
  answer and cannot be judged (`Scorer.premise_check`).

Header: {"paths": [...], "timeout": seconds, "strict": bool, "seed": the foils' seed (0)}. Request: {"generator", "options", "entry", "answer"}, tuples, sets
and non-string-keyed dicts tagged as r1kit's records tag them (`decode_value`). Reply lines: {"ready": true}, then
per request in order {"score": x} | {"score": 0.0, "degenerate": "constant" | "copied"} | {"error": "time" | "crash" |
<exception name>} | {"unjudgeable": <why>}.
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


ELEMENTARY = (  # the sympy names an evaluated answer may use: numbers, symbols, elementary functions
    "Integer", "Float", "Rational", "Symbol", "sqrt", "cbrt", "root", "exp", "log", "Abs", "sin", "cos", "tan", "cot",
    "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc", "sinh", "cosh", "tanh", "coth", "sech", "csch",
    "asinh", "acosh", "atanh", "acoth",
)


def allowed_value(value) -> bool:
    """A value an answer may name: a sympy atom (a number, a symbol, a constant such as `pi`) or one of `ELEMENTARY`.
    Never a builtin or a module, and never an operator that does the problem itself: `Integral(f, x) + C` echoes an
    integration question and differentiates back to it, `expand(...)` multiplies out a product."""
    try:
        import sympy
    except ImportError:
        return False
    if isinstance(value, sympy.Atom):
        return True
    return any(value is getattr(sympy, name, None) for name in ELEMENTARY)


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


ARITHMETIC_GENERATORS = {"countdown", "puzzle24"}
MAX_NESTING = 32  # brackets inside brackets an arithmetic answer may have


def arithmetic_numbers(answer: str) -> list | None:
    """The integers of `answer`, in order, when it is arithmetic: integers (no leading zero, no decimal point), a minus
    sign only before the first operand of an expression or a bracket (countdown's golds begin `-1 + ...`), `+ - * /`
    between operands, brackets nested at most `MAX_NESTING` deep, spaces; else None. A parser of
    that grammar: `**`, `//`, `2.5`, names and calls are simply not in it."""
    tokens, i = [], 0
    while i < len(answer):
        char = answer[i]
        if char.isspace():
            i += 1
        elif char in "0123456789":
            end = i
            while end < len(answer) and answer[end] in "0123456789":
                end += 1
            if answer[i] == "0" and end - i > 1:
                return None
            tokens.append(int(answer[i:end]))
            i = end
        elif char in "+-*/()":
            tokens.append(char)
            i += 1
        else:
            return None
    numbers = []
    end = _expression(tokens, 0, 0, numbers)
    return numbers if end == len(tokens) else None


def _expression(tokens: list, at: int, depth: int, numbers: list) -> int:
    """Parses `operand (op operand)*` from `tokens[at]`; the index after it, or -1 where the grammar fails."""
    at = _operand(tokens, at, depth, numbers, first=True)
    while at >= 0 and at < len(tokens) and tokens[at] in ("+", "-", "*", "/"):
        at = _operand(tokens, at + 1, depth, numbers)
    return at


def _operand(tokens: list, at: int, depth: int, numbers: list, first: bool = False) -> int:
    if at < 0 or at >= len(tokens):
        return -1
    token = tokens[at]
    if token == "-" and first and at + 1 < len(tokens) and tokens[at + 1] != "-":
        return _operand(tokens, at + 1, depth, numbers)  # a leading minus (`-1 + 72*(89 - 77)`: countdown's own golds)
    if isinstance(token, int):
        numbers.append(token)
        return at + 1
    if token != "(" or depth >= MAX_NESTING:
        return -1
    at = _expression(tokens, at + 1, depth + 1, numbers)
    return at + 1 if 0 <= at < len(tokens) and tokens[at] == ")" else -1


def filtered_answer(generator: str, answer: str, entry) -> str:
    """The answer as the scorer may see it: for countdown and puzzle24 an arithmetic answer on exactly the row's
    numbers, else empty (their "no answer" score); other generators' answers as they are."""
    if generator not in ARITHMETIC_GENERATORS:
        return answer
    numbers = arithmetic_numbers(answer)
    wanted = entry.get("metadata", {}).get("numbers") if isinstance(entry, dict) else None
    if numbers is None or not isinstance(wanted, list) or not all(type(n) is int for n in wanted):
        return ""
    return answer if sorted(numbers) == sorted(wanted) else ""


TYPE_TAG = "__r1kit_type__"
DECODERS = {"tuple": tuple, "set": set, "frozenset": frozenset, "dict": lambda pairs: {k: v for k, v in pairs}}


def decode_value(value):
    """`json.loads`'s object_hook: r1kit's tagged objects back to tuples, sets and dicts (r1kit.sources.gym_data's
    `encode_value` writes them; the scorers compare them, arc_agi's grids are tuples)."""
    if isinstance(value, dict) and value.get(TYPE_TAG) in DECODERS and set(value) == {TYPE_TAG, "items"}:
        if isinstance(value["items"], list):
            try:
                return DECODERS[value[TYPE_TAG]](value["items"])
            except (TypeError, ValueError):
                return value
    return value


FULL_MARKS = 1.0 - 1e-9
MAX_PREMISES = 12  # premises a strict premise check reads (propositional_logic gives 2 to 4)
FOILS = 3  # foils (the generator's questions, gold differing) an answer with a positive score is checked against
FOIL_POOL = 8  # questions of the generator drawn at most to find them (a True/False generator repeats its golds)
GOLD_DIGITS = 6  # a gold's score on a foil, as the child reports it


class Scorer:
    """One generator with its options: its `score_answer`, and a pool of foils generated as rows need them."""

    def __init__(self, generator: str, dataset):
        self.generator, self.dataset = generator, dataset
        self.pool: list = []  # the generator's own questions (reasoning-gym's data, not a row's), in dataset order
        # question -> [(pool index, the question's gold's score on that foil)] of the foils told apart, or "blind"
        self.told_apart: dict = {}

    def score(self, answer: str, entry) -> float:
        return float(self.dataset.score_answer(filtered_answer(self.generator, answer, entry), entry))

    def grow_pool(self, gold) -> None:
        """Draws foils (here, before any child) until the pool holds FOILS whose gold differs from `gold`, or
        FOIL_POOL in all: a generator whose golds all differ costs FOILS questions, True/False ones a few more."""
        size = min(FOIL_POOL, len(self.dataset)) if gold is not None else 0  # no gold: nothing to compare
        while len(self.pool) < size and sum(other_gold(f, gold) for f in self.pool) < FOILS:
            self.pool.append(self.dataset[len(self.pool)])

    def foil_check(self, answer: str, score: float, entry, told_apart) -> tuple:
        """For an answer scoring `score` > 0 on `entry`: ("constant", ...) when it is not specific to `entry`, else
        ("ok", ...); ("blind", ...) when there are foils but the scorer tells none apart (game_of_life_halting pays
        any non-empty answer). The second item is the foils told apart (`told_apart`, when already known).

        The rule, on each foil told apart (its gold differs, and neither gold takes full marks on the other):
        1. the answer scores there at least `score`: it fits another question as well as its own (one answer for
           several questions: coin_flip's "0" on every probability below 1, "False True" on every True/False row);
        2. or it carries the foil's gold (as a whole word, not inside `entry`'s gold) and is paid for it there, more
           than `entry`'s own gold is: a hedge of several golds ("off on undetermined" on acre earns 0.63 on an
           "undetermined" row and 0.16 on an "off" foil, by containment credit len(gold)/len(answer)).
        What is left paid is an answer that does better on its own question than on any other and borrows no other
        question's answer: a grid with most cells right, a number close to the gold, the gold inside a sentence. A
        scorer's small credit for any well-formed answer (0.01, 0.05) is paid on every question alike, so rule 1
        takes it from a wrong answer too; a close guess that is exactly a foil's gold (closeness scorers) as well.
        Rule 2 asks for the foil's gold in the answer because similarity scorers pay a near miss a little more than
        the gold on some foil by chance (a sudoku grid with one cell changed)."""
        if told_apart is None:
            told_apart = self.foils_told_apart(entry)
        if told_apart == "blind":
            return "blind", []
        for index, gold_there in told_apart:
            foil = self.pool[index]
            there = self.score_or_zero(answer, foil)
            if there >= min(score, FULL_MARKS):
                return "constant", told_apart
            carried = has_word(answer, str(foil["answer"])) and not has_word(str(entry.get("answer")), str(foil["answer"]))
            if carried and there > gold_there + 10.0 ** -GOLD_DIGITS:
                return "constant", told_apart
        return "ok", told_apart

    def premise_check(self, answer: str, entry) -> str:
        """For an entry that lists its premises (`metadata.premises`, propositional_logic, whose scorer pays any
        valid conclusion): "copied" when one premise alone entails the answer (a premise, `(Q ∧ Q)`, `(Q ∨ P)` from
        `Q`) or the answer is equivalent to several premises together (their conjunction); "blind" when the premises
        contradict each other (they entail the answer's negation too: every answer is paid); else "ok". Entries of
        other generators, and answers the generator's own parser cannot read, are "ok" (the score decides)."""
        metadata = entry.get("metadata") if isinstance(entry, dict) else None
        premises = metadata.get("premises") if isinstance(metadata, dict) else None
        logic = self.logic()
        if logic is None or not isinstance(premises, list) or not 0 < len(premises) <= MAX_PREMISES:
            return "ok"
        parse, valid = logic
        try:
            given = [parse(p) for p in premises if isinstance(p, str)]
            claim, negation = parse(answer), parse(f"¬({answer})")
            if valid(given, negation):
                return "blind"
            if any(valid([p], claim) for p in given):
                return "copied"
            restated = [p for p in given if valid([claim], p)]
            return "copied" if len(restated) > 1 and valid(restated, claim) else "ok"
        except Exception:  # noqa: BLE001 - an answer the parser refuses: its score already says so
            return "ok"

    def logic(self):
        """(parse, entails) of a generator whose dataset checks conclusions by truth table, or None."""
        module = sys.modules.get(type(self.dataset).__module__)
        expression = getattr(module, "Expression", None)
        valid = getattr(self.dataset, "_is_valid_conclusion", None)
        if expression is None or valid is None or not hasattr(expression, "from_string"):
            return None
        return expression.from_string, valid

    def foils_told_apart(self, entry):
        """The first FOILS foils of the pool the scorer tells apart from `entry` both ways (neither's gold takes full
        marks on the other: a foil that pays every answer, propositional_logic's contradictory premises, tells
        nothing), each with `entry`'s gold's score on it; "blind" when there are foils with another question and
        another gold but none is told apart. Foils and questions without a gold (None) are not compared."""
        gold = entry.get("answer")
        told_apart, candidates = [], 0
        for index, foil in enumerate(self.pool):
            if not other_gold(foil, gold) or foil.get("question") == entry.get("question"):
                continue
            candidates += 1
            gold_there = self.score_or_zero(str(gold), foil)
            if gold_there < FULL_MARKS and self.score_or_zero(str(foil["answer"]), entry) < FULL_MARKS:
                told_apart.append((index, round(max(0.0, gold_there), GOLD_DIGITS)))
                if len(told_apart) == FOILS:
                    break
        return "blind" if candidates and not told_apart else told_apart

    def score_or_zero(self, answer: str, entry) -> float:
        """`answer`'s score on `entry`; 0 when the scorer raises (a foil that does not fit the answer's shape)."""
        try:
            score = self.score(answer, entry)
        except Exception:  # noqa: BLE001 - a foil that does not fit the answer's shape
            return 0.0
        return score if score == score else 0.0


def has_word(text: str, word: str) -> bool:
    """Whether `word` (non-empty) occurs in `text` with no letter or digit right before or after it."""
    start = text.find(word) if word.strip() else -1
    while start >= 0:
        end = start + len(word)
        if not (start and text[start - 1].isalnum()) and not (end < len(text) and text[end].isalnum()):
            return True
        start = text.find(word, start + 1)
    return False


def other_gold(foil, gold) -> bool:
    """Whether `foil` has a gold and it differs from `gold` (which is not None)."""
    return gold is not None and foil.get("answer") is not None and str(foil["answer"]) != str(gold)


def told_apart_line(told_apart) -> str:
    """The foils told apart as the child reports them: "index:gold score" pairs, comma-separated."""
    return ",".join(f"{index}:{gold_there:.{GOLD_DIGITS}f}" for index, gold_there in told_apart)


def parse_told_apart(text: str) -> list:
    """The child's report of the foils told apart, checked: at most FOILS pairs of a pool index and a score in [0, 1)."""
    found = []
    for item in text.split(",")[:FOILS]:
        index, _, gold_there = item.partition(":")
        try:
            pair = int(index), float(gold_there)
        except ValueError:
            continue
        if 0 <= pair[0] < FOIL_POOL and 0.0 <= pair[1] < 1.0:
            found.append(pair)
    return found


def score_in_child(scorer, answer, entry, told_apart, timeout, write_fd, strict=False) -> None:
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
        seconds = max(1, int(2 * timeout) + 1)  # the score, then the foil check (each within `timeout`)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        builtins.eval, builtins.exec = guarded_eval(builtins.eval), guarded_exec(builtins.exec)
        score = scorer.score(answer, entry)
        os.write(write_fd, (repr(score)[:RESULT_BYTES] + "\n").encode())
        if score > 0:
            outcome, foils = scorer.foil_check(answer, score, entry, told_apart)
            if outcome == "ok" and strict:
                outcome = scorer.premise_check(answer, entry)
            os.write(write_fd, f"{outcome} {told_apart_line(foils)}\n".encode())
    except BaseException as e:  # noqa: BLE001 - whatever the answer caused is its own verdict
        os.write(write_fd, ("!" + type(e).__name__)[:RESULT_BYTES].encode() + b"\n")
    finally:
        os._exit(0)


def read_line(read_fd, timeout, pending: bytearray) -> bytes | None:
    """The child's next result line (without its newline) within `timeout` seconds; None when it did not finish one
    in time or wrote too much; b"" when it closed the pipe first."""
    deadline = time.monotonic() + timeout
    while b"\n" not in pending:
        left = deadline - time.monotonic()
        if left <= 0 or len(pending) > RESULT_BYTES or not select.select([read_fd], [], [], left)[0]:
            return None
        chunk = os.read(read_fd, RESULT_BYTES + 2)
        if not chunk:
            return b""
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line


def child_verdict(read_fd, timeout) -> tuple:
    """(the verdict, the foils told apart from the question or None) from the child's lines: its score; for a
    positive score, the foil check's outcome, within another `timeout` (an answer that stalls the check earns
    nothing)."""
    pending = bytearray()
    result = verdict(read_line(read_fd, timeout, pending))
    if not result.get("score", 0.0) > 0:
        return result, None
    check = read_line(read_fd, timeout, pending)
    if check is None:
        return {"error": "time"}, None
    if check.startswith(b"!"):
        return verdict(check), None
    outcome, _, foils = check.decode("ascii", "replace").partition(" ")
    told_apart = parse_told_apart(foils)
    if outcome == "ok":
        return result, told_apart
    if outcome in ("constant", "copied"):
        return {"score": 0.0, "degenerate": outcome}, told_apart
    if outcome == "blind":
        return {"unjudgeable": "its scorer pays other questions' answers on it, so cannot tell them apart"}, "blind"
    return {"error": "crash"}, None


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


def warm_up(dataset) -> None:
    """Scores the generator's own first question (its answer and two non-answers) once here, before any child: the
    modules a scorer imports on first use (some build classes with `eval`) are then loaded without the children's
    guard. Never a row's data: this process runs no text it did not make."""
    try:
        entry = dataset[0]
        for answer in (str(entry.get("answer", "")), "0", "x"):
            dataset.score_answer(answer, entry)
    except Exception:  # noqa: BLE001 - only the imports matter here
        pass


def verdict(raw: bytes | None) -> dict:
    """A result line as a verdict: a score, or the error the answer caused."""
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
    timeout, strict, seed = float(header["timeout"]), bool(header.get("strict")), int(header.get("seed", 0))
    import reasoning_gym

    scorers = {}
    out.write('{"ready": true}\n')
    out.flush()
    for line in lines:
        request = json.loads(line, object_hook=decode_value)
        key = json.dumps([request["generator"], request["options"]], sort_keys=True)
        try:
            if key not in scorers:
                dataset = reasoning_gym.create_dataset(request["generator"], size=FOIL_POOL, seed=seed,
                                                       **request["options"])
                warm_up(dataset)
                scorers[key] = Scorer(request["generator"], dataset)
            scorers[key].grow_pool(request["entry"].get("answer"))
        except Exception as e:  # noqa: BLE001 - the data names a generator or options it cannot build
            out.write(json.dumps({"unjudgeable": f"{type(e).__name__}: {e}"[:300]}) + "\n")
            out.flush()
            continue
        question = request["entry"].get("question")
        question = question if isinstance(question, str) else None
        told_apart = scorers[key].told_apart.get(question)
        read_fd, write_fd = os.pipe()
        child = os.fork()
        if child == 0:
            if os.getppid() != 1:
                os.setpgid(0, 0)
            score_in_child(scorers[key], request["answer"], request["entry"], told_apart, timeout, write_fd, strict)
        os.close(write_fd)
        result, found = child_verdict(read_fd, timeout)
        if found is not None and question is not None:  # the next answers to this question skip that half
            scorers[key].told_apart[question] = found
        os.close(read_fd)
        clear_children(child)
        if os.getpid() == 1:  # in the jail: its tmpfs folders hold only what answers wrote
            wipe("/tmp", keep=("/tmp/work",))  # the working folder bwrap made (this process's cwd)
            wipe("/dev/shm")
        out.write(json.dumps(result) + "\n")
        out.flush()

if __name__ == "__main__":
    main()
