"""The docs a person navigates, README.md and docs/*.md, kept true: every relative link and `#anchor` resolves (to a
heading whose GitHub and mkdocs slugs agree), docs/recipe-keys.md is the key catalogue's, every shell block either
runs here (and this test runs it) or says on the line before it why not (`<!-- not run here: REASON -->`), with its
`r1kit` subcommands and repository paths checked all the same, and `mkdocs build --strict` passes where mkdocs is
installed."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from r1kit.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SHELL_LANGUAGES = ("bash", "sh", "console")
NOT_RUN = re.compile(r"^<!--\s*not run here:(.*)-->\s*$")
REPO_FOLDERS = ("recipes/", "benchmarks/", "scripts/", "slurm/", "src/", "tests/", "docs/", ".ci/")
SEPARATORS = {"&&", "||", ";", "|", "&"}


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    before: str  # the line just above the fence

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def reason(self) -> str | None:
        """Why the block is not run here, or None when it runs."""
        marker = NOT_RUN.match(self.before.strip())
        return marker.group(1).strip() if marker else None


def blocks(page: Path) -> list[Block]:
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        opening = re.match(r"^(`{3,})\s*([\w-]*)", lines[i])
        if opening:
            fence, start = opening.group(1), i
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                i += 1
            found.append(Block(page, start + 1, opening.group(2), "\n".join(lines[start + 1 : i]),
                               lines[start - 1] if start else ""))
        i += 1
    return found


def outside_fences(page: Path) -> str:
    """The page without its fenced blocks (fences included)."""
    kept, fence = [], None
    for line in page.read_text().splitlines():
        opening = re.match(r"^(`{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.startswith(fence):
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def prose(page: Path) -> str:
    """The page without fenced blocks and inline code: where its links are read."""
    return re.sub(r"`[^`\n]*`", "", outside_fences(page))


def headings(page: Path) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", outside_fences(page), re.M)]


def heading_text(heading: str) -> str:
    """A heading as rendered: code spans and links reduced to their text, emphasis dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*]", "", text)


def github_slug(heading: str) -> str:
    text = heading_text(heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """Python-Markdown's toc slugify, as mkdocs uses it."""
    text = unicodedata.normalize("NFKD", heading_text(heading)).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """The anchors both renderers give the page's headings (a heading whose two slugs differ cannot be linked to)."""
    return {github_slug(h) for h in headings(page) if github_slug(h) == mkdocs_slug(h)}


def links(page: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose(page))]


# --------------------------------------------------------------------------------------------------------------------
# Links and anchors
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slugs_are_githubs_and_mkdocs():
    heading = "A real model on CPU: SmolLM2-135M-Instruct on reasoning-gym"
    assert github_slug(heading) == mkdocs_slug(heading) == "a-real-model-on-cpu-smollm2-135m-instruct-on-reasoning-gym"
    assert github_slug("Exploit probes: is the reward `lying`?") == "exploit-probes-is-the-reward-lying"
    assert github_slug("a / b") != mkdocs_slug("a / b")  # so neither renderer's anchor counts


def test_every_docs_page_is_in_the_site_navigation():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = [next(iter(entry.values())) for entry in nav]
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md")), "mkdocs.yml's nav and docs/*.md differ"


# --------------------------------------------------------------------------------------------------------------------
# The README's first screen
# --------------------------------------------------------------------------------------------------------------------


def test_the_readme_opens_with_the_demo_then_the_test_command_ci_runs():
    first, second = [b for b in blocks(ROOT / "README.md") if b.language in SHELL_LANGUAGES][:2]
    assert first.text.rstrip().endswith("&& r1kit grpo"), "the README's first command runs the embedded demo"
    steps = [step.strip() for step in second.text.split("&&")]
    assert steps[-1] == "OMP_NUM_THREADS=1 pytest -n auto" and "ruff check" in steps
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install = next(step for step in steps if step.startswith("pip install -e "))
    extras = set(install.split()[-1].strip("'\".[]").split(","))  # '.[dev,reasoning-gym,deepspeed]'
    lane_1 = next((line.split() for line in ci if line.startswith("install .venv ")), [])  # install VENV EXTRAS
    missing = extras - set(lane_1[2].split(",") if len(lane_1) > 2 else ())
    assert extras and not missing, f".ci/run's first lane no longer installs r1kit's extras {sorted(missing)}"
    commands = [line.split("||")[0].strip() for line in ci]  # `command || status=$?`: run, and its status kept
    assert "ruff check" in commands and steps[-1] in commands, ".ci/run no longer runs the README's tests"


