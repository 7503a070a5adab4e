"""What a run records of itself, on disk: the run's contract and the one table of what may change on resume
(`contract`), its ledger of tripwire decisions written before they are acted on (`ledger`), and the resume policy with
checkpoint verification (`checkpoints`).

May import: the foundation modules (`r1kit.errors`, `r1kit.credentials`, `r1kit.records`). The recipe's schema, the
integrity checks and the run's life read it.
"""
