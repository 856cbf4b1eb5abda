#!/usr/bin/env bash
# The whole job on an embedded default, on CPU, in a few minutes: set the machine up and build
# (scripts/setup.sh), make a tiny random Llama + Llama-3-style tokenizer + a word-manipulation
# task (scripts/make_demo_assets.py), measure the held-out eval loss, LoRA-train, measure again,
# then show the base and tuned models' greedy answers (finetune generate) and their exact-match
# accuracy over the held-out rows.
#
#   scripts/demo.sh
#
# Environment:
#   FINETUNE_BIN          use this finetune binary (default: the one setup.sh builds)
#   FINETUNE_PYTHON       Python with torch/transformers/tokenizers for the asset generator
#   FINETUNE_SKIP_SETUP=1 do not run setup.sh (then FINETUNE_BIN must exist or build/env.sh be there)
#   FINETUNE_DEMO_DIR     where assets and the run go (default: ./demo_out)
#   DEMO_STEPS            optimizer steps (default 1000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEMO_DIR=${FINETUNE_DEMO_DIR:-$ROOT/demo_out}
ASSETS=$DEMO_DIR/assets
RUN=$DEMO_DIR/run
STEPS=${DEMO_STEPS:-1000}
started=$(date +%s)

say() { printf '\n==> %s\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

# What the caller set wins over build/env.sh, which setup.sh rewrites with its own paths.
caller_bin=${FINETUNE_BIN:-}
caller_python=${FINETUNE_PYTHON:-}
BUILD_DIR=${FINETUNE_BUILD_DIR:-$ROOT/build}
if [ "${FINETUNE_SKIP_SETUP:-0}" != 1 ]; then
  say "setting up and building (scripts/setup.sh; quick when already done)"
  "$ROOT/scripts/setup.sh"
fi
# shellcheck disable=SC1091
[ -f "$BUILD_DIR/env.sh" ] && source "$BUILD_DIR/env.sh"
FINETUNE_BIN=${caller_bin:-${FINETUNE_BIN:-}}
FINETUNE_PYTHON=${caller_python:-${FINETUNE_PYTHON:-}}
if [ -z "$FINETUNE_PYTHON" ]; then
  if [ -x "$HOME/.cache/finetune/venv/bin/python" ]; then FINETUNE_PYTHON=$HOME/.cache/finetune/venv/bin/python
  else FINETUNE_PYTHON=$(command -v python3 || true); fi
fi
if [ -z "$FINETUNE_BIN" ] || [ ! -x "$FINETUNE_BIN" ]; then
  die "no finetune binary (FINETUNE_BIN='$FINETUNE_BIN'); run without FINETUNE_SKIP_SETUP=1 to build one"
fi
[ -n "$FINETUNE_PYTHON" ] || die "no Python found; set FINETUNE_PYTHON"

# --- assets: generated once; the marker is written last, so an interrupted run regenerates them
if [ ! -f "$ASSETS/.complete" ] || [ ! -f "$ASSETS/eval_prompts.jsonl" ]; then
  say "generating the demo model, tokenizer and data (scripts/make_demo_assets.py)"
  rm -rf "$ASSETS"
  "$FINETUNE_PYTHON" "$ROOT/scripts/make_demo_assets.py" "$ASSETS" 2> >(grep -v "Writing model shards" >&2)
  touch "$ASSETS/.complete"
fi
say "the task (one held-out example; the base model has never been trained on anything)"
head -n 1 "$ASSETS/eval.jsonl"

# Prints the "loss" field of the JSON line that `finetune eval` writes on stdout.
eval_loss() {
  "$FINETUNE_BIN" eval --model_name "$ASSETS/model" --dataset "$ASSETS/eval.jsonl" --chat_template alpaca \
    --device cpu --per_device_eval_batch_size 32 "$@" \
    | "$FINETUNE_PYTHON" -c 'import json, sys; print("%.4f" % json.loads(sys.stdin.read().strip().splitlines()[-1])["loss"])'
}

say "eval loss BEFORE training (random base model, $(wc -l <"$ASSETS/eval.jsonl") held-out rows)"
before=$(eval_loss)
echo "eval_loss $before"

say "LoRA training on CPU: $STEPS steps, batch 16, r 16, alpha 32, lr 1e-3 -> $RUN"
rm -rf "$RUN"
train_started=$(date +%s)
"$FINETUNE_BIN" --model_name "$ASSETS/model" --dataset "$ASSETS/train.jsonl" --eval_dataset "$ASSETS/eval.jsonl" \
  --chat_template alpaca --device cpu --output_dir "$RUN" \
  --max_steps "$STEPS" --per_device_train_batch_size 16 --gradient_accumulation_steps 1 \
  --learning_rate 1e-3 --warmup_steps 10 --r 16 --lora_alpha 32 --use_gradient_checkpointing false \
  --per_device_eval_batch_size 32 --eval_steps $((STEPS / 4)) --logging_steps 50
train_seconds=$(($(date +%s) - train_started))

say "eval loss AFTER training (same held-out rows, base model + the adapter in $RUN)"
after=$(eval_loss --init_adapter "$RUN")
echo "eval_loss $after"

# Greedy answers to every held-out prompt (alpaca prompt up to "### Response:"), one JSON line each.
answers() {
  "$FINETUNE_BIN" generate --model_name "$ASSETS/model" --prompts "$ASSETS/eval_prompts.jsonl" --device cpu \
    --max_new_tokens 24 --generation_batch_size 32 "$@"
}
say "greedy answers on the held-out prompts: base model, then base + adapter (finetune generate)"
answers > "$DEMO_DIR/answers_base.jsonl"
answers --adapter "$RUN" > "$DEMO_DIR/answers_tuned.jsonl"
accuracy=$("$FINETUNE_PYTHON" - "$ASSETS/eval.jsonl" "$DEMO_DIR/answers_base.jsonl" "$DEMO_DIR/answers_tuned.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
def answers(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        record = json.loads(line)
        out[record["prompt_index"]] = record["text"].strip()
    return [out[i] for i in range(len(rows))]
base, tuned = answers(sys.argv[2]), answers(sys.argv[3])
for i in range(4):
    r = rows[i]
    print(f"  {r['instruction']} {r['input']!r}\n    expected {r['output']!r}\n    base     {base[i]!r}\n    tuned    {tuned[i]!r}",
          file=sys.stderr)
def exact(answers):
    return sum(a == r["output"] for a, r in zip(answers, rows))
print(f"{exact(base)}/{len(rows)} -> {exact(tuned)}/{len(rows)}")
PY
)
echo "exact-match accuracy on the held-out rows: $accuracy"

say "summary"
echo "eval loss $before -> $after, exact match $accuracy  (training ${train_seconds}s, total $(($(date +%s) - started))s)"
