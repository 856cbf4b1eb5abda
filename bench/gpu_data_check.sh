#!/usr/bin/env bash
# Issue 11 on the GPU machine, in one call: build against the machine's own pyarrow (its Arrow C++
# libraries), run the template / Parquet / built-in template unit tests there, and train a short run
# on the GPU from a Parquet chat dataset rendered with the tokenizer's own Jinja template.
#   bash bench/gpu_data_check.sh      (results under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_data_check}
mkdir -p "$OUT"
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1 NCCL_NVLS_ENABLE=0
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
export LD_LIBRARY_PATH=$PWD/.deps/lib:${LD_LIBRARY_PATH:-}
python3 -c "import pyarrow, torch; print('pyarrow', pyarrow.__version__, 'torch', torch.__version__)" | tee "$OUT/versions.txt"
start=$(date +%s)
bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
echo "build seconds $(( $(date +%s) - start ))" | tee -a "$OUT/versions.txt"
ldd build/finetune | grep -E "arrow|parquet" | tee "$OUT/ldd.txt"
source build/env.sh
export FINETUNE_FIXTURES=$PWD/build/fixtures
for module in template parquet data; do
  python3 "tests/reference/make_${module}_fixtures.py" "$FINETUNE_FIXTURES/$module" > "$OUT/fixtures-$module.log" 2>&1 \
    || echo "fixture generator $module failed: see fixtures-$module.log"
done
build/finetune_base_tests --gtest_brief=1 \
  --gtest_filter='Template*:Parquet*:BuiltinChatTemplates*:ChatTemplateChoice*:DatasetLoading*' 2>&1 | tail -25 | tee "$OUT/unit.txt"

# A chat dataset as Parquet (list<struct<role, content>> column), the demo model with a Llama-3
# chat template of its own, trained on the GPU.
python3 scripts/make_demo_assets.py /tmp/gpu_demo > /dev/null
python3 - <<'PY'
import json, pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(l) for l in open("/tmp/gpu_demo/train.jsonl")][:512]
messages = [[{"role": "user", "content": r["instruction"] + "\n" + r["input"]},
             {"role": "assistant", "content": r["output"]}] for r in rows]
pq.write_table(pa.table({"messages": messages}), "/tmp/gpu_demo/chat.parquet", row_group_size=64)
template = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
            "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|end_of_text|>' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
open("/tmp/gpu_demo/model/chat_template.jinja", "w").write(template)
PY
build/finetune --model_name /tmp/gpu_demo/model --dataset /tmp/gpu_demo/chat.parquet --max_steps 60 \
  --per_device_train_batch_size 16 --learning_rate 1e-3 --r 16 --lora_alpha 32 --output_dir /tmp/gpu_demo/out \
  --save_model false --require_loss_decrease true > "$OUT/train.stdout" 2> "$OUT/train.stderr"
echo "train exit $?" | tee "$OUT/train.txt"
grep -E "chat template|data |dataset |kernels|tokens/s|loss" "$OUT/train.stderr" | head -20 | tee -a "$OUT/train.txt"
tail -3 /tmp/gpu_demo/out/metrics.jsonl >> "$OUT/train.txt" 2>/dev/null