# --------------------------------------------------------------------------------------------------------------------
# docs/recipe-keys.md
# --------------------------------------------------------------------------------------------------------------------


def test_the_recipe_keys_page_is_generated_from_the_catalogue():
    spec = importlib.util.spec_from_file_location("gen_docs_keys", ROOT / "scripts" / "gen_docs_keys.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert (DOCS / "recipe-keys.md").read_text() == generator.render(), (
        f"docs/recipe-keys.md is stale (keys.json changed): {generator.COMMAND}")


# --------------------------------------------------------------------------------------------------------------------
# Shell blocks
# --------------------------------------------------------------------------------------------------------------------

SHELL_BLOCKS = [b for page in PAGES for b in blocks(page) if b.language in SHELL_LANGUAGES]
RUN_HERE = [b for b in SHELL_BLOCKS if b.reason is None]


def commands(block: Block) -> list[list[str]]:
    """The block's commands as words: continuation lines joined, comments dropped, split at && || ; | &, leading
    VAR=value assignments dropped; a console block's commands are its `$ ` lines."""
    text = block.text.replace("\\\n", " ")
    lines = text.splitlines()
    if block.language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    found = []
    for line in lines:
        command: list[str] = []
        for word in shlex.split(line, comments=True) + [";"]:
            if word in SEPARATORS:
                while command and re.match(r"^[A-Za-z_]\w*=", command[0]):
                    command.pop(0)
                if command:
                    found.append(command)
                command = []
            else:
                command.append(word)
    return found


def problems(command: list[str]) -> list[str]:
    """What in one command names something that does not exist: an r1kit subcommand, an r1kit module run with
    `python -m` (or a launcher's `-m`), a repository path."""
    found = []
    if command[0] == "r1kit" and len(command) > 1 and not command[1].startswith("-") and command[1] not in COMMANDS:
        found.append(f"r1kit has no subcommand '{command[1]}'")
    for i, word in enumerate(command[:-1]):
        if word == "-m" and command[i + 1].startswith("r1kit"):
            module = command[i + 1]
            if importlib.util.find_spec(module) is None:
                found.append(f"no module {module}")
            elif module == "r1kit" and i + 2 < len(command) and command[i + 2] not in COMMANDS:
                found.append(f"r1kit has no subcommand '{command[i + 2]}'")
    for word in command:
        path = word.split("=", 1)[-1] if word.startswith("--") else word
        if path.startswith(REPO_FOLDERS) and "..." not in path and not (ROOT / path).exists():
            found.append(f"no such path {path}")
    return found


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_a_shell_block_not_run_says_why_and_names_what_exists(block):
    if block.reason is not None:
        assert block.reason, f"{block}: say why the block is not run here: <!-- not run here: REASON -->"
    assert commands(block), f"{block}: no command found"
    wrong = [f"{' '.join(c)}: {p}" for c in commands(block) for p in problems(c)]
    assert not wrong, f"{block}: " + "; ".join(wrong)


def test_the_marker_needs_a_reason():
    bare = Block(ROOT / "README.md", 1, "bash", "r1kit grpo", "<!-- not run here: -->")
    assert bare.reason == ""
    assert Block(ROOT / "README.md", 1, "bash", "r1kit grpo", "<!-- not run here: needs a GPU -->").reason == (
        "needs a GPU")
    assert problems(["r1kit", "gpro"]) and problems(["python", "-m", "r1kit.nothing"])
    assert problems(["r1kit", "grpo", "--config", "recipes/none.yaml"]) and not problems(["r1kit", "grpo"])


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN_HERE, ids=str)
def test_a_shell_block_not_marked_runs_here(block):
    """The blocks the docs say run here do, from the repository's root, with this interpreter's r1kit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    script = "\n".join(" ".join(shlex.quote(w) for w in c) for c in commands(block)) if block.language == "console" \
        else block.text
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{block} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


# --------------------------------------------------------------------------------------------------------------------
# The site
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mkdocs_builds_the_site_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
