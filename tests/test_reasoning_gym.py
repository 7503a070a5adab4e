"""reasoning-gym as a data source (`reasoning-gym:<generator>`) and a reward (`reasoning_gym`), and the held-out
accuracy that grades with the generator's scorer. Skipped where the extra is not installed, except the behaviour
without it: a clear message, and r1kit importing fine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.errors import ConfigError
from r1kit.loading.data import check_reward_columns, load_source

CHAIN_SUM = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2, "train_size": 120, "test_size": 30}


@pytest.fixture(scope="module")
def chain_sum():
    pytest.importorskip("reasoning_gym")
    return load_source("reasoning-gym:chain_sum", options=CHAIN_SUM)


def record(answer: str, generator: str = "chain_sum", **entry) -> str:
    return json.dumps({"generator": generator, "options": {}, "entry": {"question": "q", "answer": answer, **entry}})


def reward():
    from r1kit.rewards.gym import make_reasoning_gym_reward

    return make_reasoning_gym_reward(timeout=1.0)


# --------------------------------------------------------------------------------------------------------------------
# Without the extra
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_r1kit_imports_and_lists_rewards_without_reasoning_gym():
    code = ("import sys; sys.modules['reasoning_gym'] = None; import r1kit, r1kit.loading.data, r1kit.benchmarking.callbacks, "
            "r1kit.evaluation, r1kit.rewards.gym; from r1kit.rewards import REWARD_FUNCS_REGISTRY; "
            "assert 'reasoning_gym' in REWARD_FUNCS_REGISTRY")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(ConfigError, match=r"dataset_name: reasoning-gym is not installed; pip install 'r1kit\[reasoning-gym\]'"):
        load_source("reasoning-gym:chain_sum")


def test_reward_skips_rows_when_reasoning_gym_is_missing(monkeypatch):
    from r1kit.rewards import gym as gym_reward

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    assert gym_reward.score_completions(["3"], [record("3")]) == [None]


# --------------------------------------------------------------------------------------------------------------------
# The data source
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_generator_rows_have_prompt_answer_solution_and_scorer_record(chain_sum):
    assert set(chain_sum) == {"train", "test"}
    assert (len(chain_sum["train"]), len(chain_sum["test"])) == (120, 30)
    row = chain_sum["train"][0]
    assert set(row) == {"prompt", "answer", "solution", "reasoning_gym"}
    assert row["solution"] == row["answer"]
    entry = json.loads(row["reasoning_gym"])["entry"]
    assert entry["question"] == row["prompt"] and entry["answer"] == row["answer"]
    check_reward_columns(["reasoning_gym", "accuracy"], chain_sum["train"].column_names)


def test_train_and_test_never_share_a_question_whatever_the_seeds(chain_sum):
    other_seed = load_source("reasoning-gym:chain_sum", options={**CHAIN_SUM, "seed": 7})
    assert not set(chain_sum["test"]["prompt"]) & set(chain_sum["train"]["prompt"])
    assert not set(chain_sum["test"]["prompt"]) & set(other_seed["train"]["prompt"])
    assert len(set(chain_sum["train"]["prompt"])) == 120  # distinct questions
    assert chain_sum["train"]["prompt"] != other_seed["train"]["prompt"]


def test_same_options_give_the_same_rows(chain_sum):
    again = load_source("reasoning-gym:chain_sum", options=CHAIN_SUM, split="test")
    assert again["prompt"] == chain_sum["test"]["prompt"]


def test_generator_options_reach_the_generator(chain_sum):
    metadata = [json.loads(r)["entry"]["metadata"] for r in chain_sum["train"]["reasoning_gym"]]
    assert {m["num_terms"] for m in metadata} <= {2, 3}
    assert {m["num_digits"] for m in metadata} <= {1, 2}


def test_text_answers_get_no_solution_column():
    pytest.importorskip("reasoning_gym")
    ds = load_source("reasoning-gym:spell_backward", options={"train_size": 20, "test_size": 5})
    assert "solution" not in ds["train"].column_names
    check_reward_columns(["reasoning_gym"], ds["train"].column_names)


def test_small_problem_space_keeps_distinct_questions_and_warns(caplog):
    pytest.importorskip("reasoning_gym")
    ds = load_source("reasoning-gym:chain_sum", options={"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                                         "max_digits": 1, "train_size": 1000, "test_size": 100})
    assert len(ds["train"]) < 1000 and len(set(ds["train"]["prompt"])) == len(ds["train"])
    assert "fewer distinct questions" in caplog.text


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("reasoning-gym:chain_summ", {}, "no generator 'chain_summ'; did you mean chain_sum"),
        ("reasoning-gym:chain_sum", {"min_digit": 2}, "dataset_options: reasoning-gym:chain_sum rejects its options"),
        ("reasoning-gym:chain_sum", {"min_digits": 5, "max_digits": 2}, "rejects its options"),
        ("reasoning-gym:chain_sum", {"train_size": 0}, "dataset_options.train_size must be a positive integer"),
        ("reasoning-gym:chain_sum", {"seed": "a"}, "dataset_options.seed must be a non-negative integer"),
    ],
)
def test_bad_generator_or_options_are_one_line_errors(name, options, message):
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ConfigError, match=message):
        load_source(name, options=options)


# --------------------------------------------------------------------------------------------------------------------
# The reward
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_reward_grades_with_the_generators_scorer(chain_sum):
    rows = chain_sum["test"].select(range(4))
    answers = list(rows["answer"])
    completions = [f"The final answer is {answers[0]}.", f"<answer>{answers[1]}</answer>",
                   f"The answer is {int(answers[2]) + 1}.", "I do not know."]
    assert reward()(completions, reasoning_gym=list(rows["reasoning_gym"])) == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.slow
def test_answer_tag_wins_over_later_numbers(chain_sum):
    row = chain_sum["test"][0]
    assert reward()([f"<answer>{row['answer']}</answer> and 12345"], reasoning_gym=[row["reasoning_gym"]]) == [1.0]


HOSTILE = ["", None, "x" * 1_000_000, "9" * 100_000, "<answer>" * 1000, "\x00\ud800", "1e999999999",
           [{"content": None}], "<answer>" + "(" * 10_000 + "</answer>"]


@pytest.mark.slow
def test_hostile_completions_score_zero_and_never_raise(chain_sum):
    rows = [chain_sum["test"][0]["reasoning_gym"]] * len(HOSTILE)
    assert reward()(HOSTILE, reasoning_gym=rows) == [0.0] * len(HOSTILE)


@pytest.mark.parametrize("bad", [None, "", "{not json", "[]", json.dumps({"generator": "chain_sum"}),
                                 json.dumps({"generator": "no_such_generator", "options": {}, "entry": {"answer": "1"}})])
@pytest.mark.slow
def test_rows_that_cannot_be_judged_score_none(bad):
    pytest.importorskip("reasoning_gym")
    assert reward()(["1"], reasoning_gym=[bad]) == [None]


# Some scorers parse answers with sympy's parse_expr, i.e. eval (polynomial_multiplication, the integrations,
# countdown, puzzle24): answers can try to run Python.
def gym_record(generator: str) -> tuple[str, dict]:
    import reasoning_gym

    entry = reasoning_gym.create_dataset(generator, size=1, seed=0)[0]
    return json.dumps({"generator": generator, "options": {}, "entry": entry}), entry


def code_answers(marker: str) -> list[str]:
    """Answers that try to reach the host, the scorer's process or the verdicts of other answers."""
    return [
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w').write('x')",
        "'{0.__init__.__globals__}'.format(Integer)",
        f"exec(\"import os; os.system('touch {marker}')\")",
        # runtime-built names through an async generator's frame (found by review: it beat a deny-list guard)
        "[(B:=(N for N in [1] async for E in N).ag_frame.f_builtins), B['ge'+chr(116)+'attr'](B['exe'+chr(99)],"
        f"chr(95)*2+'closure'+chr(95)*2)[1].cell_contents(\"open('{marker}','w')\",{{}})]",
        "__import__('os').write(1, b'{\"score\": 1.0}\\n')",  # a forged verdict line on the scorer's stdout
        "__import__('os').kill(1, 2) or __import__('os').kill(1, 9)",  # SIGINT / SIGKILL to the jail's pid 1
        "open('/tmp/work/left-behind', 'w').write('1')",
        "__import__('sympy').__dict__.__setitem__('Eq', lambda *a: True)",  # fool the answers after it
    ]


