#!/usr/bin/env bash
# GPU check, one command, about 8 minutes on an H200: (1) the exact passes' values and gradients on the GPU, the
# FlexAttention path's backward included (scripts/gpu_exactness.py); (2) the training pass, every variant and r1kit's
# default side by side (benchmarks/training_pass.py); (3) the 1xH200 table, r1kit against a plain TRL script per
# model, completion length and group size, with the per-phase shares (scripts/gpu_check.py). Nothing is downloaded there: the GPU machine has torch and transformers but no network, so the few small
# pure-Python wheels it lacks (trl, datasets, math-verify and their small dependencies) travel in .whl/, and the whole
# carried tree must stay under 60 MiB.
#
#   bash scripts/gpu_check.sh --fetch      # here, with PyPI: download the wheels into .whl/ and check the carried size
#   bash scripts/gpu_check.sh              # on the GPU machine: install from .whl/ and run (a few minutes)
#   python scripts/gpu_check.py --cpu-smoke   # the same code paths on CPU, tiny, to check the script itself
set -euo pipefail
cd "$(dirname "$0")/.."

# Pure-Python wheels for Python 3.12, the versions r1kit is tested with. Not carried: torch, transformers, accelerate,
# peft, pyarrow, pandas, sympy, fsspec, xxhash (already on the GPU machine) and anything large.
WHEELS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 math-verify==0.9.0
        latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2)
LIMIT_MIB=60

carried_bytes() {  # tracked files, untracked files git does not ignore, and .whl/
  { git ls-files -co --exclude-standard -z; find .whl -type f -print0 2>/dev/null; } | du --files0-from=- -cb | tail -1 | cut -f1
}

if [[ "${1:-}" == "--fetch" ]]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  rm -rf .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
    --platform manylinux_2_17_x86_64 --platform any -d .whl "${WHEELS[@]}" \
  || python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl "${WHEELS[@]}"
  ls -la .whl
  size=$(carried_bytes)
  echo "carried: $((size / 1024)) KiB (.whl/: $(du -sk .whl | cut -f1) KiB), limit ${LIMIT_MIB} MiB"
  (( size < LIMIT_MIB * 1024 * 1024 )) || { echo "carried size over ${LIMIT_MIB} MiB" >&2; exit 1; }
  exit 0
fi

[[ -d .whl ]] || { echo "no .whl/: run 'bash scripts/gpu_check.sh --fetch' first (where PyPI is reachable)" >&2; exit 2; }
echo "carried: $(( $(carried_bytes) / 1024 )) KiB"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/r1kit-site .whl/*.whl
export PYTHONPATH="/tmp/r1kit-site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 R1KIT_CACHE=/tmp/r1kit-cache
python3 -c "import datasets, trl, math_verify, transformers, accelerate; print('trl', trl.__version__, '| datasets', datasets.__version__, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__)"
export PYTHONUNBUFFERED=1
status=0
echo "== exactness on the GPU =="
timeout 90 python3 scripts/gpu_exactness.py || status=1
echo "== the training pass, side by side =="
timeout 100 python3 benchmarks/training_pass.py --skip-smollm2 --repeats 3 || status=1
echo "== the 1xH200 table =="
python3 scripts/gpu_check.py --steps "${STEPS:-5}" --seconds "${TABLE_SECONDS:-300}" --out /tmp/r1kit-gpu-check || status=1
exit $status
