#include "finetune/quant/nf4_state_dict.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

// QuantState.as_dict's dtype strings: str(torch.<dtype>).strip("torch.").
const char* dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: throw Error("quant_state: no bitsandbytes dtype name for " + std::string(c10::toString(type)));
  }
}

at::ScalarType parse_dtype(const std::string& name, const std::string& context) {
  for (const auto type : {at::kFloat, at::kBFloat16, at::kHalf}) {
    if (name == dtype_name(type)) return type;
  }
  throw Error(context + ": expected \"bfloat16\", \"float16\" or \"float32\", got \"" + name + "\"");
}

// Python's repr(float), which json.dumps writes: the shortest digits that read back as x, in
// positional notation when the decimal exponent is in [-4, 16), else as d.ddde±XX.
std::string python_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific);
  std::string text(buffer, result.ptr);  // [-]d[.ddd]e±XX
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const auto e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  const int point = exponent + 1;  // digits d1 d2 ... stand for 0.d1d2... x 10^point
  const int count = static_cast<int>(digits.size());
  std::string out;
  if (point <= -4 || point > 16) {
    out = digits.substr(0, 1) + (count > 1 ? "." + digits.substr(1) : "");
    const std::string magnitude = std::to_string(std::abs(exponent));
    out += std::string("e") + (exponent < 0 ? "-" : "+") + (magnitude.size() < 2 ? "0" : "") + magnitude;
  } else if (point <= 0) {
    out = "0." + std::string(-point, '0') + digits;
  } else if (point >= count) {
    out = digits + std::string(point - count, '0') + ".0";
  } else {
    out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return negative ? "-" + out : out;
}

at::Tensor json_bytes(const std::string& text) {
  auto bytes = at::empty({static_cast<int64_t>(text.size())}, at::TensorOptions().dtype(at::kByte));
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()));
  return bytes;
}

// Reading one weight's tensors: every failure names the tensor.
class SavedWeight {
 public:
  SavedWeight(std::string weight_name, const TensorLookup& lookup) : name_(std::move(weight_name)), lookup_(lookup) {}

  const std::string& name() const { return name_; }
  bool has(const std::string& suffix) const { return lookup_(name_ + suffix).defined(); }

  // The tensor name_ + suffix: present, of `type`, with exactly `sizes`.
  at::Tensor get(const std::string& suffix, at::ScalarType type, at::IntArrayRef sizes) const {
    const std::string tensor = name_ + suffix;
    auto t = lookup_(tensor);
    if (!t.defined()) throw Error("4-bit weight " + name_ + ": missing tensor " + tensor);
    if (t.scalar_type() != type) {
      throw Error("tensor " + tensor + ": expected dtype " + std::string(c10::toString(type)) + ", got " +
                  std::string(c10::toString(t.scalar_type())));
    }
    if (t.sizes() != sizes) {
      throw Error("tensor " + tensor + ": expected shape " + c10::str(sizes) + ", got " + c10::str(t.sizes()));
    }
    return t.contiguous();
  }

  at::Tensor get_bytes(const std::string& suffix) const {
    const std::string tensor = name_ + suffix;
    auto t = lookup_(tensor);
    if (t.scalar_type() != at::kByte || t.dim() != 1) {
      throw Error("tensor " + tensor + ": expected a 1-D uint8 tensor of JSON, got " + t.toString() + " " +
                  c10::str(t.sizes()));
    }
    return t.to(at::kCPU).contiguous();
  }

 private:
  std::string name_;
  const TensorLookup& lookup_;
};

// The quant_state JSON's fields, checked (bitsandbytes' QuantState.from_dict reads the same keys).
struct QuantStateFields {
  QuantType4bit quant_type = QuantType4bit::NF4;
  int64_t blocksize = 0;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  bool nested = false;
  int64_t nested_blocksize = 0;
  double nested_offset = 0.0;
};