@pytest.mark.slow
def test_answers_that_run_code_never_reach_the_host_or_other_answers(tmp_path):
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards.gym import score_completions

    rec, entry = gym_record("polynomial_multiplication")
    answers = [*code_answers(str(tmp_path / "written-by-an-answer")), entry["answer"] + " + 1", entry["answer"]]
    scores = score_completions([f"<answer>{a}</answer>" for a in answers], [rec] * len(answers), timeout=3)
    assert scores == [0.0] * (len(answers) - 1) + [1.0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_jail_contains_answers_that_get_past_the_guard(tmp_path, monkeypatch):
    """With the eval check switched off (as if an answer found a way past it), the jail and the per-answer processes
    still keep every answer away from the host, from the scorer process and from the other answers' verdicts."""
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards import gym as gym_reward

    unguarded = tmp_path / "server" / "gym_server.py"
    unguarded.parent.mkdir()
    source = gym_reward.SERVER.read_text()
    unguarded.write_text(source.replace("builtins.eval, builtins.exec = guarded_eval(builtins.eval), guarded_exec(builtins.exec)", "pass"))
    monkeypatch.setattr(gym_reward, "SERVER", unguarded)
    secret = tmp_path / "secret.txt"
    secret.write_text("1")
    rec, entry = gym_record("polynomial_multiplication")
    gold = entry["answer"]
    marker = str(tmp_path / "written-by-an-answer")
    answers = [
        *code_answers(marker),
        f"({gold}) if __import__('os').path.exists('/tmp/work/left-behind') else 0",  # an earlier answer's file
        f"({gold}) if open('{secret}').read() == '1' else 0",  # a host file
        f"({gold}) if __import__('os').path.exists('{Path(__file__).resolve().parent}') else 0",  # the host's tree
        f"({gold}) if len([p for p in __import__('os').listdir('/proc') if p.isdigit()]) > 3 else 0",  # processes
        f"({gold}) if open('{gym_reward.JAIL_SITE}/0/r1kit_planted.py', 'w') else 0",  # the shown site-packages
        gold + " + 1",
        gold,  # scored after the sympy patch, the signals and the files above: the right answer still scores 1
    ]
    scores = gym_reward.score_completions([f"<answer>{a}</answer>" for a in answers], [rec] * len(answers), timeout=3)
    assert scores[-8:] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt", "server"]
    assert not any((Path(folder) / "r1kit_planted.py").exists() for folder in gym_reward._site_folders())


def test_when_the_scorer_stops_mid_batch_only_the_answer_in_flight_scores_zero(monkeypatch):
    """A scorer process that dies mid-batch (as if an answer got past everything and killed it) costs the answer it
    was scoring; the rest of the batch goes to a fresh jail; a jail that never starts leaves rows unjudged."""
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards import gym as gym_reward

    starts = []

    def dies_on_the_killer(requests, timeout, isolate, strict=True, foil_seed=0):
        starts.append(len(requests))
        replies = []
        for request in map(json.loads, requests):
            if request["answer"] == "666":
                return replies, "killed"
            replies.append({"score": 1.0 if request["answer"] == "3" else 0.0})
        return replies, ""

    monkeypatch.setattr(gym_reward, "_run_server", dies_on_the_killer)
    answers = ["3", "666", "4", "3", "666", "3"]
    assert gym_reward.score_completions(answers, [record("3")] * 6) == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert starts == [6, 4, 1]
    monkeypatch.setattr(gym_reward, "_run_server", lambda requests, *args: (None, "no memory"))
    assert gym_reward.score_completions(["3"], [record("3")]) == [None]


@pytest.mark.slow
def test_countdown_and_puzzle24_answers_must_be_arithmetic():
    """Their scorers accept any sympy expression of the right value: `sign(...)` would turn a wrong answer right."""
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards.gym import score_completions

    rec, entry = gym_record("countdown")  # numbers 66 34 98 54 6, target 164
    answers = ["(98+66)*sign(34+54+6)", entry["answer"], "6*(98 - 54) - 34 - 65"]
    scores = score_completions([f"<answer>{a}</answer>" for a in answers], [rec] * 3, timeout=3)
    assert scores[1] == 1.0 and scores[0] < 0.05 and scores[2] < 1.0


@pytest.mark.slow
def test_an_answer_that_hangs_its_scorer_scores_zero_within_the_time_limit():
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards.gym import score_completions

    rec, entry = gym_record("polynomial_multiplication")  # sympy evaluates the answer (countdown now refuses **)
    scores = score_completions(["<answer>9**9**9**9</answer>", f"<answer>{entry['answer']}</answer>"], [rec, rec],
                               timeout=1)
    assert scores == [0.0, 1.0]  # cut at its time limit (0.0), and the next answer still scored


@pytest.mark.slow
def test_without_a_jail_scoring_stops_unless_explicitly_allowed(monkeypatch):
    pytest.importorskip("reasoning_gym")
    from r1kit.config.schema import GRPOConfig, GRPOScriptArguments
    from r1kit.rewards import gym as gym_reward
    from r1kit.sandbox import jail

    monkeypatch.setattr(jail, "probe", lambda: "bubblewrap (bwrap) is not installed")
    assert gym_reward.score_completions(["3"], [record("3")]) == [None]
    assert gym_reward.score_completions(["3", "4"], [record("3")] * 2, allow_unsandboxed=True) == [1.0, 0.0]
    script_args = GRPOScriptArguments(dataset_name="reasoning-gym:chain_sum", reward_funcs=["reasoning_gym"])
    with pytest.raises(ConfigError, match="cannot be scored in a jail .*allow_unsandboxed_code_execution: true"):
        gym_reward.check_gym_scoring(script_args, GRPOConfig(output_dir="unused", use_cpu=True))
    script_args.allow_unsandboxed_code_execution = True
    gym_reward.check_gym_scoring(script_args, GRPOConfig(output_dir="unused", use_cpu=True))


@pytest.mark.slow
def test_text_answers_are_read_from_the_last_line():
    pytest.importorskip("reasoning_gym")
    rec = record("olleh", generator="spell_backward")
    right, wrong = reward()(["Spelled backward:\nolleh", "Spelled backward:\nhello"], reasoning_gym=[rec, rec])
    assert right == 1.0 and wrong < 1.0  # spell_backward's scorer gives partial credit


# --------------------------------------------------------------------------------------------------------------------
# Held-out accuracy
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_heldout_accuracy_grades_reasoning_gym_rows_with_their_scorer(chain_sum, tmp_path):
    from types import SimpleNamespace

    from r1kit.benchmarking.callbacks import CALLBACKS
    from r1kit.benchmarking.judges import score_gym_answers

    script_args = SimpleNamespace(dataset_test_split="test", dataset_prompt_column="prompt", reward_timeout=1.0,
                                  reasoning_gym_answer="last_number", allow_unsandboxed_code_execution=False)
    training_args = SimpleNamespace(heldout_size=10, output_dir=str(tmp_path), heldout_eval_steps=0,
                                    system_prompt=None, max_completion_length=16)
    callback = CALLBACKS["heldout_accuracy"](script_args, training_args, chain_sum, None, True)
    assert callback.grade.func is score_gym_answers and len(callback.golds) == 10
    answer = chain_sum["test"][0]["answer"]
    # Full marks only: reasoning-gym's partial credit for an answer that merely contains the gold is not accuracy.
    assert score_gym_answers([f"It is {answer}.", f"<answer>{answer} apples</answer>", "no"],
                             callback.golds[:1] * 3) == [1.0, 0.0, 0.0]


@pytest.mark.slow
def test_reply_mode_grades_the_whole_reply_as_the_answer(chain_sum):
    from r1kit.rewards.gym import make_reasoning_gym_reward

    row = chain_sum["test"][0]
    bare, sentence, tagged = make_reasoning_gym_reward(answer_mode="reply")(
        [row["answer"], f"The answer is {row['answer']}.", f"So <answer>{row['answer']}</answer>"],
        reasoning_gym=[row["reasoning_gym"]] * 3,
    )
    assert bare == 1.0 and tagged == 1.0
    assert sentence == 0.0  # strict: chain_sum's scorer gives a reply that contains the answer partial credit only
    loose = make_reasoning_gym_reward(answer_mode="reply", strict=False)(
        [f"The answer is {row['answer']}."], reasoning_gym=[row["reasoning_gym"]])
    assert 0.0 < loose[0] < 1.0


def test_unknown_answer_mode_is_a_config_error():
    from r1kit.config.schema import GRPOScriptArguments

    with pytest.raises(ConfigError, match="reasoning_gym_answer: 'replies' is not valid; use one of last_number, reply"):
        GRPOScriptArguments(dataset_name="x", reasoning_gym_answer="replies")


# --------------------------------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_grpo_trains_on_a_generator_with_its_reward_and_heldout_accuracy(tmp_path, tiny_model_dir):
    pytest.importorskip("reasoning_gym")
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline
    from tests.helpers import tiny_recipe, write_recipe

    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_dir, "reasoning-gym:chain_sum", out, dataset_prompt_column="prompt",
                         dataset_options={**CHAIN_SUM, "train_size": 16, "test_size": 4},
                         reward_funcs=["reasoning_gym", "accuracy"], max_steps=1, save_strategy="no",
                         callbacks=["heldout_accuracy"], heldout_size=4)
    pipeline(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))
    log = json.loads((out / "trainer_state.json").read_text())["log_history"][0]
    assert 0.0 <= log["rewards/reasoning_gym_reward/mean"] <= 1.0 and "rewards/accuracy_reward/mean" in log
    records = [json.loads(line) for line in (out / "heldout_accuracy.jsonl").read_text().splitlines()]
    assert [(r["step"], r["n"]) for r in records] == [(0, 4), (1, 4)]


