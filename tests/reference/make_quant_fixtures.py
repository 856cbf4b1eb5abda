#!/usr/bin/env python3
"""Reference fixtures for the quant module: bitsandbytes 0.50.2's blockwise 8-bit quantization and
4-bit (NF4/FP4) weights, computed by bitsandbytes itself on the CPU.

Usage: make_quant_fixtures.py OUTDIR

Writes into OUTDIR
  dynamic_map.safetensors   create_dynamic_map(signed=True / False): "signed", "unsigned"
  blockwise_8bit.json       the 8-bit cases: name -> {blocksize, signed}
  blockwise_8bit.safetensors  per case: <case>.A (input), <case>.codes, <case>.absmax
                            (torch.ops.bitsandbytes.quantize_blockwise on CPU: the native kernel),
                            <case>.dequant.<float32|bfloat16|float16> (dequantize_blockwise)
  nf4.json                  the 4-bit cases: name -> {blocksize, compress_statistics, quant_type, linear}
  nf4.safetensors           per case: <case>.input, the state dict bitsandbytes saves for the weight
                            (<case>.weight, <case>.weight.absmax, ..., <case>.weight.quant_state.bitsandbytes__nf4;
                            Linear4bit.state_dict() for the 2-D "linear" cases, QuantState.as_dict(packed=True)
                            for the others), <case>.dequant (dequantize_4bit, the weight's dtype) and
                            <case>.dequant.<dtype> (that, .to(dtype), as matmul_4bit uses it)
  transformers/base/        a tiny bf16 Llama (tiny_models.py)
  transformers/state.safetensors   every Linear4bit's tensors of that model loaded with
                            BitsAndBytesConfig(load_in_4bit=True, nf4, double quant, bf16 compute) on the CPU
                            (model.state_dict() names), and <weight>.dequant (dequantize_4bit)
  transformers/saved/       that 4-bit model's save_pretrained
  cuda/                     only when torch.cuda.is_available(): nf4.safetensors with the same 4-bit cases
                            quantized by bitsandbytes' CUDA kernels (the weight moved to the GPU first)
"""
import json
import os
import sys

import torch
import bitsandbytes as bnb
import bitsandbytes.functional as F
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models  # noqa: E402
import bnb_cpu  # noqa: E402

bnb_cpu.use_portable_cpu_kernels()  # bitsandbytes' own arithmetic on every host (bnb_cpu.py)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def blockwise_inputs(g):
    """name -> (A, blocksize, signed)."""
    cases = {}
    cases["randn_fp32_bs256"] = (torch.randn(1000, generator=g), 256, True)
    cases["randn_bf16_bs64"] = ((3 * torch.randn(37, 29, generator=g)).to(torch.bfloat16), 64, True)
    cases["randn_fp16_bs64"] = ((0.02 * torch.randn(5, 100, generator=g)).to(torch.float16), 64, True)
    cases["randn_fp32_bs4096"] = (torch.randn(10000, generator=g), 4096, True)
    cases["unsigned_fp32_bs256"] = (torch.rand(900, generator=g) ** 3 - 0.05, 256, False)
    cases["unsigned_bf16_bs64"] = (torch.rand(300, generator=g).to(torch.bfloat16), 64, False)
    zeros = torch.randn(700, generator=g)
    zeros[256:512] = 0.0
    zeros[600:] = 0.0  # the whole short last block is zero too
    cases["zero_block_bs256"] = (zeros, 256, True)
    # A block per magnitude, from subnormal to near the fp32 maximum.
    scales = torch.tensor([1e-42, 1e-38, 1e-30, 1e-10, 1e-3, 1.0, 1e10, 1e30, 3e38 / 4])
    magnitudes = (torch.rand(len(scales), 64, generator=g) * 2 - 1) * scales.view(-1, 1)
    cases["magnitudes_fp32_bs64"] = (magnitudes.reshape(-1), 64, True)
    # Every code value, every midpoint between neighbours (ties) and their fp32 neighbours, in blocks
    # whose absmax is exactly 1.
    code = F.create_dynamic_map(signed=True)
    mids = (code[:-1] + code[1:]) / 2
    probe = torch.cat([code, mids, torch.nextafter(mids, torch.tensor(2.0)), torch.nextafter(mids, torch.tensor(-2.0)),
                       torch.linspace(-1, 1, 65535 * 2 + 1)])
    probe = torch.cat([torch.ones(1), probe.clamp(-1, 1)])
    cases["probe_fp32_one_block"] = (probe, 65536 * 4, True)
    # 65536-element blocks too: one block with absmax 1, a few with other scales.
    probe_scaled = torch.cat([probe[:4096] * 0.37, probe[:4096] * 1e-5])
    cases["probe_scaled_fp32_bs4096"] = (probe_scaled, 4096, True)
    special = torch.randn(3, 64, generator=g)
    special[0, 5] = float("nan")
    special[1, 7] = float("inf")
    special[1, 9] = float("-inf")
    special[2, :] = float("nan")
    cases["special_fp32_bs64"] = (special.reshape(-1), 64, True)
    return cases


