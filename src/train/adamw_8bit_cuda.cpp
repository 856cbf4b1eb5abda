// The host side of AdamW8bit's CUDA path: the kernel's table of tensors (train/cuda/
// adamw_8bit_kernel.h), uploaded once and again only when an address in it changes. In training
// none does (gradients are views into the reducer's buckets, Note [Gradients are views into bucket
// buffers]), so a step is one kernel launch with no host-device copy and no synchronisation.
#include "finetune/train/adamw_8bit.h"

#include <cstring>

#include "finetune/util/errors.h"

#ifdef FINETUNE_WITH_CUDA
#include "cuda/adamw_8bit_kernel.h"
#include "finetune/kernels/kernel_launch.h"
#endif

namespace finetune {

#ifdef FINETUNE_WITH_CUDA

struct AdamW8bit::KernelLaunch {
  std::vector<cuda_kernels::AdamW8bitTensor> table;  // what device_table holds
  at::Tensor device_table;                           // uint8 (bytes of table,)
  at::Tensor chunk_tensor;                           // int32 (chunks,): the table index of each chunk
};

void AdamW8bit::start_kernel() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& p = parameters_[i];
    if (!p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_contiguous()) {
      throw Error("8-bit AdamW: the CUDA kernel takes contiguous fp32 CUDA parameters; parameter " +
                  std::to_string(i) + " is " + p.toString());
    }
  }
  kernel_ = std::make_shared<KernelLaunch>();
}

void AdamW8bit::step_kernel(double lr) {
  if (parameters_.empty()) return;
  std::vector<cuda_kernels::AdamW8bitTensor> table;
  int64_t chunks = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& p = parameters_[i];
    const auto& grad = p.grad();
    if (!grad.defined() || grad.scalar_type() != at::kFloat || !grad.is_contiguous() || grad.device() != p.device()) {
      throw Error("8-bit AdamW: parameter " + std::to_string(i) + " needs a contiguous fp32 gradient on " +
                  p.device().str() + ", it has " + (grad.defined() ? grad.toString() : std::string("none")));
    }
    auto& m = moments_[i];
    cuda_kernels::AdamW8bitTensor t{};
    t.param = p.data_ptr<float>();
    t.grad = grad.data_ptr<float>();
    t.state1 = m.state1.data_ptr();
    t.state2 = m.state2.data_ptr();
    t.absmax1 = m.blockwise() ? m.absmax1.data_ptr<float>() : nullptr;
    t.absmax2 = m.blockwise() ? m.absmax2.data_ptr<float>() : nullptr;
    t.numel = p.numel();
    t.first_chunk = chunks;
    t.blockwise = m.blockwise() ? 1 : 0;
    chunks += (t.numel + cuda_kernels::kAdamW8bitChunkSize - 1) / cuda_kernels::kAdamW8bitChunkSize;
    table.push_back(t);
  }
  auto& k = *kernel_;
  const size_t bytes = table.size() * sizeof(cuda_kernels::AdamW8bitTensor);
  if (table.size() != k.table.size() || std::memcmp(table.data(), k.table.data(), bytes) != 0) {
    const auto device = parameters_.front().device();
    k.device_table = at::from_blob(table.data(), {static_cast<int64_t>(bytes)}, at::kByte).to(device);
    std::vector<int32_t> owners;
    owners.reserve(static_cast<size_t>(chunks));
    for (size_t i = 0; i < table.size(); ++i) {
      const int64_t end = i + 1 < table.size() ? table[i + 1].first_chunk : chunks;
      owners.insert(owners.end(), static_cast<size_t>(end - table[i].first_chunk), static_cast<int32_t>(i));
    }
    k.chunk_tensor = at::from_blob(owners.data(), {chunks}, at::kInt).to(device);
    k.table = std::move(table);
  }
  const cuda_kernels::AdamW8bitScalars scalars{
      static_cast<float>(options_.beta1), static_cast<float>(options_.beta2), static_cast<float>(options_.eps),
      static_cast<float>(lr), static_cast<float>(options_.weight_decay), static_cast<int>(step_count_)};
  cuda_kernels::check_launch(
      cuda_kernels::adamw_8bit_step(reinterpret_cast<const cuda_kernels::AdamW8bitTensor*>(k.device_table.data_ptr()),
                                    k.chunk_tensor.data_ptr<int32_t>(), chunks, signed_map_.data_ptr<float>(),
                                    unsigned_map_.data_ptr<float>(), scalars,
                                    cuda_kernels::current_stream(parameters_.front())),
      "adamw_8bit_step");
}

#else

struct AdamW8bit::KernelLaunch {};

void AdamW8bit::start_kernel() {
  throw Error("8-bit AdamW: this build has no CUDA kernels (FINETUNE_WITH_CUDA is off)");
}

void AdamW8bit::step_kernel(double) { throw Error("8-bit AdamW: this build has no CUDA kernels"); }

#endif

}  // namespace finetune
