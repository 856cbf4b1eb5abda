"""GPU QLoRA correctness, run before any QLoRA timing: bf16 QLoRA logits against an fp32 computation
on the same dequantized weights.

1. transformers + bitsandbytes load the 16-bit checkpoint in 4-bit on the GPU (NF4, double
   quantization, bf16 compute) and save it: a pre-quantized checkpoint made by the reference.
2. `finetune eval --load_in_4bit` on the 16-bit checkpoint (we quantize on the GPU) and
   `finetune eval` on the reference's 4-bit checkpoint must give *identical* logits: the same
   computation on the same bytes, so any byte our quantizer got wrong would show.
3. fp32 reference: the reference's 4-bit weights dequantized (bitsandbytes' dequantize_4bit) into
   fp32 linears, the rest of the model in fp32. Our bf16 error against it is compared with
   bitsandbytes' own bf16 4-bit forward's error against it (ratio ~1: bf16 rounding only).
Prints one JSON object; exits non-zero when a check fails.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from numerics import relative_error  # noqa: E402


def our_logits(args, model_dir, subset, dump, extra):
    proc = subprocess.run([args.finetune, "eval", "--model_name", model_dir, "--dataset", subset, "--dtype",
                           "bfloat16", "--device", "cuda", "--per_device_eval_batch_size", "1", "--max_seq_length",
                           "4096", "--dump_logits", dump] + extra, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr)
        sys.exit(1)
    return load_file(dump), proc.stderr


def dequantized_fp32(model):
    import bitsandbytes
    import bitsandbytes.functional as F
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, bitsandbytes.nn.Linear4bit):
                weight = F.dequantize_4bit(child.weight.data, child.weight.quant_state).float()
                dense = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                        device=weight.device, dtype=torch.float32)
                with torch.no_grad():
                    dense.weight.copy_(weight)
                    if child.bias is not None:
                        dense.bias.copy_(child.bias.float())
                setattr(module, child_name, dense)
    # transformers refuses .float() on a model it loaded quantized: cast what is left by hand.
    for tensor in list(model.parameters()) + list(model.buffers()):
        tensor.data = tensor.data.float()
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    rows = [json.loads(l) for l in open(args.data)][:args.rows]
    subset = f"{args.work}/qlora_rows.jsonl"
    with open(subset, "w") as f:
        for r in rows:
            f.write(json.dumps({"input_ids": r["input_ids"]}) + "\n")

    config = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda",
                                                              quantization_config=config).eval()
    prequantized = os.path.join(args.work, os.path.basename(args.model.rstrip("/")) + "-bnb-4bit")
    if not os.path.exists(os.path.join(prequantized, "config.json")):
        model.save_pretrained(prequantized)

    ours, log = our_logits(args, args.model, subset, f"{args.work}/qlora_ours.safetensors", ["--load_in_4bit"])
    theirs_bytes, _ = our_logits(args, prequantized, subset, f"{args.work}/qlora_prequantized.safetensors", [])
    load_line = next((l for l in log.splitlines() if "finetune | model" in l), "")

    def logits(m, row):
        with torch.no_grad():
            return m(input_ids=torch.tensor([row["input_ids"]], device="cuda")).logits[0].float().cpu()

    bnb_bf16 = [logits(model, r) for r in rows]
    fp32 = dequantized_fp32(model)
    ref = [logits(fp32, r) for r in rows]
    results = {"load": load_line, "rows": []}
    identical = True
    for i, row in enumerate(rows):
        o = ours[f"logits.{i}"]
        same = torch.equal(o, theirs_bytes[f"logits.{i}"])
        identical = identical and same
        results["rows"].append({"len": len(row["input_ids"]), "load_in_4bit_equals_bnb_checkpoint": same,
                                "ours_vs_fp32": relative_error(o, ref[i]),
                                "bnb_bf16_vs_fp32": relative_error(bnb_bf16[i], ref[i]),
                                "ours_vs_bnb_bf16": relative_error(o, bnb_bf16[i])})
    worst = {k: max(r[k] for r in results["rows"]) for k in ("ours_vs_fp32", "bnb_bf16_vs_fp32", "ours_vs_bnb_bf16")}
    results["worst"] = worst
    results["error_ratio_vs_bnb"] = worst["ours_vs_fp32"] / worst["bnb_bf16_vs_fp32"]
    results["quantized_bytes_identical"] = identical
    print(json.dumps(results, indent=1))
    # Our bf16 error may not exceed bitsandbytes' own by more than bf16 noise (25%).
    if not identical or results["error_ratio_vs_bnb"] > 1.25:
        sys.exit(1)


if __name__ == "__main__":
    main()
