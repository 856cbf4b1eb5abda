"""Tiny random mixture-of-experts models (Qwen3-MoE, Mixtral), written with transformers' own
save_pretrained (per-expert checkpoint tensors, as the hub stores them), and PEFT init adapters
on their attention and, through target_parameters, their expert stacks.

Cases cover top-1 and top-2 routing, norm_topk_prob on and off, Qwen3-MoE's mlp_only_layers and
decoder_sparse_step 2 (dense layers between sparse ones), Mixtral with and without a sliding
window shorter than the rows, tied and untied heads, and more experts than a short row reaches
(experts never hit). Router weights are scaled up so routing is decisive (no near-ties between
experts that fp32 rounding could flip).

4-bit (QLoRA) references: transformers 5.17 + bitsandbytes quantize nn.Linear layers only, so its
fused expert parameters stay 16-bit; finetune's --load_in_4bit quantizes each per-expert checkpoint
tensor on its own, as bitsandbytes quantized an expert's nn.Linear weight when transformers 4.x held
the experts as per-expert modules (bnb_quantize_experts: quantize_4bit(W, blocksize=64,
compress_statistics=True, quant_type="nf4") on the CPU). <case>_expert_nf4.safetensors holds those
bytes in transformers' saved 4-bit layout; fake_quantized_copy writes a model whose weights are
bitsandbytes' dequantized values (the reference the 4-bit forward and training are held to).

    python make_moe_fixtures.py OUT_DIR    # writes OUT_DIR/<case>/ for every case
"""
import re
import shutil
import os
import sys

import peft
import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models  # noqa: E402

VOCAB = tiny_models.VOCAB
ATTENTION_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
EXPERT_TARGETS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


def _common(**overrides):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    base.update(overrides)
    return base


def model_cases():
    """name -> (config class, config kwargs)."""
    return {
        # top-2 of 4, unnormalised top-k weights, layer 1 dense (mlp_only_layers)
        "qwen3_moe_top2": (transformers.Qwen3MoeConfig, _common(
            head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False,
            mlp_only_layers=[1])),
        # top-1 of 8, normalised, decoder_sparse_step 2: layers 1 and 3 sparse, 0 and 2 dense; tied head
        "qwen3_moe_top1_step2": (transformers.Qwen3MoeConfig, _common(
            num_hidden_layers=4, head_dim=24, num_experts=8, num_experts_per_tok=1, moe_intermediate_size=40,
            norm_topk_prob=True, decoder_sparse_step=2, tie_word_embeddings=True)),
        # top-2 of 4, no window
        "mixtral_top2": (transformers.MixtralConfig, _common(
            intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, sliding_window=None)),
        # top-1 of 8, a window shorter than the rows
        "mixtral_top1_window": (transformers.MixtralConfig, _common(
            num_hidden_layers=2, intermediate_size=40, num_local_experts=8, num_experts_per_tok=1,
            sliding_window=5)),
    }


MODEL_CLASSES = {
    transformers.Qwen3MoeConfig: transformers.Qwen3MoeForCausalLM,
    transformers.MixtralConfig: transformers.MixtralForCausalLM,
}


def make_model(name, out_dir, seed=0, dtype=torch.float32, lm_head_std=None, **config_overrides):
    """Saves the case's model (config_overrides: another vocabulary, token ids...) and returns it.
    lm_head_std: redraw the output layer with this std (generation tests: logits far apart)."""
    config_class, kwargs = model_cases()[name]
    torch.manual_seed(seed)
    config = config_class(**dict(kwargs, **config_overrides))
    model = MODEL_CLASSES[config_class](config).to(dtype)
    tiny_models.perturb_norms_and_biases(model)
    with torch.no_grad():
        for parameter_name, p in model.named_parameters():
            if parameter_name.endswith("mlp.gate.weight"):
                p.mul_(25.0)  # decisive routing
            elif ".experts." in parameter_name:
                p.mul_(5.0)   # experts that matter next to the residual
        if lm_head_std is not None:
            model.lm_head.weight.normal_(0.0, lm_head_std)
    model.save_pretrained(out_dir, safe_serialization=True)
    return model.eval()


def load_reference_model(model_dir, **kwargs):
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)


def make_init_adapter(base_dir, out_dir, r=4, alpha=8, seed=0, experts=False, use_rslora=False,
                      dtype=torch.float32):
    """A PEFT adapter on the attention projections (and, with `experts`, the expert stacks through
    target_parameters) with random non-zero A and B, so every gradient path is exercised."""
    torch.manual_seed(seed)
    model = load_reference_model(base_dir, dtype=dtype)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                             use_rslora=use_rslora, target_modules=ATTENTION_TARGETS,
                             target_parameters=EXPERT_TARGETS if experts else None)
    model = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn_like(p))
    model.save_pretrained(out_dir)
    return out_dir


EXPERT_TENSOR = re.compile(r"\.experts\.\d+\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
PROJECTION_TENSOR = re.compile(r"^model\.layers\.\d+\..*(_proj|\.w1|\.w2|\.w3)\.weight$")


def _checkpoint(model_dir):
    return load_file(os.path.join(model_dir, "model.safetensors"))


def bnb_quantize_experts(model_dir):
    """Every per-expert checkpoint tensor of model_dir (in its saved dtype, the model dtype here)
    quantized on its own by bitsandbytes on the CPU: name -> (packed, QuantState)."""
    import bitsandbytes.functional as F
    return {name: F.quantize_4bit(tensor, blocksize=64, compress_statistics=True, quant_type="nf4")
            for name, tensor in _checkpoint(model_dir).items() if EXPERT_TENSOR.search(name)}


def write_expert_nf4(model_dir, path):
    """bnb_quantize_experts' bytes as transformers saves a Linear4bit weight: <name> (packed codes)
    and <name>.<QuantState.as_dict(packed=True) key>."""
    tensors = {}
    for name, (packed, state) in bnb_quantize_experts(model_dir).items():
        tensors[name] = packed
        tensors.update({f"{name}.{key}": value for key, value in state.as_dict(packed=True).items()})
    save_file(tensors, path)


def fake_quantized_copy(model_dir, out_dir, projections=False):
    """A copy of model_dir whose expert tensors (and, with `projections`, every decoder projection:
    attention and dense MLP, as Linear4bit quantizes them) hold bitsandbytes'
    dequantize_4bit(quantize_4bit(W)) values in W's dtype; everything else unchanged."""
    import bitsandbytes.functional as F
    import bnb_cpu
    bnb_cpu.use_portable_cpu_kernels()  # bitsandbytes' own arithmetic on every host
    shutil.copytree(model_dir, out_dir)
    tensors = _checkpoint(model_dir)
    for name, tensor in tensors.items():
        if EXPERT_TENSOR.search(name) or (projections and PROJECTION_TENSOR.search(name)):
            packed, state = F.quantize_4bit(tensor, blocksize=64, compress_statistics=True, quant_type="nf4")
            tensors[name] = F.dequantize_4bit(packed, state).to(tensor.dtype).contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def main(out_root):
    for name in model_cases():
        base = os.path.join(out_root, name)
        make_model(name, base)
        make_init_adapter(base, os.path.join(out_root, name + "_adapter_attention"))
        make_init_adapter(base, os.path.join(out_root, name + "_adapter_experts"), experts=True)
        write_expert_nf4(base, os.path.join(out_root, name + "_expert_nf4.safetensors"))
        print(f"wrote {base}")


if __name__ == "__main__":
    main(sys.argv[1])
