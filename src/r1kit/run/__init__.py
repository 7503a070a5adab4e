"""A run's life, shared by `r1kit grpo` and `r1kit sft`: every check made before anything loads, in order
(`preflight`), the output folder's lock, signals, stops and the resume decision (`lifecycle`), and prepare -> train ->
finish with the files a run writes (`pipeline`).

May import: everything below it (the recipe, the data and models, training, benchmarking, integrity, the run's
state); only the commands import it.
"""
