"""The package's shape, read from its source: imports point one way (no cycle, each module imports only modules
the layout in docs/development.md lists above it), a function-local import of an r1kit module only defers a heavy
library and says which, and the layout names every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "r1kit"
IN_JAIL = SRC / "sandbox" / "scripts"  # programs run inside the jail, never imported by r1kit


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if IN_JAIL in path.parents or path.name == "__main__.py":
            continue
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(node: ast.AST, module: str, known: set[str]) -> set[str]:
    """The r1kit modules an import statement imports (`from r1kit import data` imports the module `r1kit.loading.data`)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if not isinstance(node, ast.ImportFrom) or node.module is None:
        return set()
    base = node.module if node.level == 0 else ".".join(module.split(".")[: -node.level] + [node.module])
    out = {base} if base in known else set()
    return out | {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    graph = {}
    for name, path in found.items():
        tree = ast.parse(path.read_text())
        graph[name] = {t for node in ast.walk(tree) for t in imported(node, name, set(found))} - {name, "r1kit"}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layout_order() -> list[str]:
    """The modules the layout section of docs/development.md names, top to bottom (a package line stands for its
    __init__, its indented lines name its modules)."""
    text = (ROOT / "docs" / "development.md").read_text()
    block = text[text.index("## Layout"):]
    block = block[block.index("```") + 3 : block.index("```", block.index("```") + 3)]
    order, package = [], None
    for line in block.splitlines():
        if line.startswith("src/r1kit/"):
            entry = line.split()[0][len("src/r1kit/"):]
            package = entry.rstrip("/") if entry.endswith("/") else None
            if package:
                order.append(f"r1kit.{package.replace('/', '.')}")
            elif entry.endswith(".py"):
                order.append("r1kit." + entry[:-3].replace("/", "."))
        elif package and line.startswith("    "):
            for name in re.findall(r"(\w+)\.py", re.split(r"\s{2,}", line.strip())[0]):
                order.append(f"r1kit.{package}.{name}")
    return order


def test_no_import_cycle_among_r1kit_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_each_module_imports_only_modules_the_layout_lists_above_it():
    order = layout_order()
    position = {name: i for i, name in enumerate(order)}
    upward = [f"{a} imports {b}" for a, targets in import_graph().items() for b in targets
              if a in position and b in position and position[b] > position[a]
              and not a.startswith(b + ".") and not b.startswith(a + ".")]  # a package and its own modules
    assert upward == []


def test_the_layout_names_every_module():
    listed = set(layout_order())
    assert set(modules()) - {"r1kit"} == listed - {"r1kit"}


def test_function_local_r1kit_imports_only_defer_a_heavy_library_and_say_which():
    undeclared, found = [], modules()
    for name, path in found.items():
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if imported(node, name, set(found)) and "# deferred:" not in lines[node.lineno - 1]:
                    undeclared.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert undeclared == []


def test_moved_modules_answer_to_their_old_names_for_one_release():
    """A user's `from r1kit.trainer import R1Trainer` (or a recipe's import path) keeps working, warned, and gives the
    very module at its new place."""
    import importlib
    import sys

    import pytest

    from r1kit._moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)


def test_the_moved_task_export_command_still_runs_under_its_documented_name(tmp_path):
    """`python -m r1kit.tasks addition ...`, as the docs gave it before the move, still exports the rows, and says
    where the command went."""
    import subprocess
    import sys

    out = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, "-m", "r1kit.tasks", "addition", "--split", "test", "--size", "3",
                           "--output", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 3
    assert "python -m r1kit.sources.tasks" in done.stderr
