"""Tools and environments the tool-use tests load by import path (`tools: [tests.tools_for_tests:...]`)."""

from __future__ import annotations

import random


def add(a: int, b: int) -> int:
    """Adds two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class RandomStart:
    """An environment that samples its starting state in `reset`, as many do (a puzzle, a board): the members of a
    group must still start alike."""

    starts: list[int] = []  # every start drawn, in order (the test reads them)

    def reset(self, **kwargs) -> None:
        self.start = random.randint(0, 10**9)
        RandomStart.starts.append(self.start)

    def look(self) -> str:
        """Returns the hidden starting number."""
        return str(self.start)
