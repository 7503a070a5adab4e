"""Recipes are read within bounds: an alias bomb, deep nesting, a huge value or document, a recursive alias or an
endless file is refused in one line naming where, before anything is expanded; `env:` takes strings; the variables
that change which code processes load are applied but named. Hostile inputs run in a process of their own, bounded
by a timeout, and leave the environment as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from r1kit.config import recipe as recipes
from r1kit.config.recipe import apply_env, env_block, load_recipe, loader_variables_line
from r1kit.config.yaml_limits import MAX_DEPTH, MAX_DOCUMENT_CHARS, MAX_STRING_CHARS, load_yaml
from tests.helpers import raises_naming

ROOT = Path(__file__).resolve().parents[1]


def alias_bomb(levels: int = 10, indent: str = "") -> str:
    """A billion laughs: each level lists the one before 9 times (10 levels stand for 9**10 strings)."""
    lines = [f'{indent}l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_the_env_block_is_refused_at_once_by_a_dry_run(tmp_path, tiny_model_dir, math_jsonl):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(f"model_name_or_path: {tiny_model_dir}\ndataset_name: {math_jsonl}\nenv:\n"
                      + alias_bomb(indent="  "))
    before = dict(os.environ)
    done = subprocess.run([sys.executable, "-m", "r1kit.cli", "grpo", "--config", str(recipe), "--dry-run"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("r1kit: error:") and "line " in error and "alias" in error, error
    assert dict(os.environ) == before


@pytest.mark.parametrize("document, words", [
    (alias_bomb(), ["line", "alias"]),
    ("base: &b {k: [a, b, c, d, e, f, g, h]}\n" + "".join(f"m{i}: &m{i} {{<<: *{'b' if i == 0 else f'm{i - 1}'}, "
                                                          f"x{i}: [*{'b' if i == 0 else f'm{i - 1}'}]}}\n"
                                                          for i in range(40)), ["line", "alias"]),  # merge keys
    ("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n", ["line", "1"]),
    ("a: &a [1, *a]\n", ["line", "1", "*a"]),
    ("system_prompt: " + "x" * (MAX_STRING_CHARS + 1) + "\n", ["line", "1"]),
    ("a: 1\n" + "#" * MAX_DOCUMENT_CHARS + "\n", ["recipe"]),
    ("a: [b\n", ["YAML"]),
])
def test_documents_past_the_bounds_are_refused_naming_where(tmp_path, document, words):
    path = tmp_path / "recipe.yaml"
    path.write_text(document)
    with raises_naming(*words):
        load_recipe(path)


def test_an_endless_file_is_refused_not_read_for_ever():
    with raises_naming("recipe"):
        load_recipe("/dev/zero")


def test_yaml_on_the_command_line_is_bounded_too(tmp_path, tiny_model_dir, math_jsonl):
    from r1kit.config.recipe import parse_args

    bomb = "{" + alias_bomb().replace("\n", ", ").rstrip(", ") + "}"
    with raises_naming("line", "alias"):
        parse_args(["--model_name_or_path", str(tiny_model_dir), "--dataset_name", str(math_jsonl),
                    "--dataset_options", bomb])


def test_ordinary_yaml_reads_as_before():
    assert load_yaml("a: &x {k: v}\nb: {<<: *x, j: 1}\nc: [*x, *x]\n", "r") == {
        "a": {"k": "v"}, "b": {"k": "v", "j": 1}, "c": [{"k": "v"}, {"k": "v"}]}
    for path in [*ROOT.glob("recipes/**/*.yaml"), *ROOT.glob("src/r1kit/recipes/*.yaml")]:
        load_recipe(path)


@pytest.mark.parametrize("value, words", [
    (["a", "b"], ["env", "FOO", "string"]),
    ({"a": 1}, ["env", "FOO", "string"]),
    (True, ["env", "FOO", "string"]),
    (None, ["env", "FOO", "string"]),
    ("a\0b", ["env", "FOO", "NUL"]),
])
def test_env_takes_strings_only(value, words):
    with raises_naming(*words):
        env_block({"env": {"FOO": value}})


def test_env_names_must_be_variable_names_and_the_vllm_secret_never_comes_from_a_recipe():
    with raises_naming("env"):
        env_block({"env": {"1BAD": "x"}})
    with raises_naming("env", "R1KIT_VLLM_SECRET", "R1KIT_VLLM_SECRET_FILE"):
        env_block({"env": {"R1KIT_VLLM_SECRET": "0123456789abcdef0123"}})
    assert env_block({"env": {"OMP_NUM_THREADS": 1, "R1KIT_VLLM_SECRET_FILE": "~/.vllm-secret"}}) == {
        "OMP_NUM_THREADS": "1", "R1KIT_VLLM_SECRET_FILE": "~/.vllm-secret"}


def test_variables_that_change_how_code_loads_are_applied_and_named(monkeypatch, caplog):
    for name in ("LD_PRELOAD", "PYTHONPATH", "R1KIT_TEST_PLAIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(recipes, "APPLIED_LOADER_VARIABLES", [])
    apply_env({"R1KIT_TEST_PLAIN": "1"})
    assert loader_variables_line() is None
    apply_env({"LD_PRELOAD": "/nonexistent/libnothing.so", "PYTHONPATH": "/somewhere", "R1KIT_TEST_PLAIN": "1"})
    assert os.environ["LD_PRELOAD"] == "/nonexistent/libnothing.so" and os.environ["PYTHONPATH"] == "/somewhere"
    assert "LD_PRELOAD, PYTHONPATH" in loader_variables_line()
    assert "LD_PRELOAD, PYTHONPATH" in caplog.text and "R1KIT_TEST_PLAIN" not in caplog.text
