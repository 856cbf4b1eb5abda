// Before the first broadcast, every rank must hold the same trainable parameters: the same names
// in the same order with the same shapes and dtypes (c10d's verify_params_across_processes).
// Otherwise the broadcast and every bucket all-reduce would run with different sizes on different
// ranks (a hang or garbage). Every rank takes part in the same collectives whatever it holds, and
// every rank throws DistributedError when any rank differs; a rank that differs names its first
// differing parameter.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "finetune/ddp/communicator.h"

namespace finetune {

void verify_params_across_processes(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                    Communicator& communicator);

// Pure: one row per parameter, {hash of the name, dtype, number of dims, dims 0..3 (0 beyond)},
// flattened; the form in which rank 0's parameters are broadcast and compared.
std::vector<int64_t> parameter_signature(const std::vector<std::pair<std::string, at::Tensor>>& parameters);
inline constexpr int64_t kSignatureColumns = 7;

}  // namespace finetune