QuantStateFields parse_quant_state(const at::Tensor& bytes, const std::string& tensor, QuantType4bit suffix_type) {
  const std::string text(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), bytes.numel());
  const auto json = parse_json(text, "tensor " + tensor);
  if (!json.is_object()) throw Error("tensor " + tensor + ": expected a JSON object, got " + json_excerpt(json));
  static const std::set<std::string> kKeys = {"quant_type", "blocksize",        "dtype",        "shape",
                                              "nested_blocksize", "nested_dtype", "nested_offset"};
  for (const auto& item : json.items()) {
    if (kKeys.count(item.key()) == 0) throw Error("tensor " + tensor + ": unknown quant_state key \"" + item.key() + "\"");
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = json.find(key);
    if (it == json.end()) throw Error("tensor " + tensor + ": quant_state has no \"" + std::string(key) + "\"");
    return *it;
  };
  const auto string_field = [&](const char* key) {
    const auto& value = field(key);
    if (!value.is_string()) throw Error("tensor " + tensor + ": \"" + key + "\" must be a string, got " + json_excerpt(value));
    return value.get<std::string>();
  };
  const auto integer_field = [&](const char* key) {
    const auto& value = field(key);
    if (!value.is_number_integer()) {
      throw Error("tensor " + tensor + ": \"" + key + "\" must be an integer, got " + json_excerpt(value));
    }
    return value.get<int64_t>();
  };

  QuantStateFields fields;
  fields.quant_type = parse_quant_type(string_field("quant_type"), "tensor " + tensor);
  if (fields.quant_type != suffix_type) {
    throw Error("tensor " + tensor + ": quant_type \"" + quant_type_name(fields.quant_type) +
                "\" does not match the tensor's name");
  }
  fields.blocksize = integer_field("blocksize");
  check_blocksize_4bit(fields.blocksize, "tensor " + tensor);
  fields.dtype = parse_dtype(string_field("dtype"), "tensor " + tensor + " \"dtype\"");
  const auto& shape = field("shape");
  if (!shape.is_array() || shape.empty()) {
    throw Error("tensor " + tensor + ": \"shape\" must be a list of dimensions, got " + json_excerpt(shape));
  }
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      throw Error("tensor " + tensor + ": \"shape\" must hold non-negative integers, got " + json_excerpt(shape));
    }
    fields.shape.push_back(d.get<int64_t>());
  }
  const int nested_keys = static_cast<int>(json.count("nested_blocksize") + json.count("nested_dtype") +
                                           json.count("nested_offset"));
  if (nested_keys != 0 && nested_keys != 3) {
    throw Error("tensor " + tensor + ": quant_state needs all of nested_blocksize, nested_dtype, nested_offset or none");
  }
  fields.nested = nested_keys == 3;
  if (fields.nested) {
    fields.nested_blocksize = integer_field("nested_blocksize");
    if (fields.nested_blocksize <= 0) {
      throw Error("tensor " + tensor + ": \"nested_blocksize\" must be positive, got " +
                  std::to_string(fields.nested_blocksize));
    }
    if (parse_dtype(string_field("nested_dtype"), "tensor " + tensor + " \"nested_dtype\"") != at::kFloat) {
      throw Error("tensor " + tensor + ": \"nested_dtype\" must be \"float32\" (the absmax's dtype)");
    }
    const auto& offset = field("nested_offset");
    if (!offset.is_number()) {
      throw Error("tensor " + tensor + ": \"nested_offset\" must be a number, got " + json_excerpt(offset));
    }
    fields.nested_offset = offset.get<double>();
  }
  return fields;
}

}  // namespace

std::string quant_state_suffix(QuantType4bit type) {
  return std::string(".quant_state.bitsandbytes__") + quant_type_name(type);
}

