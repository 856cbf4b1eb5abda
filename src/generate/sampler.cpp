#include "finetune/generate/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace finetune {

TokenSampler::TokenSampler(const GenerationConfig& config, const at::Device& device) : sampling_(config.sampling()) {
  if (!sampling_) return;
  generator_ = device.is_cuda() ? at::detail::getCUDAHooks().getNewGenerator(device.index())
                                : at::detail::createCPUGenerator(config.seed);
  std::lock_guard<std::mutex> lock(generator_.mutex());
  generator_.set_current_seed(config.seed);
}

at::Tensor TokenSampler::next_tokens(const at::Tensor& scores) {
  if (!sampling_) return scores.argmax(-1);
  auto probs = scores.softmax(-1);                                            // (B, V)
  return at::multinomial(probs, 1, /*replacement=*/false, generator_).squeeze(1);  // (B)
}

}  // namespace finetune
