"""GPU DDP equivalence through NCCL: 2 ranks x per-device batch B must train like 1 rank x 2B
(bf16, same samples, same initial adapter), with both launchers. Prints relative differences of
per-step losses and of the final adapter tensors, and the single-GPU bf16 run-to-run noise
(same command twice) for scale.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import reference_loop  # noqa: E402
import tiny_models  # noqa: E402


def train(cmd_prefix, finetune, model, adapter, data, out, batch, extra_env=None):
    cmd = cmd_prefix + [finetune, "--model_name", model, "--dataset", data, "--init_adapter", adapter,
                        "--output_dir", out, "--max_steps", "12", "--per_device_train_batch_size", str(batch),
                        "--gradient_accumulation_steps", "2", "--learning_rate", "1e-3", "--warmup_steps", "2",
                        "--shuffle", "false", "--logging_steps", "1", "--dtype", "bfloat16", "--device", "cuda",
                        "--ddp_check_consistency_steps", "4"]
    env = dict(os.environ, **(extra_env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-5000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    losses = [json.loads(l)["loss"] for l in open(os.path.join(out, "metrics.jsonl"))]
    return losses, load_file(os.path.join(out, "adapter_model.safetensors")), proc.stderr


def compare(a, b):
    (la, ta), (lb, tb) = a, b
    loss_rel = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
    tensor_rel = max(float((ta[k].float() - tb[k].float()).norm() / tb[k].float().norm()) for k in tb)
    return {"max_step_loss_rel": loss_rel, "max_adapter_rel": tensor_rel}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--work", default="/tmp/ddp_eq")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "model")
    tiny_models.make_model("llama", model)
    adapter = reference_loop.make_init_adapter(model, os.path.join(args.work, "adapter"))
    rows = tiny_models.make_tokenized_rows(64, seed=11, min_len=4, max_len=120, completion_only=True)
    data = os.path.join(args.work, "rows.jsonl")
    tiny_models.write_jsonl(data, rows)
    w = lambda name: os.path.join(args.work, name)
    single = train([], args.finetune, model, adapter, data, w("single"), 4)
    single_again = train([], args.finetune, model, adapter, data, w("single2"), 4)
    torchrun = train(["torchrun", "--no-python", "--standalone", "--nproc_per_node=2"], args.finetune, model, adapter,
                     data, w("torchrun"), 2)
    mpirun = train(["mpirun", "-np", "2", "--allow-run-as-root", "--bind-to", "none", "-x", "NCCL_NVLS_ENABLE",
                    "-x", "PATH", "-x", "LD_LIBRARY_PATH"], args.finetune, model, adapter, data, w("mpirun"), 2)
    result = {"single_rerun_noise": compare(single_again[:2], single[:2]),
              "torchrun_2x2_vs_single_1x4": compare(torchrun[:2], single[:2]),
              "mpirun_2x2_vs_single_1x4": compare(mpirun[:2], single[:2]),
              "torchrun_vs_mpirun": compare(torchrun[:2], mpirun[:2]),
              "single_losses": single[0], "torchrun_losses": torchrun[0]}
    print(json.dumps(result, indent=1))
    print("mpirun stderr tail:", mpirun[2][-800:])


if __name__ == "__main__":
    main()
