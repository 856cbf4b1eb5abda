#!/usr/bin/env bash
# GPU benchmark in one command (run on the GPU machine): builds with scripts/setup.sh, then runs
# bench/bench.py for both model shapes and both settings on 1, 2 and 4 GPUs (as many as there
# are), ours against the PyTorch DDP + transformers + PEFT reference in the same invocation, after
# a bf16 logits parity check. Results: a table on stdout, JSON under $OUT (or /tmp/bench).
#   BENCH_SHAPES=llama-3.2-1b,qwen3-8b BENCH_SETTINGS=seed,best BENCH_GPUS=1,2,4 bash scripts/bench.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
BUILD_DIR=${FINETUNE_BUILD_DIR:-$ROOT/build}
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
default_gpus=1
[ "$gpus" -ge 2 ] && default_gpus=1,2
[ "$gpus" -ge 4 ] && default_gpus=1,2,4
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
exec python3 "$ROOT/bench/bench.py" --finetune "$FINETUNE_BIN" --parity --train_parity --profile \
  --shapes "${BENCH_SHAPES:-llama-3.2-1b,qwen3-8b}" --settings "${BENCH_SETTINGS:-seed,best}" \
  --gpus "${BENCH_GPUS:-$default_gpus}" --out "${OUT:-/tmp/bench}" "$@"
