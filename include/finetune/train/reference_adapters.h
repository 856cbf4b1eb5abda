// The adapters a DPO reference forward runs with, as TRL 1.16 defines the reference of a PEFT
// model without a separate ref_model: none (the base model: PEFT's disable_adapter), or a frozen
// copy of the starting adapter (TRL's ref_adapter_name: the adapter loaded twice, one copy
// trained). The copy is kept apart from the model and swapped into its projections only for the
// reference forward; its tensors never require gradients.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "finetune/model/causal_lm.h"
#include "finetune/model/linear.h"

namespace finetune {

class ReferenceAdapters {
 public:
  ReferenceAdapters() = default;  // none: the reference is the base model
  // Adopts `adapters` (projection name, as CausalLM::named_linears names it -> adapter) and freezes
  // their tensors.
  explicit ReferenceAdapters(std::map<std::string, std::unique_ptr<LinearAdapter>> adapters);

  bool is_base_model() const { return base_model_; }
  // Whether a forward through them may be captured as a CUDA graph (LinearAdapter::cuda_graph_safe).
  bool cuda_graph_safe() const;
  // The adapters, for their derived tensors (LinearAdapter::refresh_derived_tensors).
  std::vector<const LinearAdapter*> adapters() const;

  // For its lifetime every projection of `model` runs its reference adapter (or none); the
  // model's own adapters are put back, unchanged, when it ends.
  class Installed {
   public:
    Installed(ReferenceAdapters& reference, CausalLM& model);
    ~Installed();
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    void swap_all();
    ReferenceAdapters& reference_;
    CausalLM& model_;
  };

 private:
  std::map<std::string, std::unique_ptr<LinearAdapter>> adapters_;  // a projection's slot, swapped in and out
  bool base_model_ = true;
};

}  // namespace finetune
