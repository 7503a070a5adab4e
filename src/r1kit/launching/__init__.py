"""How a run's processes were started, and what they got: `r1kit launch LAUNCHER ...` and `--world-size N` with
r1kit's exit codes (`launch`), and sharding as launched (`sharding`: FSDP2 and ZeRO checked against the launch, made
to run on CPU ranks, launches that silently give less refused, per-rank bytes measured).

May import: the foundation modules (`r1kit.errors`, `r1kit.machine`, `r1kit.console`). The recipe's schema and the
trainer read it.
"""
