"""What a run does not say: the tied-head "missing keys" warning a resume caused (a tied LM head is stored once), and
the rewards' once-per-run warnings that the exploit probes' own replies used to trigger (and use up)."""

from __future__ import annotations

import logging

from r1kit.rewards.text import _LOGGED, log_once, probing
from r1kit.run.pipeline import TiedKeysAreNotMissing, tied_names


def tiny_model(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("transformers.trainer", logging.WARNING, __file__, 1, message, None, None)


def test_a_missing_tied_head_is_not_said_and_any_other_missing_key_is():
    model = tiny_model(tied=True)
    assert tied_names(model) == {"model.embed_tokens.weight", "lm_head.weight"}
    quiet = TiedKeysAreNotMissing(model)
    prefix = "There were missing keys in the checkpoint model loaded: "
    assert not quiet.filter(record(prefix + "['lm_head.weight']."))
    assert quiet.filter(record(prefix + "['lm_head.weight', 'model.norm.weight']."))
    assert quiet.filter(record("Some other warning"))
    assert TiedKeysAreNotMissing(tiny_model(tied=False)).filter(record(prefix + "['lm_head.weight']."))


def test_a_warning_met_while_probing_is_debug_and_still_said_once_in_training(caplog):
    logger = logging.getLogger("r1kit.rewards.test_quiet")
    _LOGGED.discard((logger.name, "constant"))
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        with probing():
            log_once(logger, "constant", "an answer was not specific to its question")
        log_once(logger, "constant", "an answer was not specific to its question")
        log_once(logger, "constant", "an answer was not specific to its question")
    levels = [(r.levelno, r.getMessage().startswith("(a reward probe's reply)")) for r in caplog.records]
    assert levels == [(logging.DEBUG, True), (logging.WARNING, False)]
