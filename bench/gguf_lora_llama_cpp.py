"""llama.cpp's logits with a LoRA adapter GGUF attached to the base GGUF vs the merged model's GGUF.

`prepare`: tiny Llama-3-rope and Qwen2 models with a random PEFT adapter on every projection
(tests/e2e/test_gguf_adapter.py's), exported by FINETUNE_BIN as the base GGUF, the adapter GGUF
(--save_method gguf_lora) and the merged GGUF (--save_method gguf --adapter), in F32 and F16, into
WORK_DIR; `run`: llama_lora_logits (tests/reference/llama_lora, llama.cpp's own
llama_adapter_lora_init + llama_set_adapters_lora) on base + adapter and on merged, and the relative
Frobenius difference of the two logits, printed as JSON lines.

usage: gguf_lora_llama_cpp.py prepare FINETUNE_BIN WORK_DIR TOKENIZER_DIR
       gguf_lora_llama_cpp.py run LLAMA_LORA_LOGITS WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "reference"), os.path.join(HERE, "..", "tests", "e2e")]
TOKENS = [5, 17, 300, 42, 1000, 7, 1200, 99, 3, 250]
CASES = ("llama3_rope", "qwen2")
TYPES = ("f32", "f16")


def export(finetune_bin, args):
    proc = subprocess.run([finetune_bin, "export", *map(str, args), "--device", "cpu", "--dtype", "float32"],
                          check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["gguf_files"]


def prepare(finetune_bin, work_dir, tokenizer_dir):
    import gguf_models
    from test_gguf_adapter import make_adapter
    files = {}
    for case in CASES:
        model_dir, adapter_dir = os.path.join(work_dir, case), os.path.join(work_dir, case + "_adapter")
        make_adapter(gguf_models.make_gguf_model(case, model_dir, tokenizer_dir), adapter_dir)
        quantization = ",".join(TYPES)
        base = export(finetune_bin, ["--model_name", model_dir, "--save_method", "gguf", "--quantization", quantization,
                                     "--save_path", os.path.join(work_dir, case + "_base")])
        lora = export(finetune_bin, ["--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf_lora",
                                     "--quantization", quantization, "--save_path", os.path.join(work_dir, case + "_lora")])
        merged = export(finetune_bin, ["--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf",
                                       "--quantization", quantization,
                                       "--save_path", os.path.join(work_dir, case + "_merged")])
        files[case] = {t: {"base": os.path.relpath(b, work_dir), "lora": os.path.relpath(l, work_dir),
                           "merged": os.path.relpath(m, work_dir)} for t, b, l, m in zip(TYPES, base, lora, merged)}
    with open(os.path.join(work_dir, "files.json"), "w") as f:
        json.dump(files, f, indent=1)


def logits(driver, model, out, lora=None):
    args = [driver, model, out] + (["--lora", lora] if lora else []) + [str(t) for t in TOKENS]
    subprocess.run(args, check=True)
    values = np.fromfile(out, np.float32)
    return values.reshape(len(TOKENS), -1)


def run(driver, work_dir):
    with open(os.path.join(work_dir, "files.json")) as f:
        files = json.load(f)
    for case, by_type in files.items():
        for qtype, paths in by_type.items():
            path = {k: os.path.join(work_dir, v) for k, v in paths.items()}
            with_adapter = logits(driver, path["base"], os.path.join(work_dir, "a.f32"), path["lora"])
            merged = logits(driver, path["merged"], os.path.join(work_dir, "m.f32"))
            base = logits(driver, path["base"], os.path.join(work_dir, "b.f32"))
            rel = float(np.linalg.norm(with_adapter - merged) / np.linalg.norm(merged))
            effect = float(np.linalg.norm(base - merged) / np.linalg.norm(merged))
            print(json.dumps({"case": case, "type": qtype.upper(), "rel_adapter_vs_merged": rel,
                              "rel_base_vs_merged": effect,
                              "greedy_agree": int((with_adapter.argmax(-1) == merged.argmax(-1)).sum())}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(*sys.argv[2:5])
    else:
        run(*sys.argv[2:4])
