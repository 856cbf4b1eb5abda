#include "finetune/train/rng_state.h"

#include <mutex>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

at::Tensor get_state(const at::Device& device) {
  auto generator = device.is_cpu() ? at::globalContext().defaultGenerator(at::kCPU)
                                   : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state().clone();
}

void set_state(const at::Device& device, const at::Tensor& state) {
  auto generator = device.is_cpu() ? at::globalContext().defaultGenerator(at::kCPU)
                                   : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Each rank's byte vector in its own row of a (world, length) int32 tensor, summed over the ranks:
// an all-gather built from the one collective every backend has.
std::vector<at::Tensor> gather_bytes(const at::Tensor& bytes, Communicator& communicator, const at::Device& device,
                                     const std::string& what) {
  const int world = communicator.world_size();
  const int rank = communicator.rank();
  auto lengths = at::zeros({world}, at::TensorOptions().dtype(at::kLong).device(device));
  lengths[rank].fill_(bytes.numel());
  communicator.all_reduce(lengths, what + " sizes");
  const auto host_lengths = lengths.cpu();
  const int64_t length = host_lengths.max().item<int64_t>();
  if (host_lengths.min().item<int64_t>() != length) {
    throw Error(what + ": the ranks' generator states differ in size (ranks on different device types?)");
  }
  auto rows = at::zeros({world, length}, at::TensorOptions().dtype(at::kInt));
  rows[rank].copy_(bytes.to(at::kInt));
  auto on_device = rows.to(device);
  communicator.all_reduce(on_device, what);
  const auto gathered = on_device.cpu().to(at::kByte);
  std::vector<at::Tensor> out;
  for (int r = 0; r < world; ++r) out.push_back(gathered[r].clone());
  return out;
}

}  // namespace

void seed_generators(uint64_t seed) { at::manual_seed(seed); }

GeneratorStates capture_generators(const at::Device& device) {
  return {get_state(at::Device(at::kCPU)), get_state(device)};
}

void restore_generators(const at::Device& device, const GeneratorStates& states) {
  set_state(at::Device(at::kCPU), states.cpu);
  if (!device.is_cpu()) set_state(device, states.device);
}

std::vector<GeneratorStates> gather_generators(const GeneratorStates& local, Communicator& communicator,
                                               const at::Device& device) {
  const auto cpu = gather_bytes(local.cpu, communicator, device, "CPU generator states");
  const auto on_device = gather_bytes(local.device, communicator, device, "device generator states");
  std::vector<GeneratorStates> out;
  for (size_t r = 0; r < cpu.size(); ++r) out.push_back({cpu[r], on_device[r]});
  return out;
}

TrainingGenerators::TrainingGenerators(const at::Device& device, Communicator& communicator, uint64_t seed)
    : device_(device), communicator_(&communicator) {
  seed_generators(seed);
}

std::vector<GeneratorStates> TrainingGenerators::state() const {
  return gather_generators(capture_generators(device_), *communicator_, device_);
}

void TrainingGenerators::load_state(const std::vector<GeneratorStates>& states) {
  if (static_cast<int64_t>(states.size()) != communicator_->world_size()) return;
  restore_generators(device_, states.at(static_cast<size_t>(communicator_->rank())));
}

}  // namespace finetune