std::string quant_state_json(const Nf4Weight& w) {
  std::string shape = "[";
  for (size_t i = 0; i < w.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(w.shape[i]);
  shape += "]";
  std::string text = std::string("{\"quant_type\": \"") + quant_type_name(w.quant_type) +
                     "\", \"blocksize\": " + std::to_string(w.blocksize) + ", \"dtype\": \"" + dtype_name(w.dtype) +
                     "\", \"shape\": " + shape;
  if (w.nested) {
    // QuantState.as_dict: self.offset.item(), a Python float holding the fp32 offset.
    const double offset = static_cast<double>(w.offset.to(at::kCPU).item<float>());
    text += ", \"nested_blocksize\": " + std::to_string(w.nested_blocksize) + ", \"nested_dtype\": \"" +
            dtype_name(w.nested_absmax.scalar_type()) + "\", \"nested_offset\": " + python_float_repr(offset);
  }
  return text + "}";
}

std::vector<std::pair<std::string, at::Tensor>> nf4_state_dict(const Nf4Weight& w) {
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"", w.packed}, {".absmax", w.absmax}, {".quant_map", w.quant_map}};
  if (w.nested) {
    tensors.emplace_back(".nested_absmax", w.nested_absmax);
    tensors.emplace_back(".nested_quant_map", w.nested_quant_map);
  }
  tensors.emplace_back(quant_state_suffix(w.quant_type), json_bytes(quant_state_json(w)));  // on the CPU, as bnb's
  return tensors;
}

std::optional<QuantType4bit> saved_quant_type(const std::string& weight_name, const TensorLookup& lookup) {
  std::optional<QuantType4bit> found;
  for (const auto type : {QuantType4bit::NF4, QuantType4bit::FP4}) {
    if (!lookup(weight_name + quant_state_suffix(type)).defined()) continue;
    if (found) {
      throw Error("4-bit weight " + weight_name + ": both " + weight_name + quant_state_suffix(*found) + " and " +
                  weight_name + quant_state_suffix(type) + " are present");
    }
    found = type;
  }
  return found;
}

Nf4Weight nf4_from_state_dict(const std::string& weight_name, const TensorLookup& lookup) {
  const auto type = saved_quant_type(weight_name, lookup);
  if (!type) {
    throw Error("4-bit weight " + weight_name + ": missing tensor " + weight_name +
                quant_state_suffix(QuantType4bit::NF4) + " (or its fp4 twin)");
  }
  const SavedWeight saved(weight_name, lookup);
  const std::string state_tensor = weight_name + quant_state_suffix(*type);
  const auto fields = parse_quant_state(saved.get_bytes(quant_state_suffix(*type)), state_tensor, *type);

  Nf4Weight w;
  w.quant_type = fields.quant_type;
  w.blocksize = fields.blocksize;
  w.dtype = fields.dtype;
  w.shape = fields.shape;
  w.nested = fields.nested;
  w.packed = saved.get("", at::kByte, {(w.numel() + 1) / 2, 1});
  const auto device = w.packed.device();
  const auto on_device = [&](const at::Tensor& t, const std::string& suffix) {
    if (t.device() != device) {
      throw Error("tensor " + weight_name + suffix + ": on " + t.device().str() + ", the packed codes on " +
                  device.str());
    }
    return t;
  };
  w.quant_map = on_device(saved.get(".quant_map", at::kFloat, {16}), ".quant_map");
  if (!at::equal(w.quant_map.to(at::kCPU), quant_map_4bit(w.quant_type))) {
    throw Error("tensor " + weight_name + ".quant_map: differs from bitsandbytes' " + quant_type_name(w.quant_type) +
                " table, which its kernels decode with");
  }
  if (w.nested) {
    w.nested_blocksize = fields.nested_blocksize;
    w.absmax = on_device(saved.get(".absmax", at::kByte, {w.blocks()}), ".absmax");
    const int64_t nested_blocks = (w.blocks() + w.nested_blocksize - 1) / w.nested_blocksize;
    w.nested_absmax = on_device(saved.get(".nested_absmax", at::kFloat, {nested_blocks}), ".nested_absmax");
    w.nested_quant_map = on_device(saved.get(".nested_quant_map", at::kFloat, {256}), ".nested_quant_map");
    // QuantState.from_dict: torch.tensor(float(nested_offset)), an fp32 scalar.
    w.offset = at::scalar_tensor(static_cast<float>(fields.nested_offset), at::TensorOptions().dtype(at::kFloat))
                   .to(device);
  } else {
    for (const char* suffix : {".nested_absmax", ".nested_quant_map"}) {
      if (saved.has(suffix)) {
        throw Error("tensor " + weight_name + suffix + ": present, but " + state_tensor + " has no nested_* keys");
      }
    }
    w.absmax = on_device(saved.get(".absmax", at::kFloat, {w.blocks()}), ".absmax");
  }
  return w;
}

}  // namespace finetune
