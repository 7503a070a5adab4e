"""A regular install carries what runs: the wheel holds every file of the package, and an installed r1kit (not the
checkout) checks the demo recipe and finds the Slurm evaluation script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_SOURCE_NAMES = shutil.ignore_patterns(".git", "build", "dist", "outputs", "data", "*.egg-info", "__pycache__",
                                          ".pytest_cache", ".ruff_cache", ".hypothesis")


def not_source(folder: str, names: list[str]) -> set[str]:
    """What the copy leaves out: build and run outputs, caches, and every virtual environment whatever its name (CI's
    .venv-low holds 3.6 GB of vLLM, which the copy once spent 20 s on)."""
    venvs = {n for n in names if os.path.isfile(os.path.join(folder, n, "pyvenv.cfg"))}
    return set(NOT_SOURCE_NAMES(folder, names)) | venvs


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the source tree (so the build leaves nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source") / "r1kit"
    shutil.copytree(REPO, source, symlinks=True, ignore=not_source)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = out.glob("r1kit-*.whl")
    return path


@pytest.mark.slow
def test_wheel_holds_every_file_of_the_package(wheel):
    package = REPO / "src" / "r1kit"
    expected = {
        p.relative_to(package.parent).as_posix()
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert expected - shipped == set()
    assert {"r1kit/slurm/evaluate.slurm", "r1kit/recipes/demo_grpo.yaml", "r1kit/assets/demo_model/model.safetensors",
            "r1kit/sandbox/scripts/harness.py", "r1kit/sandbox/scripts/gym_server.py"} <= shipped


@pytest.mark.slow
def test_installed_wheel_runs_the_dry_run_and_finds_the_slurm_script(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 check=True, capture_output=True, text=True).stdout.strip())
    # Offline, without dependencies: r1kit goes into the fresh venv; its dependencies are this venv's, appended
    # after it (a .pth line adds a path, it does not run this venv's editable-install hook).
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    (target / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}

    where = subprocess.run([python, "-c", "import r1kit; print(r1kit.__file__)"], cwd=tmp_path, env=env,
                           check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(target)), where  # the installed copy, not the checkout

    dry = subprocess.run([python, "-m", "r1kit", "grpo", "--dry-run", "--output_dir", str(tmp_path / "out")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "recipe OK" in dry.stdout

    code = (
        "from pathlib import Path\n"
        "from r1kit.benchmarking.callbacks import EvaluateBenchmarksCallback\n"
        "cb = EvaluateBenchmarksCallback(['addition'], 'out', launcher='slurm')\n"
        "cmd = cb.command(Path('out/checkpoint-2'), Path('out/eval/checkpoint-2'), 2)\n"
        "script = Path(cmd[3])\n"
        "assert cmd[0] == 'sbatch' and script.is_file() and script.name == 'evaluate.slurm', cmd\n"
        "assert 'python -m r1kit.evaluation' in script.read_text()\n"
        "print(script)\n"
    )
    lookup = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert lookup.returncode == 0, lookup.stderr[-3000:]
    assert lookup.stdout.strip().startswith(str(target))