# --------------------------------------------------------------------------------------------------------------------
# Every generator: gold answers at full marks, degenerate answers never
# --------------------------------------------------------------------------------------------------------------------
# composite's options are reasoning-gym DatasetSpec objects, which dataset_options (plain YAML values) cannot give.
UNSUPPORTED = {"composite"}
# Entries whose `answer` is None: the metadata key holding an example of a right answer, or None where there is none.
EXAMPLE_ANSWERS = {"graph_color": "possible_answer", "propositional_logic": "example_answer",
                   "rubiks_cube": "example_correct_answer", "boxnet": None, "rush_hour": None}
# Scorers that pay another question's answer on a question (game_of_life_halting compares bool(answer), so any
# non-empty reply): r1kit cannot judge their rows, which score None, never full marks.
BLIND = {"game_of_life_halting"}
# propositional_logic's entries have no gold, so r1kit has no foil to tell its questions apart with; a conclusion that
# restates a premise several questions share ("(Q ∧ Q)") took full marks on each of them. Strict scoring closes it (a
# conclusion one premise gives scores 0; contradictory premises are not judged), and its example answers ("(Q ∨ P)"
# from Q) are such conclusions: they score 0 or None, not full marks.
SHARED_ANSWERS_PAID = {"propositional_logic"}
EXAMPLES_COPIED = {"propositional_logic"}
CONSTANTS = ["", "0", "1", "True", "yes", "x"]
# Hedges: several golds in one answer, which containment scorers (len(gold)/len(answer)) paid 0.1-0.6 on every row of
# course_schedule, ransom_note, isomorphic_strings, syllogism, acre, mahjong_puzzle; each row also gets the hedge of
# its generator's golds ("hedge of the golds").
HEDGES = ["False True", "True False", "Yes No", "off on undetermined", "Peng Chi Pass"]
WRAPPERS = ["{v}", "Integral({v}, {x}) + C", "integrate({v}, {x}) + C", "Derivative({v}, {x})", "expand({v})",
            "simplify({v})", "factor({v})", "Subs({v}, {x}, {x})"]
