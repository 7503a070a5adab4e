"""The independent judges: per reward family, a verdict (correct, wrong, or None: cannot judge) reached by a path
that is not the reward's scorer, for the second opinion (`r1kit.integrity.second_opinion`) and the wires that compare the two.

    math            `r1kit.judging.mathjudge`: a parser and evaluator of its own (no math-verify, no sympy) over fractions,
                    radicals, intervals, sets, percentages and units, numeric where exact comparison fails; an answer
                    that restates the question's numbers or hedges several values is wrong
    reasoning_gym   isomorphic re-verification: the answer (read by `r1kit.judging.answers`, not the reward's reader) must
                    take full marks on its question, not be copied from it (`r1kit.judging.copies`), take nothing like full
                    marks on twins of its question (fresh questions of the same generator from another seed than the
                    reward's foils: other numbers, names, premises), and, where the question lists premises, not follow
                    from the question stripped to one premise (`gym_server.Scorer.premise_check`)
    code            a fresh jail with the row's tests in reverse order; where the row gives no tests, tests generated
                    from the examples its prompt shows (`example_tests`)

A row a judge cannot read is None: counted as unchecked by the second opinion (the `unchecked` wire reads the share),
never a disagreement.
"""

from __future__ import annotations

import re
from typing import Any

from r1kit.judging import mathjudge
from r1kit.judging.answers import all_boxed, final_answer, last_answer
from r1kit.judging.copies import is_copy
from r1kit.rewards.code import extract_code, known_language, test_cases_program
from r1kit.rewards.gym import parse_record, score_completions
from r1kit.sandbox import SANDBOX_ERROR, Program, get_provider

Verdict = bool | None
CORRECT_SHARE = 0.999  # full marks is "correct"
MAX_ANSWER_CHARS = 20_000
TWIN_SEED = 1  # the twins' seed: the reward's foils come from seed 0
MAX_EXAMPLES = 8  # examples read from a prompt
MAX_EXAMPLE_CHARS = 10_000


# --------------------------------------------------------------------------------------------------------------------
# Math
# --------------------------------------------------------------------------------------------------------------------
def math_answer(completion: str) -> str | None:
    """Where a math reward reads the answer: the last non-empty `\\boxed{}`, else the last `<answer>` block; None
    without either."""
    text = str(completion)[-MAX_ANSWER_CHARS:]
    boxed = [b for b in all_boxed(text, limit=4) if b.strip()]
    return boxed[0] if boxed else last_answer(text)


def math_verdict(completion: str, gold: Any, question: str | None = None) -> Verdict:
    """Whether `completion` answers `gold`, by `r1kit.judging.mathjudge`; None when the gold or the answer is outside its
    grammar. No answer where the rewards look is wrong."""
    if gold is None:
        return None
    return mathjudge.judge(math_answer(completion), str(gold), question)


# --------------------------------------------------------------------------------------------------------------------
# reasoning-gym: isomorphic re-verification
# --------------------------------------------------------------------------------------------------------------------
def gym_verdicts(texts: list[str], records: list[Any], timeout: float, allow_unsandboxed: bool) -> list[Verdict]:
    """Each answer re-verified: read by `r1kit.judging.answers.final_answer`, wrong when copied from its question, else
    scored strictly in a scorer process of its own whose twins come from `TWIN_SEED`; full marks is correct. A row
    without a readable record, or a scorer that did not start, is None."""
    verdicts: list[Verdict] = [None] * len(texts)
    wrapped, places, rows = [], [], []
    for i, (text, record) in enumerate(zip(texts, records)):
        parsed = parse_record(record)
        if parsed is None:
            continue
        entry = parsed["entry"]
        answer = final_answer(text, None if entry.get("answer") is None else str(entry["answer"]))
        if not answer:
            verdicts[i] = False
            continue
        if is_copy(answer, str(entry.get("question", "")), entry.get("answer")):
            verdicts[i] = False
            continue
        wrapped.append(f"<answer>{answer}</answer>")
        places.append(i)
        rows.append(record)
    if wrapped:
        scores = score_completions(wrapped, rows, timeout, "last_number", allow_unsandboxed, strict=True,
                                   foil_seed=TWIN_SEED)
        for i, score in zip(places, scores):
            verdicts[i] = None if score is None else score >= CORRECT_SHARE
    return verdicts