def make_blockwise(out, g):
    maps = {"signed": F.create_dynamic_map(signed=True), "unsigned": F.create_dynamic_map(signed=False)}
    save_file(maps, os.path.join(out, "dynamic_map.safetensors"))
    tensors, meta = {}, {}
    for name, (A, blocksize, signed) in blockwise_inputs(g).items():
        code = maps["signed" if signed else "unsigned"].clone()
        codes, absmax = torch.ops.bitsandbytes.quantize_blockwise(A, code, blocksize)
        wrapped, state = F.quantize_blockwise(A, code=code, blocksize=blocksize)
        assert torch.equal(wrapped, codes) and torch.equal(state.absmax, absmax), name
        tensors[f"{name}.A"] = A.contiguous()
        tensors[f"{name}.codes"] = codes
        tensors[f"{name}.absmax"] = absmax
        for dname, dtype in DTYPES.items():
            tensors[f"{name}.dequant.{dname}"] = torch.ops.bitsandbytes.dequantize_blockwise(
                codes, absmax, code, blocksize, dtype)
        meta[name] = {"blocksize": blocksize, "signed": signed}
    save_file(tensors, os.path.join(out, "blockwise_8bit.safetensors"))
    with open(os.path.join(out, "blockwise_8bit.json"), "w") as f:
        json.dump(meta, f, indent=1)


def nf4_inputs(g):
    """name -> (weight, blocksize, compress_statistics, quant_type)."""
    def w(shape, dtype, std=0.02):
        return (std * torch.randn(*shape, generator=g)).to(dtype)

    zero_rows = w((64, 128), torch.bfloat16)
    zero_rows[3] = 0.0  # two whole blocks of zeros
    tiny = w((4, 64), torch.float32)
    tiny[1] *= 1e-37  # absmax below bitsandbytes' 1e-38 clamp
    tiny[2] *= 1e-30
    odd = w((7, 13), torch.bfloat16)
    odd[6] = 0.0  # the short last block (and its padding) is zero
    nan = w((2, 64), torch.float32)
    nan[1, 3] = float("nan")
    return {
        "bf16_64x64": (w((64, 64), torch.bfloat16), 64, True, "nf4"),
        "bf16_256x512": (w((256, 512), torch.bfloat16), 64, True, "nf4"),
        "bf16_256x512_plain": (w((256, 512), torch.bfloat16), 64, False, "nf4"),
        "fp16_128x96": (w((128, 96), torch.float16), 64, True, "nf4"),
        "fp32_48x80": (w((48, 80), torch.float32, std=1.0), 64, True, "nf4"),
        "bf16_zero_rows": (zero_rows, 64, True, "nf4"),
        "fp32_tiny": (tiny, 64, True, "nf4"),
        "bf16_odd_7x13": (odd, 64, True, "nf4"),
        "bf16_odd_7x13_plain": (odd.clone(), 64, False, "nf4"),
        "fp32_nan": (nan, 64, False, "nf4"),
        "bf16_blocksize128": (w((96, 256), torch.bfloat16), 128, True, "nf4"),
        "bf16_blocksize32": (w((40, 64), torch.bfloat16), 32, True, "nf4"),
        "bf16_1d": (w((1000,), torch.bfloat16), 64, True, "nf4"),
        "fp4_bf16_64x192": (w((64, 192), torch.bfloat16), 64, True, "fp4"),
        "fp4_fp32_plain": (w((33, 31), torch.float32, std=1.0), 64, False, "fp4"),
        "fp4_bf16_zero_rows": (zero_rows.clone(), 64, False, "fp4"),
    }