ROWS_PER_GENERATOR = 3


def gold_of(generator: str, entry: dict) -> str | None:
    if entry["answer"] is not None:
        return str(entry["answer"])
    key = EXAMPLE_ANSWERS[generator]
    if key is None:
        return None
    example = entry["metadata"][key]
    return example if isinstance(example, str) else json.dumps(example)


def rows_with_distinct_golds(generator: str) -> list[tuple[str, dict]]:
    """Up to ROWS_PER_GENERATOR rows (recorded as r1kit records them) whose golds, or questions where there is no
    gold, differ."""
    import reasoning_gym

    from r1kit.sources.gym_data import encode_record

    dataset = reasoning_gym.create_dataset(generator, size=4 * ROWS_PER_GENERATOR, seed=1)
    rows, seen = [], set()
    for index in range(len(dataset)):
        entry = dataset[index]
        mark = str(entry["answer"]) if entry["answer"] is not None else entry["question"]
        if mark not in seen:
            seen.add(mark)
            rows.append((encode_record(generator, {}, entry), entry))
        if len(rows) == ROWS_PER_GENERATOR:
            break
    return rows


def echoes(entry: dict) -> list[str]:
    """The question sent back as an answer: verbatim, and each expression of the question (a metadata text that it
    quotes) as it is or inside an operator that does the problem."""
    question, metadata = entry["question"], entry.get("metadata", {})
    variable = metadata.get("variable") if isinstance(metadata.get("variable"), str) else "x"
    quoted = [v for v in metadata.values() if isinstance(v, str) and 0 < len(v) <= 300 and v in question]
    found = [question] + [w.format(v=v, x=variable) for v in quoted for w in WRAPPERS]
    return [e for e in found if e.strip() != str(entry["answer"]).strip()]


