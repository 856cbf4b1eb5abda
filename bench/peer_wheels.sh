#!/usr/bin/env bash
# The wheels the benchmark's peers (Unsloth; transformers + PEFT + Liger kernels) need on the GPU
# machine, which has no internet. Run HERE (a machine with PyPI); it fills the git-ignored .whl/
# with CPython 3.12 manylinux x86-64 wheels, stripped so that they travel in the device call's
# 64 MiB carry together with the repository:
#   bash bench/peer_wheels.sh              download, strip, test-install with python3.12 if present
# On the GPU machine (carry .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#
# What is shipped, and why (the GPU machine already has torch 2.11+cu130, transformers 5.17, peft,
# accelerate, pyarrow, pandas, triton, numpy, fsspec, xxhash, aiohttp, torchvision, einops, psutil,
# protobuf, sentencepiece, huggingface_hub; nothing here may shadow those):
#   unsloth, unsloth_zoo      the peer itself (the wheel's Studio web UI and CLI are dropped: 80 MB
#                             unpacked, never imported by `import unsloth`)
#   liger-kernel              the other peer (pure Python + Triton)
#   trl 1.15.0                Unsloth's trainer path (SFTTrainer); unsloth pins trl<=1.15.0
#   datasets 4.8.5, dill, multiprocess
#                             imported by trl and unsloth_zoo at import time (unsloth pins datasets<5)
#   bitsandbytes              imported by Unsloth's CUDA init (optional there, but its QLoRA path and
#                             our qlora variants need it); only its CPU and CUDA 13.0 libraries kept
#   torchao, cut_cross_entropy  what `pip install unsloth` brings and Unsloth probes at import
# Not shipped (read in unsloth/unsloth_zoo 2026.10.9: only try/except or feature-gated imports):
# xformers (PyPI's wheels are built for cu128 torch; Unsloth falls back to PyTorch attention on a
# cu130 torch, which is what a user of this torch gets), diffusers, hf_transfer, tyro, msgspec
# (vLLM only), flash-attn, vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${PEER_WHEELS_DIR:-.whl}
WHEELS=(unsloth==2026.10.9 unsloth_zoo==2026.10.9 liger-kernel==0.8.5 trl==1.15.0 datasets==4.8.5
        dill==0.4.1 multiprocess==0.70.19 bitsandbytes==0.50.2 torchao==0.18.0 cut_cross_entropy==25.1.1)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$stage" "${WHEELS[@]}"
mkdir -p "$DEST"

# Rewrite each wheel without the members nobody imports; RECORD loses their lines, so pip's
# record of the install matches what is on disk.
python3 - "$stage" "$DEST" <<'EOF'
import os, re, sys, zipfile

stage, dest = sys.argv[1:]
# (distribution, pattern of member names to drop)
DROP = {
    "unsloth": r"^(studio|unsloth_cli)/|\.dist-info/entry_points\.txt$",  # web UI, CLI, its console script
    "bitsandbytes": r"^bitsandbytes/libbitsandbytes_(?!cpu\.so$|cuda130\.so$)[^/]*\.so$",  # other CUDA/ROCm/XPU builds
    "torchao": r"^test/",  # a top-level `test` package would shadow the standard library's
}
# The GPU machine's own packages: a wheel of one of these in DEST would shadow it under --target.
NEVER = {"torch", "transformers", "peft", "accelerate", "numpy", "triton", "safetensors", "tokenizers",
         "huggingface-hub", "pyarrow", "pandas", "fsspec", "torchvision", "sentencepiece"}


def dist_name(wheel):
    return re.sub(r"[-_.]+", "-", os.path.basename(wheel).split("-")[0]).lower()


for existing in os.listdir(dest):
    if existing.endswith(".whl") and dist_name(existing) in NEVER:
        sys.exit(f"{dest}/{existing} would shadow the GPU machine's own {dist_name(existing)}: remove it")
for wheel in sorted(os.listdir(stage)):
    name = dist_name(wheel)
    for existing in os.listdir(dest):  # one version of each distribution: pip refuses two
        if existing.endswith(".whl") and dist_name(existing) == name:
            os.remove(os.path.join(dest, existing))
    drop = re.compile(DROP[name]) if name in DROP else None
    src_path, out_path = os.path.join(stage, wheel), os.path.join(dest, wheel)
    with zipfile.ZipFile(src_path) as src, zipfile.ZipFile(out_path + ".part", "w", zipfile.ZIP_DEFLATED) as out:
        dropped = {i.filename for i in src.infolist() if drop and drop.search(i.filename)}
        for info in src.infolist():
            if info.filename in dropped:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(l for l in lines if l.split(",")[0] not in dropped).encode()
            out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    os.replace(out_path + ".part", out_path)
    before, after = os.path.getsize(src_path), os.path.getsize(out_path)
    print(f"{wheel}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB ({len(dropped)} members dropped)")
EOF

# pip must accept the rewritten wheels: install them the way the GPU machine will, with a CPython
# 3.12 where there is one (the wheels are for 3.12; no dependency is resolved, so torch need not be there).
py312=${PYTHON312:-python3.12}
$py312 -m pip --version > /dev/null 2>&1 || py312=$(ls "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
if [ -n "$py312" ] && $py312 -m pip --version > /dev/null 2>&1; then
  site=$(mktemp -d)
  $py312 -m pip install -q --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$DEST"/*.whl
  echo "test install with $($py312 -V): $(du -sh "$site" | cut -f1) unpacked," \
    "$(ls "$site" | grep -c dist-info) distributions"
  rm -rf "$site"
else
  echo "no python3.12 here: the test install was skipped"
fi
du -ch "$DEST"/*.whl | tail -1 | sed "s|total|total in $DEST (carry limit 64 MiB with the repository)|"
