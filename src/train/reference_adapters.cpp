// The DPO reference's adapters (see reference_adapters.h).
#include "finetune/train/reference_adapters.h"

#include <utility>

namespace finetune {

ReferenceAdapters::ReferenceAdapters(std::map<std::string, std::unique_ptr<LinearAdapter>> adapters)
    : adapters_(std::move(adapters)), base_model_(adapters_.empty()) {
  for (auto& [name, adapter] : adapters_) {
    if (!adapter) continue;
    for (auto& [suffix, tensor] : adapter->named_parameters()) tensor.requires_grad_(false);
  }
}

bool ReferenceAdapters::cuda_graph_safe() const {
  for (const auto& [name, adapter] : adapters_) {
    if (adapter && !adapter->cuda_graph_safe()) return false;
  }
  return true;
}

std::vector<const LinearAdapter*> ReferenceAdapters::adapters() const {
  std::vector<const LinearAdapter*> out;
  for (const auto& [name, adapter] : adapters_) {
    if (adapter) out.push_back(adapter.get());
  }
  return out;
}

ReferenceAdapters::Installed::Installed(ReferenceAdapters& reference, CausalLM& model)
    : reference_(reference), model_(model) {
  swap_all();
}

ReferenceAdapters::Installed::~Installed() { swap_all(); }

// Swapping twice restores both sides: each projection's slot (an empty one when the reference has
// no adapter there) trades places with the projection's adapter.
void ReferenceAdapters::Installed::swap_all() {
  for (auto& [name, linear] : model_.named_linears()) std::swap(linear->adapter, reference_.adapters_[name]);
}

}  // namespace finetune