def score_every_generator() -> tuple[list[str], list[tuple]]:
    """Each supported generator's rows, scored in one jail: (generator, kind, probe, row index, score) per answer."""
    from reasoning_gym.factory import DATASETS

    from r1kit.rewards.gym import score_completions

    names = sorted(set(DATASETS) - UNSUPPORTED)
    cases, completions, records = [], [], []
    for generator in names:
        rows = rows_with_distinct_golds(generator)
        golds = [gold_of(generator, entry) for _, entry in rows]
        for i, (record_text, entry) in enumerate(rows):
            probes = [("gold", golds[i])] if golds[i] is not None else []
            probes += [("echo", e) for e in echoes(entry)]
            probes += [("constant", c) for c in CONSTANTS + HEDGES if c != golds[i]]
            hedge = " ".join(sorted({g for g in golds if g is not None}))
            probes += [("hedge of the golds", hedge)] if hedge != golds[i] and len(golds) > 1 else []
            probes += [("another row's gold", golds[0])] if i > 0 and golds[0] not in (None, golds[i]) else []
            for kind, probe in probes:
                cases.append((generator, kind, probe, i))
                completions.append(f"<answer>{probe}</answer>")
                records.append(record_text)
    scores = score_completions(completions, records, timeout=10)
    return names, [(*case, score) for case, score in zip(cases, scores)]


