"""The math verifier pool: hard per-sample limits from any thread and any script, and a fallback when workers cannot
start that gives the same verdicts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r1kit.rewards.verify import (
    CORRECT,
    TIMEOUT,
    UNPARSEABLE_GOLD,
    WRONG,
    PoolUnavailable,
    VerifierPool,
    judge,
    judge_batch,
)

PATHOLOGICAL = r"\boxed{\binom{10^{9}}{10^{5}}}"  # sympy computes it exactly: minutes


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(workers=2, timeout=1.5)
    p.warm_up()
    yield p
    p.close()


@pytest.mark.slow
def test_outcomes_in_order(pool):
    pairs = [("7", r"\boxed{7}"), ("7", r"\boxed{8}"), ("junk", r"\boxed{7}"), ("1/2", r"\boxed{0.5}")] * 5
    assert pool.map(pairs) == [CORRECT, WRONG, UNPARSEABLE_GOLD, CORRECT] * 5


@pytest.mark.slow
def test_pathological_answer_times_out_within_the_limit_and_others_still_score(pool):
    pairs = [("5", PATHOLOGICAL), ("7", r"\boxed{7}"), ("5", "\\boxed{" + "1+" * 25_000 + "1}"), ("3", r"\boxed{3}")]
    outcomes = pool.map(pairs)
    assert outcomes[1] == CORRECT and outcomes[3] == CORRECT
    # TIMEOUT: killed at its limit (left alone, the pathological answer takes minutes); the outcome says so, not a
    # stopwatch, which a loaded machine would fool
    assert outcomes[0] == TIMEOUT and outcomes[2] in (TIMEOUT, WRONG)
    assert pool.map([("2", r"\boxed{2}")]) == [CORRECT]  # the killed worker was replaced


@pytest.mark.slow
def test_time_limit_holds_off_the_main_thread(pool):
    pool.map([("1", r"\boxed{1}")] * 4)  # replacement workers have finished their imports
    result = {}

    def run():
        result["outcome"] = pool.map([("5", PATHOLOGICAL)])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=600)  # a hang guard only: the outcome below is the check
    assert not thread.is_alive(), "verification hung in a worker thread"
    assert result["outcome"] == [TIMEOUT]  # killed at its limit from a worker thread (signals need the main one)


@pytest.mark.slow
def test_time_limit_is_per_call(pool):
    """Callers sharing the pool (rewards, held-out evaluation) each get their own limit; none changes another's."""
    assert pool.map([("5", PATHOLOGICAL)], timeout=0.5) == [TIMEOUT]
    assert pool.timeout == 1.5
    assert pool.map([("7", r"\boxed{7}")] * 4, timeout=60) == [CORRECT] * 4


@pytest.mark.slow
def test_power_towers_are_wrong_at_once_unless_the_gold_is_one():
    patient = VerifierPool(workers=1, timeout=120.0)  # a tower reaching sympy would show as a timeout or a hang
    try:
        assert patient.map([("5", r"\boxed{9^{9^{9^{9^{9}}}}}"), ("16", r"\boxed{2^{2^{2}}}")]) == [WRONG, CORRECT]
        assert patient.timeouts == 0
    finally:
        patient.close()


def test_missing_gold_is_unjudgeable_without_a_worker_round_trip():
    assert judge_batch([None, ""], ["x", "y"]) == [UNPARSEABLE_GOLD, UNPARSEABLE_GOLD]


def test_pool_that_cannot_start_falls_back_in_process(monkeypatch, caplog):
    import r1kit.rewards.text as text
    import r1kit.rewards.verify as verify

    monkeypatch.setattr(text, "_LOGGED", set())  # warnings logged once: not yet
    broken = VerifierPool(workers=1, timeout=1.0)
    broken.unavailable = "workers cannot start here"
    with pytest.raises(PoolUnavailable):
        broken.map([("1", "1")])
    monkeypatch.setattr(verify, "_POOL", broken)
    assert judge_batch(["7", "7"], [r"\boxed{7}", r"\boxed{6}"]) == [CORRECT, WRONG]
    assert "in-process" in caplog.text


