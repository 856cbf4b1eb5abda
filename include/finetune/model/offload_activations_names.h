// --offload_activations' values: one list for the option parser, its help and the mode the model
// reads (activation_offload.h). Header-only and LibTorch-free, so the option parser can use it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace finetune {

// Off, on, or on for a CUDA device and off on the CPU (offload_above_bytes in activation_offload.h).
enum class OffloadActivations { kOff, kOn, kAuto };

inline const std::vector<std::string>& offload_activations_names() {
  static const std::vector<std::string> names = {"true", "false", "auto"};
  return names;
}

// A name of offload_activations_names() -> its mode (the parser has already refused any other).
inline OffloadActivations offload_activations_from_name(const std::string& name) {
  if (name == "true") return OffloadActivations::kOn;
  if (name == "false") return OffloadActivations::kOff;
  if (name == "auto") return OffloadActivations::kAuto;
  throw std::invalid_argument("offload_activations: \"" + name + "\" is none of true, false, auto");
}

}  // namespace finetune