@pytest.mark.slow
def test_every_generator_pays_its_golds_and_no_degenerate_or_constant_answer():
    """The three checks below read one batch, scored once (a module fixture shared by three tests was scored again by
    each pytest worker that ran one of them: about 45 s each)."""
    pytest.importorskip("reasoning_gym")
    names, results = score_every_generator()
    gold_answers_score_full_marks(names, results)
    degenerate_answers_never_score_full_marks(results)
    no_constant_answer_is_paid_on_two_rows_whose_golds_differ(results)


def gold_answers_score_full_marks(names: list[str], results: list[tuple]) -> None:
    """A gold that scores less gives no signal and no warning (arc_agi's gold scored 0.05 once its tuples had become
    lists in r1kit's record)."""
    golds = {(g, row): score for g, kind, _, row, score in results if kind == "gold"}
    assert {g for g, _ in golds} == set(names) - {g for g, key in EXAMPLE_ANSWERS.items() if key is None}
    short = {(g, row): score for (g, row), score in golds.items()
             if g not in BLIND | EXAMPLES_COPIED and score != 1.0}
    assert not short, f"gold answers below full marks: {short}"
    assert all(score in (0.0, None) for (g, _), score in golds.items() if g in EXAMPLES_COPIED)
    assert all(score is None for (g, _), score in golds.items() if g in BLIND)


def degenerate_answers_never_score_full_marks(results: list[tuple]) -> None:
    """The question sent back (verbatim, or inside Integral(...), expand(...), ...) earns nothing on any row; one
    answer (a constant, or another row's gold) never takes full marks on two rows whose golds differ."""
    echoed = [(g, probe[:80], row) for g, kind, probe, row, score in results if kind == "echo" and score == 1.0]
    assert not echoed, f"echoed questions at full marks: {echoed}"
    rows_paid: dict[tuple[str, str], set[int]] = {}
    for g, kind, probe, row, score in results:
        if kind == "constant" and score == 1.0:
            rows_paid.setdefault((g, probe), set()).add(row)
    constants = {key: rows for key, rows in rows_paid.items() if len(rows) > 1}
    borrowed = [(g, probe[:80], row) for g, kind, probe, row, score in results
                if kind == "another row's gold" and score == 1.0 and g not in SHARED_ANSWERS_PAID]
    assert not constants and not borrowed, f"one answer at full marks on rows whose golds differ: {constants} {borrowed}"