def test_exceptions_turned_into_wrong_are_logged_once_with_their_type(monkeypatch, caplog):
    import r1kit.rewards.text as text
    import r1kit.rewards.verify as verify

    broken = VerifierPool(workers=1)
    broken.unavailable = "workers cannot start here"
    monkeypatch.setattr(verify, "_POOL", broken)
    monkeypatch.setattr(text, "_LOGGED", set())
    real_judge = verify.judge

    def buggy(gold, answer, limit=None):
        if "bug" in answer:
            raise TypeError("a bug of ours")
        return real_judge(gold, answer, limit)

    monkeypatch.setattr(verify, "judge", buggy)
    assert judge_batch(["1", "1", "1"], ["bug", r"\boxed{1}", "bug again"]) == [WRONG, CORRECT, WRONG]
    reports = [r.getMessage() for r in caplog.records if "counts as wrong" in r.getMessage()]
    assert len(reports) == 1 and "TypeError: a bug of ours" in reports[0]


# A user's quick script: no `if __name__ == "__main__":` guard, the reward called on the main thread and from a thread.
UNGUARDED_SCRIPT = """
import logging, threading
logging.basicConfig(level=logging.WARNING)
print("top level ran")
import r1kit.rewards.verify
{setup}
from r1kit.rewards.math import make_accuracy_reward

accuracy = make_accuracy_reward()
completions, golds = [r"\\boxed{{7}}", r"\\boxed{{8}}", "<answer>12</answer>"], ["7", "7", "12"]
print("main thread:", accuracy(completions, solution=golds))
out = {{}}
thread = threading.Thread(target=lambda: out.update(scores=accuracy(completions, solution=golds)))
thread.start()
thread.join()
print("other thread:", out.get("scores"))
"""