def quantized_state_dict(weight, blocksize, compress, quant_type, device):
    """bitsandbytes' saved tensors for `weight` quantized on `device`, names relative to the module."""
    if weight.dim() == 2:
        out_features, in_features = weight.shape
        module = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=weight.dtype,
                                   compress_statistics=compress, quant_type=quant_type, device="meta")
        param = bnb.nn.Params4bit(weight, requires_grad=False, blocksize=blocksize, compress_statistics=compress,
                                  quant_type=quant_type, module=module)
        module.weight = param.to(device)
        state = {k: v.cpu() for k, v in module.state_dict().items()}
        quant_state = module.weight.quant_state
    else:
        packed, quant_state = F.quantize_4bit(weight.to(device), blocksize=blocksize, compress_statistics=compress,
                                              quant_type=quant_type)
        state = {"weight": packed.cpu()}
        state.update({"weight." + k: v.cpu() for k, v in quant_state.as_dict(packed=True).items()})
    packed = state["weight"].to(device)
    dequant = F.dequantize_4bit(packed, quant_state).cpu()
    return state, dequant


def make_nf4(out, g, device="cpu"):
    tensors, meta = {}, {}
    for name, (weight, blocksize, compress, quant_type) in nf4_inputs(g).items():
        state, dequant = quantized_state_dict(weight, blocksize, compress, quant_type, device)
        tensors[f"{name}.input"] = weight.contiguous()
        for k, v in state.items():
            tensors[f"{name}.{k}"] = v.contiguous()
        tensors[f"{name}.dequant"] = dequant
        for dname, dtype in DTYPES.items():
            tensors[f"{name}.dequant.{dname}"] = dequant.to(dtype, copy=True)
        meta[name] = {"blocksize": blocksize, "compress_statistics": compress, "quant_type": quant_type,
                      "linear": weight.dim() == 2}
    save_file(tensors, os.path.join(out, "nf4.safetensors"))
    with open(os.path.join(out, "nf4.json"), "w") as f:
        json.dump(meta, f, indent=1)


def make_transformers(out):
    import transformers
    transformers.logging.set_verbosity_error()
    base = os.path.join(out, "base")
    tiny_models.make_model("llama", base, seed=5, dtype=torch.bfloat16)
    config = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, quantization_config=config, device_map="cpu",
                                                              dtype=torch.bfloat16)
    tensors = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, bnb.nn.Linear4bit):
            continue
        for k, v in module.state_dict().items():
            tensors[f"{module_name}.{k}"] = v.contiguous()
        tensors[f"{module_name}.weight.dequant"] = F.dequantize_4bit(module.weight.data, module.weight.quant_state)
    assert tensors, "transformers quantized no Linear"
    save_file(tensors, os.path.join(out, "state.safetensors"))
    model.save_pretrained(os.path.join(out, "saved"))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_quant_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "transformers"), exist_ok=True)
    make_blockwise(out, torch.Generator().manual_seed(0))
    make_nf4(out, torch.Generator().manual_seed(1))
    make_transformers(os.path.join(out, "transformers"))
    if torch.cuda.is_available():
        os.makedirs(os.path.join(out, "cuda"), exist_ok=True)
        make_nf4(os.path.join(out, "cuda"), torch.Generator().manual_seed(1), device="cuda")


if __name__ == "__main__":
    main()
