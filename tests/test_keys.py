"""Help and errors before TRL loads: `r1kit grpo -h` / `sft -h` (a usage line, the common keys, pointers), `r1kit
keys` (every key, from a catalogue generated from the schema, which cannot go stale unnoticed), and the mistakes a
training command catches without importing TRL: a missing or unreadable recipe, YAML syntax, unknown keys, unknown
reward names. "Fast" is asserted as what it means here, TRL never imported, not as seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.config import keys
from r1kit.config.recipe import key_catalogue, parse_args
from r1kit.errors import ConfigError
from tests.helpers import raises_naming

REPO = Path(__file__).resolve().parents[1]
# Runs the r1kit command in a fresh interpreter, then says whether TRL (or torch) was imported on the way.
PROBE = ("import sys\nfrom r1kit.cli import main\ncode = main(sys.argv[1:])\n"
         "print('IMPORTED', 'trl' in sys.modules, 'torch' in sys.modules, file=sys.stderr)\nsys.exit(code)")


def r1kit(*argv: str, cwd: Path = REPO) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr without the probe's line, whether TRL or torch was imported)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    err_lines = proc.stderr.splitlines()
    probe = next(line for line in err_lines if line.startswith("IMPORTED"))
    err = "\n".join(line for line in err_lines if not line.startswith("IMPORTED"))
    return proc.returncode, proc.stdout, err, probe != "IMPORTED False False"


def test_the_catalogue_is_the_schemas():
    """keys.json lists what the schema has: same keys, types, defaults and lines (on the versions it was made with;
    with other versions of transformers and TRL the pre-check leaves keys to the full parser)."""
    if not keys.catalogue_applies():
        pytest.skip(f"keys.json was generated for {keys.catalogue()['versions']}, here {keys.installed_versions()}")
    fresh, stored = json.loads(json.dumps(key_catalogue())), keys.catalogue()
    for command, entries in fresh["commands"].items():
        differ = [k["name"] for k in entries if k not in stored["commands"][command]]
        gone = [k["name"] for k in stored["commands"][command] if k not in entries]
        assert not differ and not gone, (f"keys.json is stale for r1kit {command} (new or changed: {differ}; gone: "
                                         f"{gone}): python -c 'from r1kit.config.recipe import write_key_catalogue; "
                                         "write_key_catalogue()'")
    assert fresh == stored  # the order too


@pytest.mark.parametrize("command", ["grpo", "sft"])
def test_help_is_a_usage_line_the_common_keys_and_pointers_without_trl(command):
    code, out, err, imported = r1kit(command, "-h")
    assert code == 0 and not imported and err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"usage: r1kit {command} ") and "--dry-run" in lines[0]
    listed = [line.split()[0] for line in lines if line.startswith("  ") and line.split()[0] in keys.COMMON_KEYS[command]]
    assert listed == list(keys.COMMON_KEYS[command])
    assert f"r1kit keys {command}" in out and "--dry-run" in out
    assert "run.prepare" not in out and "preflight" not in out  # no developer docstring


def test_keys_lists_every_key_with_type_default_and_line():
    code, out, err, imported = r1kit("keys", "sft")
    assert code == 0 and not imported
    names = [line.split()[0] for line in out.splitlines()[2:] if line.startswith("  ")]
    assert names == [k["name"] for k in keys.keys("sft")]
    code, out, _, _ = r1kit("keys", "grpo", "reward")
    assert code == 0 and "reward_funcs" in out and "learning_rate" not in out


GRPO_ERRORS = [  # (case, recipe text or None for no file, flags, what the one line says)
    ("missing recipe", None, ["--config", "missing.yaml"], "recipe not found: missing.yaml"),
    ("YAML syntax", "a: [1\n", [], "is not valid YAML"),
    ("not a mapping", "- a\n- b\n", [], "must contain a YAML mapping"),
    ("unknown key in the file", "learning_rat: 1e-5\n", [], "unknown key 'learning_rat' in recipe.yaml; did you mean "
                                                             "'learning_rate'?"),
    ("unknown key on the line", "max_steps: 2\n", ["--lerning_rate", "3"], "did you mean 'learning_rate'?"),
    ("unknown reward in the file", "reward_funcs: [acuracy]\n", [], "'acuracy' (did you mean 'accuracy'?)"),
    ("unknown reward on the line", "max_steps: 2\n", ["--reward_funcs", "accuracy", "formt"], "'formt' (did you mean "
                                                                                             "'format'?)"),
    ("env block", "env: {FOO: [1]}\n", [], "env: FOO takes a string"),
    ("not a number", "learning_rate: abc\n", [], "learning_rate in recipe.yaml must be a number"),
    ("not a whole number", "max_steps: 2\n", ["--max_steps", "2.5"], "max_steps on the command line must be a whole"),
    ("not true/false", "max_steps: 2\n", ["--use_peft", "maybe"], "use_peft on the command line: invalid true/false"),
    ("not a choice (TRL's)", "loss_type: dapoo\ndataset_name: open-r1/OpenR1-Math-220k\n", [], "(did you mean 'dapo'?)"),
    ("not a choice (an enum)", "max_steps: 2\n", ["--lr_scheduler_type", "cosin"], "(did you mean 'cosine'?)"),
    ("missing dataset path", "dataset_name: ./missing.jsonl\n", [], "dataset_name: ./missing.jsonl does not exist"),
    ("missing model path", "max_steps: 2\n", ["--model_name_or_path", "/no/such/model"], "does not exist"),
    ("world size launch", None, ["--world-size", "2", "--config", "missing.yaml"], "recipe not found"),
]


# The cases the pre-check answers from the key catalogue, and the key each names: where the catalogue's transformers
# and TRL are not the installed ones (CI's low-end lane), the full parser answers them, after TRL loads.
FROM_THE_CATALOGUE = {"unknown key in the file": "learning_rat", "unknown key on the line": "lerning_rate",
                      "not a number": "learning_rate", "not a whole number": "max_steps", "not true/false": "use_peft",
                      "not a choice (TRL's)": "loss_type", "not a choice (an enum)": "lr_scheduler_type"}


@pytest.mark.parametrize("case,text,flags,says", GRPO_ERRORS, ids=[c[0] for c in GRPO_ERRORS])
def test_recipe_mistakes_answer_in_one_line_before_trl_loads(tmp_path, case, text, flags, says):
    if text is not None:
        (tmp_path / "recipe.yaml").write_text(text)
        flags = ["--config", "recipe.yaml", *flags]
    code, out, err, imported = r1kit("grpo", *flags, cwd=tmp_path)
    if case in FROM_THE_CATALOGUE and not keys.catalogue_applies():
        last = err.splitlines()[-1] if err else ""
        assert code == 2 and last.startswith("r1kit: error: ") and FROM_THE_CATALOGUE[case] in last, err
        return
    assert code == 2 and not imported, err
    assert err.count("\n") == 0 and err.startswith("r1kit: error: ") and says in err, err


def test_an_unknown_reward_is_said_before_any_warning(tmp_path):
    """Before: a 5-line warning about Open-R1's moved defaults came first and buried the error."""
    (tmp_path / "recipe.yaml").write_text("reward_funcs: [acuracy]\ndataset_name: x.jsonl\nbeta: 0.04\n")
    code, _, err, _ = r1kit("grpo", "--config", "recipe.yaml", cwd=tmp_path)
    assert code == 2 and err.splitlines()[0].startswith("r1kit: error: unknown reward function 'acuracy'"), err


