"""Exploit probes (`r1kit.probes`): a reward that pays for a hack is caught before training, in the dry run, at the
start of a run and by `r1kit probe-rewards`; acknowledging it lets the run go on; the built-in rewards of the demo
pass every probe and pay every gold full marks."""

from __future__ import annotations

import json

import pytest

from r1kit.cli import main
from r1kit.config.recipe import parse_args
from r1kit.probes import COPY, GENERIC, GOLD, check_rewards, load_train_split, probe_rewards, raise_on_failures, table
from r1kit.sandbox.jail import probe as jail_problem
from tests.helpers import descendants, raises_naming, tiny_recipe, write_recipe

PLANTED = "tests.rewards_for_tests:gold_anywhere"


def model_folder(tmp_path):
    """A model folder that passes the pre-load path check but cannot load: proof that the probes come first."""
    model = tmp_path / "config-only-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return model


def recipe(tmp_path, math_jsonl, **keys) -> dict:
    return tiny_recipe(model_folder(tmp_path), math_jsonl, tmp_path / "out", **{"probe_rewards": True, **keys})


def results_of(path) -> dict:
    script_args, training_args, _ = parse_args(["--config", str(path)])
    found = probe_rewards(script_args, training_args, load_train_split(script_args, training_args))
    return {(r.reward, r.probe): r for r in found}


def test_a_reward_that_pays_for_the_gold_anywhere_is_flagged_by_the_hedge_and_outside_probes(tmp_path, math_jsonl):
    results = results_of(write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, reward_funcs=[PLANTED])))
    for probe in ("hedge", "outside"):
        line = results[(PLANTED, probe)]
        assert (line.got, line.bound, line.verdict, line.stops) == (1.0, 0.0, "ABOVE BOUND", True)
    assert results[(PLANTED, "empty")].verdict == "ok" and results[(PLANTED, GOLD)].got == 1.0


def test_the_planted_reward_stops_the_dry_run_and_the_run_before_the_model_loads(tmp_path, math_jsonl, capsys):
    path = write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, reward_funcs=["accuracy", PLANTED]))
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    for word in (PLANTED, "hedge", "outside", "probe_acknowledged", "probe_rewards"):
        assert word in err, word
    assert "accuracy pays" not in err
    # A run stops at the same place: before its (unloadable) model, so the error is the probes', not the model's.
    assert main(["grpo", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "reward probes" in err and f"{PLANTED}:hedge" in err and "config.json" not in err


def test_acknowledging_the_probes_lets_the_dry_run_pass_and_says_so(tmp_path, math_jsonl, capsys):
    keys = dict(reward_funcs=[PLANTED], probe_acknowledged=[f"{PLANTED}:hedge", f"{PLANTED}:outside"])
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, **keys))),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    acknowledged = [line.split()[1] for line in out.splitlines() if line.startswith(PLANTED) and "acknowledged" in line]
    assert acknowledged == ["hedge", "outside"] and "rewards probed" in out
    # Only what is acknowledged passes: the hedge alone leaves the outside probe stopping the run.
    keys["probe_acknowledged"] = [f"{PLANTED}:hedge"]
    assert main(["grpo", "--config", str(write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, **keys))),
                 "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{PLANTED}:outside" in err and f"{PLANTED}:hedge'" not in err


def test_probe_rewards_false_skips_them(tmp_path, math_jsonl, capsys):
    path = write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, reward_funcs=[PLANTED], probe_rewards=False))
    assert main(["grpo", "--config", str(path), "--dry-run"]) == 0
    assert "rewards probed" not in capsys.readouterr().out


def test_an_acknowledgement_must_name_a_configured_reward_and_a_probe(tmp_path, math_jsonl):
    for entry in ("accuracy:hedgy", f"{PLANTED}:hedge"):
        path = write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, probe_acknowledged=[entry]))
        with raises_naming("probe_acknowledged"):
            results_of(path)


def test_a_reward_that_raises_on_a_probe_stops_and_one_that_judges_nothing_does_not(tmp_path, math_jsonl):
    rewards = ["tests.rewards_for_tests:raises_on_empty", "tests.rewards_for_tests:judges_nothing"]
    path = write_recipe(tmp_path, **recipe(tmp_path, math_jsonl, reward_funcs=rewards))
    results = results_of(path)
    raising = results[(rewards[0], "empty")]
    assert raising.stops and raising.verdict.startswith("raised IndexError")
    assert [results[(rewards[0], p)].verdict for p in GENERIC if p != "empty"] == ["ok"] * (len(GENERIC) - 1)
    assert {r.verdict for (name, probe), r in results.items()
            if name == rewards[1] and probe != GOLD and not r.verdict.startswith("skipped")} == {"not judged"}
    assert results[(rewards[1], GOLD)].verdict.startswith("not judged on sampled rows")
    assert not any(r.stops for (name, _), r in results.items() if name == rewards[1])


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory) -> dict:
    """The demo recipe's rewards (accuracy, format, tag_count on r1kit:addition), probed once."""
    out = tmp_path_factory.mktemp("demo_probes")
    script_args, training_args, _ = parse_args(["--output_dir", str(out)])  # no --config: the embedded demo recipe
    assert script_args.dataset_name == "r1kit:addition" and {"accuracy", "format"} <= set(script_args.reward_funcs)
    found = check_rewards(script_args, training_args, load_train_split(script_args, training_args))
    return {(r.reward, r.probe): r for r in found}


