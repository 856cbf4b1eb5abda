#include "finetune/ddp/param_verification.h"

#include "finetune/ddp/ddp_error.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// FNV-1a: stable across processes and builds (std::hash is not guaranteed to be).
int64_t stable_hash(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return static_cast<int64_t>(hash >> 1);  // non-negative, exact in int64
}

std::string describe_row(const std::vector<int64_t>& signature, size_t row) {
  const int64_t* r = signature.data() + row * kSignatureColumns;
  std::vector<std::string> dims;
  for (int64_t d = 0; d < r[2] && d < 4; ++d) dims.push_back(std::to_string(r[3 + d]));
  return "shape [" + join(dims, ", ") + "] " + c10::toString(static_cast<at::ScalarType>(r[1]));
}

}  // namespace

std::vector<int64_t> parameter_signature(const std::vector<std::pair<std::string, at::Tensor>>& parameters) {
  std::vector<int64_t> out;
  out.reserve(parameters.size() * kSignatureColumns);
  for (const auto& [name, tensor] : parameters) {
    out.push_back(stable_hash(name));
    out.push_back(static_cast<int64_t>(tensor.scalar_type()));
    out.push_back(tensor.dim());
    for (int64_t d = 0; d < 4; ++d) out.push_back(d < tensor.dim() ? tensor.size(d) : 0);
  }
  return out;
}

void verify_params_across_processes(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                    Communicator& communicator) {
  const int rank = communicator.rank();
  const int world = communicator.world_size();
  if (world == 1) return;
  const auto device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  const auto local = parameter_signature(parameters);

  // 1. Rank 0's parameter count, then its signature (every rank allocates rank 0's size).
  auto count = at::full({1}, static_cast<int64_t>(parameters.size()), i64);
  communicator.broadcast(count, 0, "parameter count check");
  const int64_t root_count = count.cpu().item<int64_t>();
  auto root_signature = rank == 0 ? at::tensor(local, at::kLong).to(device)
                                  : at::zeros({root_count * kSignatureColumns}, i64);
  communicator.broadcast(root_signature, 0, "parameter shape check");
  const auto root_cpu = root_signature.cpu();
  const std::vector<int64_t> root(root_cpu.data_ptr<int64_t>(), root_cpu.data_ptr<int64_t>() + root_cpu.numel());

  // 2. Compare with our own; the first difference, if any.
  std::string difference;
  const size_t common = std::min(parameters.size(), static_cast<size_t>(root_count));
  for (size_t i = 0; i < common && difference.empty(); ++i) {
    const auto* mine = local.data() + i * kSignatureColumns;
    const auto* theirs = root.data() + i * kSignatureColumns;
    if (!std::equal(mine, mine + kSignatureColumns, theirs)) {
      difference = "parameter " + std::to_string(i) + " '" + parameters[i].first + "' has " + describe_row(local, i) +
                   (mine[0] == theirs[0] ? "" : " (and another name)") + " on rank " + std::to_string(rank) +
                   ", rank 0 has " + describe_row(root, i);
    }
  }
  if (difference.empty() && parameters.size() != static_cast<size_t>(root_count)) {
    difference = "rank " + std::to_string(rank) + " holds " + std::to_string(parameters.size()) +
                 " trainable parameters, rank 0 holds " + std::to_string(root_count) +
                 (parameters.size() > common ? " (first extra: '" + parameters[common].first + "')" : "");
  }

  // 3. Every rank learns which ranks differ, so all of them stop together.
  auto differs = at::zeros({world}, i64);
  if (!difference.empty()) differs[rank].fill_(1);
  communicator.all_reduce(differs, "parameter check result");
  const auto flags = differs.cpu();
  std::vector<std::string> ranks;
  for (int r = 0; r < world; ++r) {
    if (flags[r].item<int64_t>() != 0) ranks.push_back(std::to_string(r));
  }
  if (ranks.empty()) return;
  throw distributed_error(rank, "trainable parameter check:",
                          "ranks " + join(ranks, ", ") + " differ from rank 0" +
                              (difference.empty() ? "" : ": " + difference) +
                              "; every rank must build the same adapter (same --r, --target_modules, model)");
}

}  // namespace finetune
