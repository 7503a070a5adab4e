"""Small things a recipe said that r1kit did not hear, or heard wrong: a sandbox router nothing uses (said now), the
key a Hub push error names, and the dataset a model card links."""

from __future__ import annotations

import warnings

import pytest

from r1kit.config.recipe import parse_args
from r1kit.errors import ConfigError
from r1kit.hub import check_hub_push
from r1kit.run.pipeline import hub_dataset
from r1kit.run.preflight import warn_unused_routers


def routers_warned(tmp_path, *flags: str) -> list[str]:
    script, _, _ = parse_args(["--output_dir", str(tmp_path), *flags])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_unused_routers(script)
    return [str(w.message) for w in caught]


def test_a_router_nothing_uses_is_said_and_one_in_use_is_not(tmp_path):
    said = routers_warned(tmp_path, "--reward_funcs", "code", "--e2b_router_url", "127.0.0.1:8000")
    assert len(said) == 1 and "e2b_router_url" in said[0] and "code_provider is local" in said[0]
    said = routers_warned(tmp_path, "--reward_funcs", "accuracy", "--morph_router_url", "127.0.0.1:8001")
    assert len(said) == 1 and "morph_router_url" in said[0] and "no reward of accuracy" in said[0]
    assert routers_warned(tmp_path, "--reward_funcs", "code", "--code_provider", "e2b",
                          "--e2b_router_url", "127.0.0.1:8000") == []


def test_a_hub_push_error_names_the_key_that_asked(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as raised:
        check_hub_push("me/filtered", field="output_dataset_name")
    message = str(raised.value)
    assert message.startswith("output_dataset_name: me/filtered") and "unset output_dataset_name" in message
    assert "push_to_hub" not in message
    with pytest.raises(ConfigError, match="push_to_hub: true .*set push_to_hub: false"):
        check_hub_push("me/model")


def test_the_model_card_links_only_a_hub_dataset(tmp_path):
    local = tmp_path / "rows.jsonl"
    local.write_text("{}\n")
    assert [hub_dataset(n) for n in (str(local), "data/rows.jsonl", "./folder", "r1kit:addition",
                                     "reasoning-gym:chain_sum", None)] == [None] * 6
    assert hub_dataset("open-r1/OpenR1-Math-220k") == "open-r1/OpenR1-Math-220k"
