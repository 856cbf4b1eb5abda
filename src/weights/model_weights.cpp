#include "finetune/weights/model_weights.h"

#include <set>

#include "finetune/io/safetensors.h"
#include "finetune/weights/projection_weights_4bit.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Buffers some checkpoints carry that are not parameters of ours.
bool is_ignorable(const std::string& name) {
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

}  // namespace

void load_weights(CausalLM& model, const std::string& model_dir) {
  const auto files = CheckpointFiles::open_dir(model_dir);
  std::set<std::string> expected;
  at::NoGradGuard no_grad;
  for (auto& [name, parameter] : model.named_parameters()) {
    expected.insert(name);
    parameter.copy_(weight_view(files, name, parameter.sizes()));
  }
  if (model.projections_4bit()) load_projections_4bit(model, files, expected);
  for (const auto& name : files.tensor_names()) {
    if (expected.count(name) == 0 && !is_ignorable(name)) {
      if (name == model.architecture().lm_head && model.config().tie_word_embeddings) continue;  // a tied copy
      throw Error(model_dir + ": unexpected tensor '" + name + "' for " + model.config().architecture +
                  " (does config.json match the weights?)");
    }
  }
}

}  // namespace finetune