def no_constant_answer_is_paid_on_two_rows_whose_golds_differ(results: list[tuple]) -> None:
    """Any positive score, not only full marks: one answer paid on rows whose golds differ is not specific to its row.
    The attack's hedges earn nothing on the generators they were paid on. A hedge of a few golds is still paid on a
    row whose gold it holds when no foil's gold is among them (a scorer that reads the last number pays "19 288 560"
    on the row whose gold is 560), never on two. Not closed: generators whose entries have
    no gold (EXAMPLE_ANSWERS) have no foil to compare with, and their scorers' credit for any well-formed answer
    (0.01 on rubiks_cube and rush_hour) is paid on every row."""
    rows_paid: dict[tuple[str, str], set[int]] = {}
    for g, kind, probe, row, score in results:
        if kind in ("constant", "hedge of the golds") and score and g not in EXAMPLE_ANSWERS:
            rows_paid.setdefault((g, probe), set()).add(row)
    constants = {key: rows for key, rows in rows_paid.items() if len(rows) > 1}
    assert not constants, f"one answer paid on rows whose golds differ: {constants}"
    attacked = {"course_schedule": ["False True", "True False"], "ransom_note": ["False True"],
                "isomorphic_strings": ["True False"], "syllogism": ["Yes No"], "acre": ["off on undetermined"],
                "mahjong_puzzle": ["Peng Chi Pass"]}
    paid = [(g, probe, row, score) for g, kind, probe, row, score in results
            if probe in attacked.get(g, []) and score]
    assert not paid, f"hedges paid: {paid}"


def server_module():
    """The in-jail scorer script as a module, for its pure parts (the arithmetic grammar)."""
    import importlib.util

    from r1kit.rewards.gym import SERVER

    spec = importlib.util.spec_from_file_location("gym_server_under_test", SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("answer", "numbers"), [
    ("6*(98 - 54) - 34 - 65", [6, 98, 54, 34, 65]), ("((1+2))*3/4", [1, 2, 3, 4]), (" 10 ", [10]), ("0*7", [0, 7]),
    ("-1 + 72*(89 - 77)/1", [1, 72, 89, 77, 1]), ("(-3+5)*2", [3, 5, 2]),  # a leading minus: countdown's own golds
])
def test_arithmetic_grammar_accepts_integers_four_operators_and_brackets(answer, numbers):
    assert server_module().arithmetic_numbers(answer) == numbers


@pytest.mark.parametrize("answer", [
    "(26**((13+24)//15))", "2**3", "8//2", "2.5*4", "1e3", "--3+5", "3+-5", "3*-5", "sign(3)", "1 2", "3+", "()", "(1", "1)",
    "007", "0x1f", "١٢", "(" * 33 + "1" + ")" * 33, "", "[1]", "1;2", "True",
])
def test_arithmetic_grammar_refuses_everything_else(answer):
    assert server_module().arithmetic_numbers(answer) is None


def test_arithmetic_answers_must_use_exactly_the_rows_numbers():
    server = server_module()
    entry = {"metadata": {"numbers": [1, 3, 5, 9]}}
    assert server.filtered_answer("puzzle24", "1*3*5 + 9", entry) == "1*3*5 + 9"
    assert server.filtered_answer("puzzle24", "3*8*1*1", entry) == ""  # 24 on any row: puzzle24's scorer paid it
    assert server.filtered_answer("puzzle24", "1*3*5 + 9 + 0", entry) == ""
    assert server.filtered_answer("countdown", "1*3*5 + 9", {"metadata": {"numbers": "1 3 5 9"}}) == ""
    assert server.filtered_answer("chain_sum", "2**3", entry) == "2**3"  # other generators: the scorer decides


@pytest.mark.slow
def test_countdown_and_puzzle24_cheats_score_nothing_and_towers_never_reach_the_scorer(monkeypatch):
    pytest.importorskip("reasoning_gym")
    import reasoning_gym

    from r1kit.rewards import gym
    from r1kit.rewards.gym import score_completions
    from r1kit.sources.gym_data import encode_record

    def countdown(numbers, target):
        entry = {"question": f"Make {target} from {numbers}", "answer": "", "metadata": {"numbers": numbers,
                                                                                          "target": target}}
        return encode_record("countdown", {}, entry)

    cheats = [("(26**((13+24)//15))", countdown([26, 13, 24, 15], 676)), ("2.5*4", countdown([2, 5, 4], 10)),
              ("5*2", countdown([2, 5, 4], 10))]
    puzzles = reasoning_gym.create_dataset("puzzle24", size=2, seed=3)
    other_rows_gold = (puzzles[0]["answer"], encode_record("puzzle24", {}, puzzles[1]))
    answers, records = zip(*cheats, other_rows_gold)
    # Refused before the scorer, which gives them its "no answer" credit (0.01); that credit is paid on every row
    # alike, so the degenerate-answer rule takes it too.
    assert score_completions([f"<answer>{a}</answer>" for a in answers], list(records), timeout=3) == [0.0] * 4

    rows = reasoning_gym.create_dataset("countdown", size=8, seed=0)
    records = [encode_record("countdown", {}, rows[i]) for i in range(8)]
    clean = [f"<answer>{rows[i]['answer']}</answer>" for i in range(8)]
    towers = ["<answer>" + "**".join(map(str, rows[i]["metadata"]["numbers"])) + "</answer>" for i in range(8)]

    replies, real = [], gym._run_server

    def watched(*args, **kwargs):  # the scorer process's verdicts, as score_completions reads them
        out = real(*args, **kwargs)
        replies.extend(out[0] or [])
        return out

    monkeypatch.setattr(gym, "_run_server", watched)
    clean_scores, tower_scores = score_completions(clean, records, timeout=3), score_completions(towers, records, timeout=3)
    assert clean_scores == [1.0] * 8 and tower_scores == [0.0] * 8
    # A tower that reached sympy held its answer's full time limit (a "time" verdict); refused before the scorer, none
    # does (counted from the verdicts, not timed: a stopwatch against the clean batch failed on a loaded machine).
    assert len(replies) >= 16 and not [r for r in replies if r.get("error") == "time"], replies


