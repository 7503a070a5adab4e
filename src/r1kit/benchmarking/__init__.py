"""Measuring a model on questions with known answers: the one benchmark registry (`benchmarks`), the judges that score
benchmark answers (`judges`), generation for evaluation and pass-rate filtering (`generation`: vLLM when it can run,
transformers otherwise), greedy held-out accuracy graded as the rewards grade (`heldout`), and the trainer callbacks
that evaluate during training or publish checkpoints (`callbacks`: heldout_accuracy, evaluate_benchmarks,
push_to_hub_revision).

May import: `r1kit.rewards`, `r1kit.sandbox`, `r1kit.sources` and the foundation modules. The commands
(`r1kit evaluate`, `r1kit pass-rate`, `r1kit decontaminate`) and the run read it.
"""