def test_with_other_versions_installed_unknown_keys_are_left_to_the_full_parser(monkeypatch, tmp_path):
    """A key the catalogue lacks may exist in another transformers: the pre-check does not refuse it."""
    (tmp_path / "r.yaml").write_text("some_new_trl_key: 1\n")
    monkeypatch.setattr(keys, "catalogue_applies", lambda: False)
    assert keys.precheck("grpo", ["--config", str(tmp_path / "r.yaml")]) is False
    monkeypatch.setattr(keys, "catalogue_applies", lambda: True)
    with raises_naming("some_new_trl_key"):
        keys.precheck("grpo", ["--config", str(tmp_path / "r.yaml")])


def test_values_the_full_parser_takes_pass_the_precheck(tmp_path):
    (tmp_path / "r.yaml").write_text("save_strategy: no\nlearning_rate: 1.0e-5\nmax_steps: 4\nuse_peft: true\n"
                                     "hub_model_id: null\nloss_type: dapo\n")
    assert keys.precheck("grpo", ["--config", str(tmp_path / "r.yaml"), "--bf16", "false", "--max_steps=8",
                                  "--hub_model_id", "null", "--report_to", "none"]) is False


def test_open_r1_renamed_keys_pass_the_precheck(tmp_path):
    (tmp_path / "r.yaml").write_text(json.dumps({"torch_dtype": "float32", "max_prompt_length": 64, "env": {},
                                                 "defaults": "open-r1"}))
    assert keys.precheck("grpo", ["--config", str(tmp_path / "r.yaml"), "--warmup_ratio", "0.1"]) is False


def test_null_on_the_command_line_is_none(tmp_path):
    """`--key null` was read as the string "null"."""
    script, training, _ = parse_args(["--output_dir", str(tmp_path), "--hub_model_id", "null", "--dataset_config=null"])
    assert training.hub_model_id is None and script.dataset_config is None
    with raises_naming("learning_rate", "cannot be None"):
        parse_args(["--output_dir", str(tmp_path), "--learning_rate", "null"])


def test_an_unimportable_reward_is_one_line(tmp_path):
    from r1kit.rewards import resolve_import_path

    for path, says in [("no_such_module_r1kit:f", "cannot import reward function 'no_such_module_r1kit:f'"),
                       ("tests.rewards_for_tests:nope", "has no function 'nope'"),
                       ("tests.rewards_for_tests:os", "not a function")]:
        with pytest.raises(ConfigError, match=says):
            resolve_import_path(path)