def test_records_keep_tuples_sets_and_non_string_keys():
    """arc_agi's and rearc's scorers compare tuples: as JSON lists, their golds scored 0.05."""
    from r1kit.sources.gym_data import UnfaithfulRecord, decode_record, encode_record

    entry = {"question": "q", "answer": "a", "metadata": {
        "grid": ((1, 2), (3, 4)), "colours": {1: "red", (0, 1): "blue"}, "seen": {3}, "frozen": frozenset({"x"}),
        "__r1kit_type__": "tuple", "items": [[1, 2]], "plain": [1, [2, (3,)]], "flag": True, "none": None}}
    back = decode_record(encode_record("arc_agi", {"sizes": (1, 2)}, entry))
    assert back["entry"] == entry and back["options"] == {"sizes": (1, 2)}
    assert type(back["entry"]["metadata"]["grid"][0]) is tuple and type(back["entry"]["metadata"]["plain"][1]) is list
    for bad in [{"a": object()}, {"a": _nested(100)}]:
        with pytest.raises(UnfaithfulRecord):
            encode_record("x", {}, {"question": "q", "answer": "a", "metadata": bad})


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", ["[" * 100_000 + "]" * 100_000, "x" * (5 << 20)])
def test_records_nested_too_deep_or_too_long_are_unjudgeable_not_errors(bad):
    from r1kit.rewards.gym import score_completions

    assert score_completions(["1"], [bad]) == [None]


def test_foil_report_is_checked_and_words_are_whole():
    """The child's report of the foils told apart is read into at most FOILS (pool index, score in [0, 1)) pairs,
    whatever it wrote; a gold counts as carried only as a whole word."""
    server = server_module()
    assert server.parse_told_apart(server.told_apart_line([(0, 0.0), (5, 1 / 3)])) == [(0, 0.0), (5, 0.333333)]
    assert server.parse_told_apart("9:0.1,-1:0.1,2:nan,3:1.0,x:y,4:0.5,6:0.2,7:0.2") == []
    assert server.parse_told_apart("1:0.1,2:0.2,3:0.3,4:0.4") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert server.has_word("off on undetermined", "on") and server.has_word("6 5 7", "7")
    assert not server.has_word("15", "5") and not server.has_word("answer", "a") and not server.has_word("x", "")


def test_an_answer_in_look_alike_digits_is_wrong():
    """reasoning-gym's scorers read fullwidth or Arabic-Indic digits as digits (Python's float does), so the gold
    written in them scored 1.0 (found by the exploit probes); ASCII digits stay the only ones read."""
    pytest.importorskip("reasoning_gym")
    from r1kit.rewards.gym import extract_answer, score_completions

    record = {"generator": "chain_sum", "options": {},
              "entry": {"question": "7 - 11 =", "answer": "-4", "metadata": {}}}
    lookalikes = ["<answer>-\uff14</answer>", "<answer>-\u0664</answer>", "The answer is -\U0001d7d2."]
    assert score_completions(["<answer>-4</answer>", *lookalikes], [record] * 4, timeout=3) == [1.0, 0.0, 0.0, 0.0]
    assert extract_answer("so -\uff14, or rather 5", "-4") == "5"  # the last ASCII number