def run_unguarded_script(tmp_path, setup: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "quick.py"
    script.write_text(textwrap.dedent(UNGUARDED_SCRIPT.format(setup=setup)))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_unguarded_script_verifies_in_workers_from_any_thread(tmp_path):
    result = run_unguarded_script(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("top level ran") == 1  # workers never re-run the script
    assert "main thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "other thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "freeze_support" not in result.stderr and "in-process" not in result.stderr


@pytest.mark.slow
def test_in_process_fallback_gives_the_same_verdicts_off_the_main_thread(tmp_path):
    # No worker can start (as with an embedded interpreter): verification falls back to this process.
    result = run_unguarded_script(tmp_path, setup="r1kit.rewards.verify.sys.executable = '/nonexistent/python'")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("top level ran") == 1
    assert "main thread: [1.0, 0.0, 1.0]" in result.stdout
    assert "other thread: [1.0, 0.0, 1.0]" in result.stdout
    assert result.stderr.count("verifying math answers in-process") == 1
    assert result.stderr.count("no hard time limit applies") == 1


@pytest.mark.parametrize("number", ["5", "12", "5.5", "0.5", "150"])
@pytest.mark.parametrize("written", [r"\boxed{{{n}\%}}", r"\boxed{{{n} \%}}", r"\boxed{{{n}\text{{ percent}}}}",
                                     r"The answer is $\boxed{{{n}\%}}$."])
def test_a_percentage_has_one_reading_its_number(number, written):
    """`5\\%` once matched both 5 and 0.05: one completion must match at most one of two different golds."""
    from decimal import Decimal

    from r1kit.rewards.verify import judge

    answer = written.format(n=number)
    hundredth = str(Decimal(number) / 100)
    assert judge(number, answer) == CORRECT and judge(number + r"\%", answer) == CORRECT
    assert judge(hundredth, answer) == WRONG
    assert judge(number + r"\%", rf"\boxed{{{hundredth}}}") == WRONG  # the same rule reads the gold


@pytest.mark.parametrize("separator", [r"\,", r"\;", r"\:", r"\!", "\\ ", "~", "\u2009", "\u202f", r"\thinspace "])
def test_thousands_groups_are_one_number_in_the_gold_and_the_answer(separator):
    """`1\\,000` was read as 1 x 000 = 0, so gold `1\\,000` marked 1000 wrong and 0 right."""
    from r1kit.rewards.verify import judge

    grouped = f"1{separator}000"
    assert judge(f"${grouped}$", r"\boxed{1000}") == CORRECT
    assert judge(f"${grouped}$", r"\boxed{0}") == WRONG
    assert judge("1000", rf"\boxed{{{grouped}}}") == CORRECT
    assert judge("0", rf"\boxed{{{grouped}}}") == WRONG
    assert judge("1000000", rf"\boxed{{1{separator}000{separator}000}}") == CORRECT


@pytest.mark.parametrize("written", [r"\boxed{3\,5}", r"\boxed{12\,34}", r"\boxed{1\;0000}", "<answer>3~5</answer>"])
def test_digits_kept_apart_by_a_thin_space_have_no_safe_reading_and_are_wrong(written):
    from r1kit.rewards.verify import judge

    digits = "".join(ch for ch in written.split("{")[-1].split("<")[0] if ch.isdigit()) or "35"
    for gold in (digits, "8", "15", "3"):
        assert judge(gold, written) == WRONG, (gold, written)
    assert judge("1000", r"The sum 3\,5 is not it. \boxed{1000}") == CORRECT  # only the answer itself is read


# --------------------------------------------------------------------------------------------------------------------
# Units and relations (issue 44): math-verify drops a unit and reads `42=41` as 41
# --------------------------------------------------------------------------------------------------------------------
SPELLINGS = {  # each unit as a gold writes it, then as answers spell it
    "cm": [r"\text{ cm}", r"\mathrm{cm}", " cm", r"\,\text{cm}", r"\text{ centimeters}"],
    "m": [r"\text{ m}", r"\mathrm{m}", r"\text{ meters}", " m"],
    "kg": [r"\text{ kg}", " kg", r"\text{ kilograms}"],
    "g": [r"\text{ g}", r"\text{ grams}"],
    "cm^2": [r"\text{ cm}^2", r"\text{ cm}^{2}", r"\mathrm{cm^2}"],
    "s": [r"\text{ s}", r"\text{ seconds}", " sec"],
    "m/s": [r"\text{ m/s}", r"\text{ m}/\text{s}"],
    "deg": [r"^\circ", r"^{\circ}", r"\text{ degrees}"],  # math-verify cannot read `12°` nor `\boxed{12 dollars}`
    "%": [r"\%", r"\text{ percent}"],
    "$": [r"\text{ dollars}", r"\text{ dollar}"],
    "apples": [r"\text{ apples}", r"\text{ apple}"],
}


def boxed_forms(number: str, unit: str) -> list[str]:
    """Where an answer may carry its unit: inside the box, right after it, in an <answer> block."""
    return [rf"\boxed{{{number}{unit}}}", rf"\boxed{{{number}}}{unit}", f"<answer>{number}{unit}</answer>"]


@pytest.mark.parametrize("number", ["5", "12.5", r"\frac{3}{2}"])
@pytest.mark.parametrize(("gold_unit", "answer_unit"), [(a, b) for a in SPELLINGS for b in SPELLINGS if a != b])
def test_a_unit_other_than_the_golds_is_wrong(number, gold_unit, answer_unit):
    from r1kit.rewards.verify import judge

    gold = number + SPELLINGS[gold_unit][0]
    for answer in [rf"\boxed{{{number}{SPELLINGS[answer_unit][0]}}}", rf"\boxed{{x = {number}{SPELLINGS[answer_unit][-1]}}}"]:
        assert judge(gold, answer) == WRONG, (gold, answer)


@pytest.mark.parametrize("unit", list(SPELLINGS))
def test_a_unit_however_spelt_or_left_out_is_right_and_a_unit_on_the_answer_alone_is_not_judged(unit):
    from r1kit.rewards.verify import judge

    gold = "12" + SPELLINGS[unit][0]
    for spelling in SPELLINGS[unit]:
        for answer in boxed_forms("12", spelling):
            assert judge(gold, answer) == CORRECT, (gold, answer)
            assert judge("12", answer) == CORRECT, answer  # a gold without a unit says nothing of the answer's
            assert judge(gold.replace("12", "13", 1), answer) == WRONG, answer  # the value still counts
    assert judge(gold, r"\boxed{12}") == CORRECT and judge(gold, "<answer>12</answer>") == CORRECT


def test_units_are_not_converted_and_generic_units_are_none():
    from r1kit.rewards.verify import judge

    assert judge(r"5\text{ m}", r"\boxed{500\text{ cm}}") == WRONG
    assert judge(r"1\text{ kg}", r"\boxed{1000\text{ g}}") == WRONG
    assert judge(r"$2\sqrt{5}\text{ units}$", r"\boxed{2\sqrt{5}\text{ cm}}") == CORRECT
    assert judge(r"6\text{ square units}", r"\boxed{6\text{ cm}^2}") == CORRECT
    assert judge(r"Worked out: $\boxed{5\text{ m}}$", r"\boxed{5\text{ cm}}") == WRONG  # a worked solution's box
    assert judge(r"5\text{ m}", r"The answer is $5\text{ cm}$") == WRONG  # math-verify's anchored reading
    assert judge(r"5\text{ m}", r"The answer is $5\text{ m}$") == CORRECT
    assert judge(r"5\text{ m}", r"\boxed{5\,\text{cm}}, \boxed{5\,\text{m}}") == WRONG  # two boxes, two units


@pytest.mark.parametrize("gold", ["41", r"\frac{1}{2}", "-3", "0.25", r"$2\sqrt{3}$"])
def test_an_equation_pays_only_where_its_sides_are_equal(gold):
    from r1kit.rewards.verify import judge

    other = "7"
    right = [f"x = {gold.strip('$')}", f"{gold.strip('$')} = {gold.strip('$')}", rf"x \approx {gold.strip('$')}",
             f"a = b = {gold.strip('$')}"]
    wrong = [f"{other} = {gold.strip('$')}", f"{gold.strip('$')} = {other}", f"a = {other} = {gold.strip('$')}",
             f"{other} + 0 = {gold.strip('$')}", rf"{gold.strip('$')} \approx {other}",
             rf"{other} \approx {gold.strip('$')}", rf"\approx {gold.strip('$')}", f"= {gold.strip('$')}",
             f"{gold.strip('$')} ="]
    for stated in right:
        for answer in (rf"\boxed{{{stated}}}", f"<answer>{stated}</answer>"):
            assert judge(gold, answer) == CORRECT, (gold, answer)
    for stated in wrong:
        for answer in (rf"\boxed{{{stated}}}", f"<answer>{stated}</answer>", f"The final answer is ${stated}$"):
            assert judge(gold, answer) == WRONG, (gold, answer)


@pytest.mark.parametrize("relation", [r"\neq", r"\ne", "<", r"\lt", r"\le", r"\leq", ">", r"\ge", r"\geq", "≤", "≠",
                                      "<=", "!="])
def test_a_relation_is_not_the_value_it_bounds(relation):
    from r1kit.rewards.verify import judge

    for stated in (f"x {relation} 41", f"41 {relation} 42", f"42 {relation} 41"):
        for answer in (rf"\boxed{{{stated}}}", f"<answer>{stated}</answer>"):
            assert judge("41", answer) == WRONG, answer


@pytest.mark.parametrize(("gold", "right", "wrong"), [
    (r"x \le 3", [r"x \le 3", r"3 \ge x", r"x \leq 3", r"(-\infty, 3]"], ["3", "x < 3", r"x \ge 3", "x = 3", r"x \le 4"]),
    ("x > 5", ["x > 5", "5 < x", r"(5, \infty)"], ["5", r"x \ge 5", "x < 5"]),
    (r"-3 \le x \le 3", [r"-3 \le x \le 3", "[-3, 3]"], ["3", "-3", r"x \le 3"]),
    (r"x \neq 2", [r"x \neq 2"], ["2", "x = 2"]),
    ("y = 2x+1", ["y = 2x+1", "2x+1", "y = 1 + 2x"], ["2", "y = 2x+2", "1"]),
    ("x = 3", ["x = 3", "3"], ["y = 3", "4", "x = 4", r"x \le 3"]),
    ("$x = 3$", ["x = 3", "3"], ["y = 3", "4", r"x \le 3"]),
])
def test_a_gold_that_is_a_relation_is_judged_as_one(gold, right, wrong):
    from r1kit.rewards.verify import judge

    for stated in right:
        assert judge(gold, rf"\boxed{{{stated}}}") == CORRECT, (gold, stated)
    for stated in wrong:
        assert judge(gold, rf"\boxed{{{stated}}}") == WRONG, (gold, stated)
    assert judge(gold, f"<answer>{right[0]}</answer>") == CORRECT


@pytest.mark.parametrize(("gold", "right", "wrong"), [
    (r"2\sqrt{3}", [r"2\sqrt{3}", r"\sqrt{12}"], ["2", "3", r"\sqrt{3}"]),
    (r"3\pi", [r"3\pi", r"\pi \cdot 3"], ["3", r"\pi"]),
    (r"\sqrt{2}", [r"\sqrt{2}", r"2^{1/2}"], ["2", "1"]),
    (r"\frac{\sqrt{3}}{2}", [r"\frac{\sqrt{3}}{2}", r"\sqrt{3}/2"], ["3", "2", r"\sqrt{3}"]),
    (r"\dfrac{3}{4}", [r"\frac{3}{4}", "0.75"], ["3", "4"]),
    (r"\pi", [r"\pi"], ["3", "3.14"]),
    (r"e^{2}", ["e^2", r"e^{2}"], ["2", "e"]),
    (r"x^2+1", ["x^2+1", "1+x^2"], ["2", "1", "x^2"]),
    (r"10^{6}", ["1000000", "10^6"], ["10", "6"]),
    (r"[0, \infty)", [r"[0,\infty)"], ["0", r"(0,\infty)"]),
])
def test_a_latex_gold_without_delimiters_is_read_whole_not_by_its_first_number(gold, right, wrong):
    """Datasets' answer columns hold LaTeX without `$` (`2\\sqrt{3}`): math-verify's plain reading of such a gold was
    its leading number (so `\\boxed{2}` was paid and the right answer was not) or nothing (`\\sqrt{2}`)."""
    from r1kit.rewards.verify import judge

    for stated in right:
        assert judge(gold, rf"\boxed{{{stated}}}") == CORRECT, (gold, stated)
    for stated in wrong:
        assert judge(gold, rf"\boxed{{{stated}}}") == WRONG, (gold, stated)


@pytest.mark.slow
def test_hostile_answers_and_pathological_golds_without_delimiters_stay_bounded_and_unpaid(pool):
    """A gold read whole is not paid for a hedge of its reading and its old misreading, nor for an equation with the
    misreading; a gold that would take sympy minutes (a power tower, a huge binomial) or that nests without end ends
    within the per-sample limit and pays nothing."""
    hedges = [r"\boxed{2\sqrt{3}, 2}", r"\boxed{2 \text{ or } 2\sqrt{3}}", r"\boxed{2\sqrt{3}=2}",
              r"\boxed{\{2, 2\sqrt{3}\}}", r"\boxed{2} \boxed{2\sqrt{3}}", r"\boxed{x}"]
    assert pool.map([(r"2\sqrt{3}", h) for h in hedges]) == [WRONG] * len(hedges)
    pathological = ["10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", r"\binom{10^{9}}{10^{5}}", "{" * 5000,
                    r"\sqrt{" * 500 + "2" + "}" * 500, "x^" * 2000 + "2"]
    verdicts = pool.map([(gold, r"\boxed{1}") for gold in pathological])
    assert all(v in (TIMEOUT, UNPARSEABLE_GOLD) for v in verdicts), verdicts


@settings(max_examples=60, deadline=None)
@given(st.integers(-999, 999), st.integers(-999, 999), st.sampled_from(["=", r"\approx"]),
       st.sampled_from(list(SPELLINGS)), st.sampled_from(list(SPELLINGS)))
def test_no_answer_states_two_values_or_two_units_and_is_paid(a, b, relation, unit, other_unit):
    """A chain of two different numbers is wrong for either; a number with one unit is wrong for a gold with another."""
    from r1kit.rewards.verify import judge

    if a != b:
        for gold in (str(a), str(b)):
            assert judge(gold, rf"\boxed{{{a} {relation} {b}}}") == WRONG
            assert judge(gold, rf"\boxed{{x = {a} {relation} {b}}}") == WRONG
    if unit != other_unit:
        assert judge(f"{a}{SPELLINGS[unit][0]}", rf"\boxed{{{a}{SPELLINGS[other_unit][-1]}}}") == WRONG


# --------------------------------------------------------------------------------------------------------------------
# Never below math-verify on a right answer, and still no wrong answer paid, for the accuracy reward and the
# independent judge alike (issue 55, item 1)
# --------------------------------------------------------------------------------------------------------------------
RIGHT_IN_EVERY_FORM = [  # (gold as datasets write it, a right answer): Open-R1's math-verify call pays each
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\boxed{\begin{pmatrix}1&2\\3&4\end{pmatrix}}"),
    (r"\begin{bmatrix}1\\2\end{bmatrix}", r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}"),
    (r"\begin{pmatrix}\frac{1}{2}&0\\0&1\end{pmatrix}", r"\boxed{\begin{pmatrix}0.5&0\\0&1\end{pmatrix}}"),
    ("(1,2)", r"\boxed{(1,2)}"), ("[1,2,3]", r"\boxed{[1,2,3]}"), (r"\pm 2", r"\boxed{\pm 2}"),
    (r"\pm 3", r"\boxed{3, -3}"), (r"1 \pm \sqrt{2}", r"\boxed{1-\sqrt{2}, 1+\sqrt{2}}"), (r"\mp 3", r"\boxed{\pm 3}"),
    ("[-2,7)", r"\boxed{[-2,7)}"), ("(-2,7]", r"\boxed{(-2,7]}"), ("[-2,7]", r"\boxed{[-2,7]}"),
    (r"[1,\infty)", r"\boxed{[1,\infty)}"), ("3+4i", r"\boxed{3+4i}"), ("3+4i", r"\boxed{4i+3}"), ("1-i", r"\boxed{1 - i}"),
    ("p - q", r"\boxed{p-q}"), ("2a+b", r"\boxed{b+2a}"), ("3k+1", r"\boxed{1+3k}"), ("-2b", r"\boxed{-2b}"),
    ("2, 3", r"\boxed{3, 2}"), ("2 and 3", r"\boxed{2, 3}"), ("1,2,3", r"\boxed{1,2,3}"),
    ("A", r"\boxed{A}"), ("(A)", r"\boxed{A}"), ("B", "<answer>(B)</answer>"), ("C", r"\boxed{\text{C}}"),
    ("D", r"so the answer is \boxed{(D)}"), ("yes", r"\boxed{yes}"), ("No", "<answer>no</answer>"),
    ("True", r"\boxed{\text{True}}"), ("False", r"\boxed{false}"), ("B", r"\boxed{\textit{B}}"), ("B", r"\boxed{[B]}"),
    ("B", r"\boxed{$B$}"), ("B", r"\boxed{\mbox{B}\;}"),
    ("12 dollars", r"\boxed{12 dollars}"), ("12 apples", r"\boxed{12 apples}"), ("1e-5", r"\boxed{0.00001}"),
]
WRONG_IN_EVERY_FORM = [
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\boxed{\begin{pmatrix}1&2\\4&3\end{pmatrix}}"),
    (r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", r"\boxed{\begin{pmatrix}1&0&0\\0&1&0\end{pmatrix}}"),
    (r"\begin{pmatrix}1&0\\0&1\end{pmatrix}", r"\boxed{1}"),
    ("(1,2)", r"\boxed{(1,3)}"), ("(2,3)", r"\boxed{(3,2)}"), ("[1,2,3]", r"\boxed{[1,2,4]}"),
    (r"\pm 3", r"\boxed{3}"), ("3", r"\boxed{\pm 3}"), ("[-2,7)", r"\boxed{[-2,7]}"), ("[-2,7]", r"\boxed{(-2,7]}"),
    ("3+4i", r"\boxed{3-4i}"), ("3+4i", r"\boxed{5}"), ("2i", r"\boxed{-2i}"), ("p - q", r"\boxed{q-p}"),
    ("3k+1", r"\boxed{3}"), ("2n", r"\boxed{2}"), ("-2b", r"\boxed{-2}"),  # (the plain reading took the first number)
    ("2, 3", r"\boxed{3}"), ("2 and 3", r"\boxed{3}"),
    ("A", r"\boxed{B}"), ("(A)", "<answer>(B)</answer>"), ("A", "A B C D"),  # a choice must be the final answer
    ("D", r"\boxed{D. 42}"),
    ("yes", r"\boxed{sey}"),  # (plain math-verify pays this one: it reads both as the product y*e*s)
    ("yes", "<answer>no</answer>"), ("No", r"\boxed{yes}"),
    # (an attacker's review, 2026-12-07: each of these was paid by one judge or the other)
    ("3+4i", r"\boxed{\infty}"), (r"3 \pm 4i", r"\boxed{\infty, -\infty}"), ("1000000+i", r"\boxed{1000000}"),
    (r"\pm 3", r"\boxed{3 = \pm 3}"), ("3", r"\boxed{\pm 3 = 3}"), ("2i", r"\boxed{7 = 2i}"),
    (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\boxed{\begin{pmatrix}1&2\\3&5=4\end{pmatrix}}"),
    ("12", r"\boxed{12 thousand}"), ("5", r"\boxed{5 squared}"), ("12 apples", r"\boxed{12 oranges}"),
    ("12", r"\boxed{12 cm} \boxed{13 cm}"), ("12", r"\boxed{12 \text{ cm}} or \boxed{13 \text{ cm}}"),
    ("1e-5", r"\boxed{1}"), ("1e-5", r"\boxed{e-5}"), ("5 to 7", r"\boxed{35ot}"),
]


def reward_pays(gold: str, answer: str) -> bool | None:
    verdict = judge(gold, answer)
    return None if verdict not in (CORRECT, WRONG) else verdict == CORRECT


def judge_pays(gold: str, answer: str) -> bool | None:
    from r1kit.integrity.independent import math_verdict

    return math_verdict(answer, gold)


JUDGES = {"accuracy reward": reward_pays, "independent judge": judge_pays}


@pytest.mark.parametrize("judged_by", JUDGES)
@pytest.mark.parametrize(("gold", "answer"), RIGHT_IN_EVERY_FORM)
def test_a_right_answer_in_any_form_a_dataset_writes_is_paid(judged_by, gold, answer):
    assert JUDGES[judged_by](gold, answer) is True


@pytest.mark.parametrize("judged_by", JUDGES)
@pytest.mark.parametrize(("gold", "answer"), WRONG_IN_EVERY_FORM)
def test_a_wrong_answer_in_those_forms_is_still_wrong(judged_by, gold, answer):
    assert JUDGES[judged_by](gold, answer) is False


def open_r1_pays(gold: str, answer: str) -> bool:
    """Open-R1's accuracy reward: the gold read as LaTeX between `$`, the answer by its extraction settings."""
    from math_verify import LatexExtractionConfig, parse, verify
    from math_verify.parser import NormalizationConfig

    config = LatexExtractionConfig(normalization_config=NormalizationConfig(
        nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)
    gold_parsed = parse(f"${gold}$", extraction_mode="first_match")
    return bool(gold_parsed) and bool(verify(gold_parsed, parse(answer, extraction_config=[config],
                                                                  extraction_mode="first_match")))


GOLDS = [gold for gold, _ in RIGHT_IN_EVERY_FORM] + [
    "42", "-7", "0.5", r"\frac{3}{4}", "1,000", r"2\sqrt{3}", r"\sqrt{2}/2", r"\pi", "x^2+1", "2x", "n+1", "2^n",
    r"x \le 3", "y = 2x+1", "10%", r"10\%", "5 cm", "12 dollars", r"30^\circ", r"\{1,2\}", "(0,1)", r"(-\infty, 0]",
    "3.14", "1/3", "-2.5", r"\frac{\pi}{6}", "e^2", r"\ln 2", "2i", "-i", "(1,2,3)", "[0,1]", "a/b", "4 km/h",
]


@pytest.mark.parametrize("judged_by", JUDGES)
def test_no_gold_open_r1_pays_itself_for_goes_unpaid_here(judged_by):
    """The gold written back as the answer (boxed): wherever Open-R1's call pays it, both judges pay it too."""
    below = [gold for gold in GOLDS if open_r1_pays(gold, rf"\boxed{{{gold}}}")
             and JUDGES[judged_by](gold, rf"\boxed{{{gold}}}") is not True]
    assert below == []


def test_a_gold_with_many_spaces_is_read_in_bounded_time():
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(judge(" " * 3000 + "x", r"\boxed{x}")), daemon=True)
    worker.start()
    worker.join(timeout=60)  # (a backtracking pattern took 187 s here; a judgement takes milliseconds)
    assert outcome and outcome[0] in (CORRECT, WRONG, UNPARSEABLE_GOLD)


def test_a_bare_word_that_is_no_formula_and_no_choice_stays_unjudged():
    assert judge("abc", r"\boxed{abc}") == UNPARSEABLE_GOLD  # (sympy would read a*b*c and pay c*b*a)


def test_the_accuracy_reward_judges_multiple_choice_golds_instead_of_skipping_every_row():
    from r1kit.rewards.math import make_accuracy_reward

    reward = make_accuracy_reward(workers=0)
    golds = ["A", "(B)", "C", "D", "yes"]
    answers = [[{"role": "assistant", "content": f"<answer>{a}</answer>"}] for a in ("A", "B", "(D)", "d", "Yes")]
    assert reward(answers, solution=golds) == [1.0, 1.0, 0.0, 1.0, 1.0]