def test_the_demo_rewards_pass_every_probe_and_pay_every_gold_full_marks(demo_results):
    for (reward, probe), line in demo_results.items():
        skipped = probe in ("premise", "premises", "first_quote") and line.verdict.startswith("skipped")
        assert not line.stops and (line.verdict == "ok" or skipped), (reward, probe, line)  # `499+296=` has no premise
        if probe == GOLD:
            assert line.got == line.bound == 1.0, (reward, line)
    assert {p for r, p in demo_results if r == "accuracy"} == {*GENERIC, *COPY, GOLD}
    # The question's numbers copied (`\\boxed{499 296}`, which math-verify reads as 499 + 296) and its expression
    # copied (`499+296`) earn nothing.
    assert demo_results[("accuracy", "numbers")].got == demo_results[("accuracy", "last_sentence")].got == 0.0
    # The format rewards pay the format-only reply (their promise is the shape) and nothing without the shape.
    assert demo_results[("format", "format_only")].got == 1.0 and demo_results[("format", "empty")].got == 0.0
    assert demo_results[("accuracy", "format_only")].got == 0.0


def test_the_command_prints_the_table(tmp_path, capsys):
    assert main(["probe-rewards", "--output_dir", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["reward", "probe", "bound", "got", "verdict"]
    gold = next(line for line in lines if line.split()[:2] == ["accuracy", "gold"])
    assert gold.split()[2:] == [">=", "1", "1", "ok"]
    hedge = next(line for line in lines if line.split()[:2] == ["accuracy", "hedge"])
    assert hedge.split()[2:] == ["<=", "0", "0", "ok"]


CODE_ROWS = [  # two tests with different outputs each, then a row with a single test (a constant passes it)
    {"problem": "Print the sum of two numbers.",
     "verification_info": {"language": "python", "test_cases": [{"input": "1 2\n", "output": "3"},
                                                                 {"input": "2 5\n", "output": "7"}]}},
    {"problem": "Print the product of two numbers.",
     "verification_info": {"language": "python", "test_cases": [{"input": "2 3\n", "output": "6"},
                                                                 {"input": "4 5\n", "output": "20"}]}},
    {"problem": "Print hello.", "verification_info": {"language": "python", "time_limit": 20,
                                                      "test_cases": [{"input": "", "output": "hello"}]}},
]


@pytest.mark.slow
@pytest.mark.skipif(jail_problem() is not None, reason=f"no jail here: {jail_problem()}")
def test_code_probes_run_bounded_in_the_jail_and_flag_a_row_a_constant_passes(tmp_path):
    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CODE_ROWS))
    keys = recipe(tmp_path, data, reward_funcs=["binary_code", "code"], parallel_code_exec_per_proc=2)
    script_args, training_args, _ = parse_args(["--config", str(write_recipe(tmp_path, **keys))])
    before = descendants()
    results = {(r.reward, r.probe): r for r in
               probe_rewards(script_args, training_args, load_train_split(script_args, training_args))}
    for reward in ("binary_code", "code"):
        for probe in ("exit0", "always_equal", "infinite_loop", "read_tests", "empty", "prompt_echo", "format_only",
                      "huge"):
            line = results[(reward, probe)]
            assert line.verdict == "ok" and line.got == 0.0, (reward, probe, line)
    # The single-test row is passed by printing its output: binary_code pays 1.0 there (above 0.5), code too.
    assert results[("binary_code", "print_expected")].verdict == "ABOVE BOUND"
    assert results[("code", "print_expected")].got == 1.0
    assert descendants() <= before  # no program, jail or loop outlives its probe
    with raises_naming("binary_code:print_expected", "code:print_expected", "probe_acknowledged"):
        raise_on_failures(list(results.values()))
    assert "print_expected" in table(list(results.values()))


CF_ROWS = [  # Codeforces rows (open-r1/codeforces' columns): official tests inline, a contest id that would find more
    {"problem": "Print the sum of two numbers.", "id": "2053/A", "contest_id": 2053, "language": "python",
     "time_limit": 2.0, "official_tests": [{"input": "1 2\n", "output": "3"}, {"input": "4 5\n", "output": "9"},
                                           {"input": "0 0\n", "output": "0"}]},
    {"problem": "Print YES.", "id": "2053/B", "contest_id": 2053, "language": "python", "time_limit": 1.0,
     "official_tests": [{"input": "1\n", "output": "YES"}, {"input": "2\n", "output": "YES"}]},
]


@pytest.mark.slow
@pytest.mark.skipif(jail_problem() is not None, reason=f"no jail here: {jail_problem()}")
def test_cf_code_is_probed_on_its_official_tests_and_a_constant_answer_is_flagged(tmp_path):
    data = tmp_path / "cf.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CF_ROWS))
    keys = recipe(tmp_path, data, reward_funcs=["cf_code"], code_eval_scoring_mode="partial")
    script_args, training_args, _ = parse_args(["--config", str(write_recipe(tmp_path, **keys))])
    before = descendants()
    results = {r.probe: r for r in probe_rewards(script_args, training_args, load_train_split(script_args, training_args))
               if r.reward == "cf_code"}
    for probe in ("exit0", "always_equal", "infinite_loop", "read_tests", "empty", "prompt_echo", "huge"):
        assert results[probe].verdict == "ok" and results[probe].got <= 0.0, (probe, results[probe])
    # "YES" for every test: printing the first test's output passes them all (partial 1.0, above its bound 0.5).
    assert results["print_expected"].bound == 0.5 and results["print_expected"].verdict == "ABOVE BOUND"
    assert descendants() <= before
