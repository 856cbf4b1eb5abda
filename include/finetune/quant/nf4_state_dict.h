// A 4-bit weight in transformers' saved layout: what bitsandbytes' Linear4bit._save_to_state_dict
// writes for its `<prefix>.weight` (QuantState.as_dict(packed=True)) and save_pretrained stores in
// model.safetensors. Tensor names are "<prefix>.weight" + suffix:
//   ""                                    packed codes, uint8 ((numel + 1) / 2, 1)
//   ".absmax"                             uint8 (blocks,) when nested, else fp32 (blocks,)
//   ".quant_map"                          fp32 (16,)
//   ".nested_absmax"                      fp32 (ceil(blocks / nested_blocksize),), nested only
//   ".nested_quant_map"                   fp32 (256,), nested only
//   ".quant_state.bitsandbytes__<type>"   uint8 (bytes,): the UTF-8 JSON of the non-tensor items, as
//        json.dumps writes it: {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16",
//        "shape": [out, in], "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": <repr>}
//        (the last three only when nested; nested_offset is Python's repr of the fp32 offset)
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/quant/nf4.h"

namespace finetune {

// ".quant_state.bitsandbytes__nf4" / "...__fp4".
std::string quant_state_suffix(QuantType4bit type);

// The JSON text bitsandbytes packs into the quant_state tensor for w (offset read from its device).
std::string quant_state_json(const Nf4Weight& w);

// (suffix, tensor) in bitsandbytes' state_dict order; the tensors are w's own, on w's device,
// except the quant_state bytes, made on the CPU (as bitsandbytes' pack_dict_to_tensor makes them).
std::vector<std::pair<std::string, at::Tensor>> nf4_state_dict(const Nf4Weight& w);

// A checkpoint's tensor by full name, or an undefined tensor when it has none.
using TensorLookup = std::function<at::Tensor(const std::string& name)>;

// Which 4-bit type the checkpoint saved `weight_name` ("<prefix>.weight") as: the type whose
// quant_state tensor it has, nullopt for a plain weight; both present is an Error.
std::optional<QuantType4bit> saved_quant_type(const std::string& weight_name, const TensorLookup& lookup);

// Rebuilds the quantized weight `weight_name` from those tensors (used as given, without a copy,
// on the device of the packed codes), validating the set: every tensor present with its dtype and
// shape, the JSON's keys and values (quant_type matching the tensor's suffix, blocksize one of
// bitsandbytes', dtype, shape agreeing with the packed codes' length), quant_map equal to
// bitsandbytes' table. Errors name the offending tensor and field.
Nf4Weight nf4_from_state_dict(const std::string& weight_name, const TensorLookup& lookup);

}  // namespace finetune
