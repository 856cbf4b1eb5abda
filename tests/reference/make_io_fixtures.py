#!/usr/bin/env python3
"""Reference fixtures for the safetensors reader (tests/io/test_safetensors_reference.cpp).

Usage: make_io_fixtures.py OUTDIR

Writes into OUTDIR, with the Python `safetensors` library as the reference:
  numpy_dtypes.safetensors   safetensors.numpy.save_file: every numpy-representable dtype,
                             a scalar, zero-size tensors, metadata
  torch_dtypes.safetensors   safetensors.torch.save_file: bf16, f16, f32, i64, bool, metadata
  sharded/                   a checkpoint split like transformers' save_pretrained does
                             (huggingface_hub.split_torch_state_dict_into_shards + index json)
  rejected/*.safetensors     damaged files the Python library refuses to open
  expected.json              per file: metadata and per tensor dtype, shape, data_offsets,
                             the bytes as hex, and the values as float64; the sharded
                             checkpoint's tensor -> shard map; the list of rejected files
Deterministic and fast (well under a second after imports).
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors import safe_open
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file as load_torch
from safetensors.torch import save_file as save_torch

TORCH_DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def raw_header(path):
    """The JSON header exactly as stored (parsed by the standard library, not by safetensors)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


def describe_file(path):
    """What the C++ reader must see: taken from the safetensors library's own loading."""
    header = raw_header(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    tensors = {}
    for name, tensor in load_torch(path).items():
        tensor = tensor.contiguous()
        data = bytes(tensor.untyped_storage())[: tensor.numel() * tensor.element_size()]
        tensors[name] = {
            "dtype": TORCH_DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": header[name]["data_offsets"],
            "hex": data.hex(),
            "values": tensor.to(torch.float64).flatten().tolist(),
        }
    return {"metadata": metadata, "tensors": tensors}


def make_numpy_file(outdir, rng):
    tensors = {
        "f64": rng.standard_normal((2, 3)).astype(np.float64),
        "f32": rng.standard_normal((4, 5)).astype(np.float32),
        "f16": rng.standard_normal((3, 7)).astype(np.float16),
        "i64": rng.integers(-(2**62), 2**62, size=(5,), dtype=np.int64),
        "i32": rng.integers(-(2**31), 2**31 - 1, size=(2, 2, 2), dtype=np.int32),
        "i16": rng.integers(-(2**15), 2**15 - 1, size=(3,), dtype=np.int16),
        "i8": rng.integers(-128, 127, size=(9,), dtype=np.int8),
        "u8": rng.integers(0, 255, size=(1, 11), dtype=np.uint8),
        "bool": rng.integers(0, 2, size=(6,)).astype(np.bool_),
        "scalar_f32": np.array(3.25, dtype=np.float32),
        "empty_f32": np.zeros((0,), dtype=np.float32),
        "empty_2d_i64": np.zeros((3, 0), dtype=np.int64),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 4)).astype(np.float32),
    }
    path = os.path.join(outdir, "numpy_dtypes.safetensors")
    save_numpy(tensors, path, metadata={"format": "np", "note": "unicode \u00e9\u4e2d"})
    return path


def make_torch_file(outdir, generator):
    tensors = {
        "bf16": torch.randn(3, 5, generator=generator).to(torch.bfloat16),
        "f16": torch.randn(2, 3, generator=generator).to(torch.float16),
        "f32": torch.randn(7, generator=generator),
        "i64": torch.arange(-3, 3, dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "scalar_bf16": torch.tensor(-1.5, dtype=torch.bfloat16),
    }
    path = os.path.join(outdir, "torch_dtypes.safetensors")
    save_torch(tensors, path, metadata={"format": "pt"})
    return path


def make_sharded_checkpoint(outdir, generator):
    """Shards and index as transformers' save_pretrained writes them."""
    state_dict = {"model.embed_tokens.weight": torch.randn(16, 8, generator=generator)}
    for layer in range(3):
        prefix = f"model.layers.{layer}."
        state_dict[prefix + "self_attn.q_proj.weight"] = torch.randn(8, 8, generator=generator)
        state_dict[prefix + "mlp.up_proj.weight"] = torch.randn(12, 8, generator=generator)
        state_dict[prefix + "input_layernorm.weight"] = torch.ones(8).to(torch.bfloat16)
    state_dict["lm_head.weight"] = torch.randn(16, 8, generator=generator)
    split = split_torch_state_dict_into_shards(state_dict, max_shard_size=1200)
    assert split.is_sharded and len(split.filename_to_tensors) >= 3, split
    directory = os.path.join(outdir, "sharded")
    os.makedirs(directory, exist_ok=True)
    for filename, names in split.filename_to_tensors.items():
        shard = {name: state_dict[name].contiguous() for name in names}
        save_torch(shard, os.path.join(directory, filename), metadata={"format": "pt"})
    index = {"metadata": {**split.metadata, "total_size": sum(
        t.numel() * t.element_size() for t in state_dict.values())},
        "weight_map": split.tensor_to_filename}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    return directory, split.tensor_to_filename


def python_rejects(path):
    try:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                f.get_tensor(name)
    except Exception:  # the library raises several types; any refusal counts
        return True
    return False


def make_rejected_files(outdir, valid_path):
    """Damaged variants of a valid file; each must be refused by Python (checked here) and C++."""
    directory = os.path.join(outdir, "rejected")
    os.makedirs(directory, exist_ok=True)
    with open(valid_path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]

    def with_header(new_header, new_data=data):
        text = json.dumps(new_header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        return struct.pack("<Q", len(text)) + text + new_data

    # The first tensor in the data section that holds bytes (zero-size ones overlap nothing).
    first = sorted((k for k in header if k != "__metadata__"
                    and header[k]["data_offsets"][0] != header[k]["data_offsets"][1]),
                   key=lambda k: header[k]["data_offsets"][0])[0]
    variants = {
        "truncated_data": blob[:-3],
        "truncated_header": blob[: 8 + length // 2],
        "only_length": blob[:8],
        "short_length_field": blob[:5],
        "length_past_eof": struct.pack("<Q", len(blob)) + blob[8:],
        "not_json": struct.pack("<Q", 8) + b"{nope!!}" + data,
        "unknown_dtype": with_header({**header, first: {**header[first], "dtype": "Q7"}}),
        "wrong_byte_count": with_header({**header, first: {**header[first],
                                                            "shape": [10**3, 10**3]}}),
        "overlap": with_header({**header, "clone": dict(header[first])}),
        "negative_dim": with_header({**header, first: {**header[first], "shape": [-2, 4]}}),
    }
    names = []
    for name, content in sorted(variants.items()):
        path = os.path.join(directory, name + ".safetensors")
        with open(path, "wb") as f:
            f.write(content)
        assert python_rejects(path), f"the Python library accepts {name}"
        names.append(name)
    return names


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_io_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(1234)
    generator = torch.Generator().manual_seed(1234)

    numpy_path = make_numpy_file(outdir, rng)
    torch_path = make_torch_file(outdir, generator)
    sharded_dir, weight_map = make_sharded_checkpoint(outdir, generator)

    files = {os.path.relpath(p, outdir): describe_file(p) for p in (numpy_path, torch_path)}
    for shard in sorted(set(weight_map.values())):
        files[os.path.join("sharded", shard)] = describe_file(os.path.join(sharded_dir, shard))
    expected = {
        "files": files,
        "sharded": {"dir": "sharded", "weight_map": weight_map},
        "rejected": make_rejected_files(outdir, numpy_path),
    }
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
