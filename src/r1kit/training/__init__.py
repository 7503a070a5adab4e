"""The training step: `trainer` (`R1Trainer`, TRL's GRPOTrainer with the reward tap, dynamic sampling and the
curriculum), `curriculum` (their pure logic), the exact training passes (`trainpass`: length buckets; `packing`: one
packed row; `passchoice`: which pass, measured on the device), generation for training (`rollouts`: asynchronous
rollouts without a trainer; `generators`: where rollouts come from, the policy's weights to vLLM, and the trainer's
side of async rollouts; `weightsync`: the weights one gathered module at a time) and tool use (`tools`: the jailed
Python interpreter and users' tools).

`trainer` and `generators` are the only modules on TRL's private API (pinned by tests/test_trl_internals.py).
May import: `r1kit.config`, `r1kit.integrity`, `r1kit.launching`, `r1kit.sandbox`, `r1kit.vllm_front` and the
foundation modules; not the run (which drives it) nor the commands.
"""
