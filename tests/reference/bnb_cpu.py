"""bitsandbytes 0.50.2's native CPU 4-bit dequantization is wrong on some hosts: on an AVX512 CPU
(torch's cpu capability "AVX512") its kernel returned values up to 2.2 away from code[q] * absmax
for a 128x96 NF4 weight, while bitsandbytes' own device-independent implementation
(backends/default/ops.py, "matches C++ / CUDA behavior") and its CUDA kernel agree with that
formula. (On AVX512-BF16 CPUs Linear4bit's eval-mode forward also takes a repacked-weight GEMM of
its own.) On such a host the CPU kernel is routed to that implementation (with the native kernels'
-0.0 for FP4's code 8), so that the references
(fixtures, transformers' 4-bit forward, PEFT + bitsandbytes QLoRA) are bitsandbytes' arithmetic on
every machine. Quantization is not touched: its bytes are the native kernel's everywhere.
"""
import torch

_override = None  # keeps the torch.library registration alive


def _generic(A, absmax, blocksize, quant_type, shape, dtype):
    from bitsandbytes.backends.default import ops as default_ops
    from bitsandbytes.backends.utils import _get_4bit_code
    A = A.view(torch.uint8) if A.dtype != torch.uint8 else A
    code = _get_4bit_code(quant_type, A.device)
    # The native kernels (CPU and CUDA) decode FP4's code 8 (sign bit, magnitude 0) to -0.0; the
    # generic table holds +0.0. bitsandbytes' CPU op itself runs the generic code (and so +0.0) for
    # an odd last dimension and for blocksize >= 2048 on AVX512 (backends/cpu/ops.py).
    generic_in_bnb = shape[-1] % 2 != 0 or (blocksize >= 2048 and torch.backends.cpu.get_cpu_capability() == "AVX512")
    if quant_type == "fp4" and not generic_in_bnb:
        code = code.clone()
        code[8] = -0.0
    return default_ops._dequantize_4bit_compute(A.reshape(-1), absmax, code, blocksize, shape, dtype)


def native_cpu_dequantize_is_wrong():
    import bitsandbytes.functional as F
    weight = torch.randn(128, 96, generator=torch.Generator().manual_seed(0))
    packed, state = F.quantize_4bit(weight, quant_type="nf4", compress_statistics=False)
    native = torch.ops.bitsandbytes.dequantize_4bit(packed, state.absmax, 64, "nf4", weight.shape, torch.float32)
    generic = _generic(packed, state.absmax, 64, "nf4", weight.shape, torch.float32)
    return not torch.equal(native, generic)


def use_portable_cpu_kernels():
    """bitsandbytes' arithmetic as on every host and on CUDA: Linear4bit's CPU inference shortcut
    for AVX512-BF16 CPUs (a repacked weight and another GEMM, taken only when not training) is
    turned off, so a 4-bit forward is dequantize_4bit + matmul as in training; and
    bitsandbytes::dequantize_4bit on CPU is routed to bitsandbytes' generic implementation when the
    native kernel disagrees with it on this host. Returns whether the latter was needed."""
    global _override
    import bitsandbytes.nn.modules as modules
    modules.has_avx512bf16 = lambda: False  # read by Linear4bit.__init__
    if _override is not None:
        return True
    if not native_cpu_dequantize_is_wrong():
        return False
    _override = torch.library.Library("bitsandbytes", "IMPL")
    _override.impl("dequantize_4bit", _generic, "CPU", allow_override=True)
    assert not native_cpu_dequantize_is_wrong()
    return True