# --------------------------------------------------------------------------------------------------------------------
# Code: a fresh jail, tests reversed; tests from the prompt's examples where the row gives none
# --------------------------------------------------------------------------------------------------------------------
_EXAMPLE = re.compile(
    r"(?:sample[ \t]+|example[ \t]+)?input(?:[ \t]*#?[ \t]*\d+)?[ \t]*:?[ \t]*\n(.*?)\n[ \t]*"
    r"(?:sample[ \t]+|example[ \t]+)?output(?:[ \t]*#?[ \t]*\d+)?[ \t]*:?[ \t]*\n(.*?)"
    r"(?=\n\s*(?:sample[ \t]+|example[ \t]+)?(?:input|note|explanation)\b|\Z)",
    re.IGNORECASE | re.DOTALL)


def _unfenced(block: str) -> str:
    block = block.strip()
    fenced = re.fullmatch(r"```[^\n]*\n(.*?)\n?```", block, re.DOTALL)
    return (fenced[1] if fenced else block).strip("\n")


def example_tests(prompt: str) -> list[tuple[str, str]]:
    """(input, output) pairs of the examples a problem statement shows (`Input` / `Output` headers, Codeforces' and
    AtCoder's `Sample Input` / `Sample Output`, fenced or not); at most `MAX_EXAMPLES`."""
    found = []
    for match in _EXAMPLE.finditer(str(prompt)[-200_000:]):
        given, wanted = _unfenced(match[1]), _unfenced(match[2])
        if given.strip() and wanted.strip() and max(len(given), len(wanted)) <= MAX_EXAMPLE_CHARS:
            found.append((given + "\n", wanted))
        if len(found) == MAX_EXAMPLES:
            break
    return found


def judged_program(text: str, row: Any, prompt: str, language: str) -> Program | None:
    """The program the judge runs: the row's tests in reverse order, else tests from the prompt's examples; None
    when there are neither (or the row cannot be read)."""
    try:
        program = test_cases_program(row, text, language)
    except Exception:  # noqa: BLE001 - a row without (readable) tests: the prompt's examples, if it shows any
        examples = example_tests(prompt)
        if not examples:
            return None
        try:
            language = known_language(row.get("language") if isinstance(row, dict) else None, language)
        except Exception:  # noqa: BLE001 - an unknown language: the recipe's
            pass
        return Program(code=extract_code(text, language), language=language, inputs=[i for i, _ in examples],
                       expected=[o for _, o in examples], time_limit=5.0, memory_mb=512)
    return Program(code=program.code, language=program.language, inputs=program.inputs[::-1],
                   expected=program.expected[::-1], time_limit=program.time_limit, memory_mb=program.memory_mb)


def code_verdicts(texts: list[str], rows: list[Any], language: str, allow_unsandboxed: bool,
                  prompts: list[str] | None = None) -> list[Verdict]:
    """Each answer's program run in a fresh jail of the local provider (`judged_program`); True when every test
    passes. A row with no tests and no examples, or a jail that did not start: None."""
    prompts = prompts or [""] * len(texts)
    verdicts: list[Verdict] = [None] * len(texts)
    programs, places = [], []
    for i, (text, row, prompt) in enumerate(zip(texts, rows, prompts)):
        program = judged_program(text, row, prompt, language)
        if program is None:
            continue
        if not program.code.strip():
            verdicts[i] = False
            continue
        programs.append(program)
        places.append(i)
    if not programs:
        return verdicts
    provider = get_provider("local", num_parallel=1, isolate=not allow_unsandboxed)
    for i, tests in zip(places, provider.execute(programs)):
        if not any(t.status == SANDBOX_ERROR for t in tests):
            verdicts[i] = bool(tests) and all(t.passed for t in tests)
    return verdicts
