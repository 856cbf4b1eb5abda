#include "finetune/model/embedding_noise.h"

#include <string>

#include <ATen/Context.h>

#include "finetune/util/errors.h"
#include "finetune/util/splitmix64.h"

namespace finetune {

double embedding_noise_magnitude(double alpha, int64_t padded_length, int64_t hidden_size) {
  const auto dims = at::scalar_tensor(padded_length * hidden_size, at::TensorOptions().dtype(at::kLong));
  return (at::sqrt(dims).reciprocal() * alpha).item<double>();  // float32, as transformers' mag_norm
}

at::Tensor add_embedding_noise(const at::Tensor& embedded, const EmbeddingNoise& noise) {
  if (!(noise.alpha > 0) || noise.padded_length <= 0) {
    throw Error("embedding noise: alpha " + std::to_string(noise.alpha) + " and padded length " +
                std::to_string(noise.padded_length) + " must be positive");
  }
  const double magnitude = embedding_noise_magnitude(noise.alpha, noise.padded_length, embedded.size(-1));
  at::Generator generator = at::globalContext().defaultGenerator(embedded.device()).clone();
  generator.set_current_seed(noise.seed);
  const auto drawn = at::empty_like(embedded).uniform_(-magnitude, magnitude, generator);  // (B, T, C)
  return embedded + drawn;
}

uint64_t embedding_noise_seed(uint64_t run_seed, int64_t step, int64_t rank, int64_t micro_batch) {
  uint64_t h = run_seed;
  for (const int64_t value : {step, rank, micro_batch}) h = splitmix64(h ^ static_cast<uint64_t>(value));
  return h;
}

}  // namespace finetune
