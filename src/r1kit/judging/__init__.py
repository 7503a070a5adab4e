"""Reading a completion's final answer and judging it without any reward's scorer.

Owns: `answers` (the final answer, read from a completion's end and normalised), `mathjudge` (a math judge of its own:
parser and evaluator, no math-verify, no sympy) and `copies` (answers copied from the question, refused and probed).
May import: nothing of r1kit but these three modules, so that the independent judges stay independent of the rewards
they check (the rewards, the integrity checks and the probes import it).
"""
