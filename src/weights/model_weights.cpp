#include "finetune/weights/model_weights.h"

#include <set>

#include "finetune/io/safetensors.h"
#include "finetune/model/moe_names.h"
#include "finetune/weights/expert_weights_4bit.h"
#include "finetune/weights/projection_weights_4bit.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Buffers some checkpoints carry that are not parameters of ours, and tensors outside the text model.
bool is_ignorable(const Architecture& architecture, const std::string& name) {
  for (const auto& prefix : architecture.ignored_checkpoint_prefixes)
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

}  // namespace

std::string checkpoint_tensor_name(const Architecture& architecture, const CheckpointFiles& files,
                                   const std::string& name) {
  if (files.contains(name)) return name;
  for (const auto& [model_prefix, stored_prefix] : architecture.checkpoint_prefix_aliases) {
    if (name.compare(0, model_prefix.size(), model_prefix) != 0) continue;
    const std::string stored = stored_prefix + name.substr(model_prefix.size());
    if (files.contains(stored)) return stored;
  }
  return name;
}

void load_weights(CausalLM& model, const std::string& model_dir) {
  const auto files = CheckpointFiles::open_dir(model_dir);
  const Architecture& architecture = model.architecture();
  std::set<std::string> expected;
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model.named_parameters()) {
    if (parameter.is_meta()) continue;  // a 4-bit expert stack: load_expert_stacks_4bit's
    // A MoE model's expert stacks come from one checkpoint tensor per expert (Note [Expert tensors]).
    for (const auto& piece : checkpoint_pieces(architecture, model.config(), name)) {
      const std::string stored = checkpoint_tensor_name(architecture, files, piece.name);
      expected.insert(stored);
      auto target = piece.expert < 0 ? parameter : parameter[piece.expert].narrow(0, piece.row_begin, piece.rows);
      copy_weight(target, files, stored);
    }
  }
  if (model.projections_4bit()) {
    load_projections_4bit(model, files, expected);
    load_expert_stacks_4bit(model, files, expected);
  }
  const std::string tied_lm_head = checkpoint_tensor_name(architecture, files, architecture.lm_head);
  for (const auto& name : files.tensor_names()) {
    if (expected.count(name) == 0 && !is_ignorable(architecture, name)) {
      if (name == tied_lm_head && model.config().tie_word_embeddings) continue;  // a tied copy
      throw Error(model_dir + ": unexpected tensor '" + name + "' for " + model.config().architecture +
                  " (does config.json match the weights?)");
    }
  }
}

}  // namespace finetune
