"""How r1kit knows a reward is lying, during training: the independent judges per reward family (`independent`), a
second opinion on sampled completions (`second_opinion`), tripwires over windows of steps (`tripwires`: warn, stop,
roll back), what the trainer's reward tap hands on and when unjudged rows stop a run (`rewardtap`), and the replies the
exploit probes send (`probe_replies`; the probes themselves are the `r1kit probe-rewards` command, `r1kit.probes`).

May import: `r1kit.judging`, `r1kit.rewards`, `r1kit.sandbox`, `r1kit.state` and the foundation modules; never the
recipe's schema (which reads its wire and judge names) or anything above it.
"""
