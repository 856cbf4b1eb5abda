// The random number generators that affect training (LoRA dropout draws from the default
// generator of the model's device, and of the CPU): seeded from --seed at the start as HF's
// set_seed does, captured on every rank for a checkpoint, restored on resume.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "finetune/ddp/communicator.h"

namespace finetune {

struct GeneratorStates {
  at::Tensor cpu;     // uint8, the CPU generator's state
  at::Tensor device;  // uint8, the model device's generator state (the CPU's again on a CPU run)
};

// Seeds the CPU generator and every CUDA device's (at::manual_seed).
void seed_generators(uint64_t seed);

GeneratorStates capture_generators(const at::Device& device);
void restore_generators(const at::Device& device, const GeneratorStates& states);

// Every rank's states, in rank order, on every rank (a collective: all ranks call it).
std::vector<GeneratorStates> gather_generators(const GeneratorStates& local, Communicator& communicator,
                                               const at::Device& device);

// The generators as a trainer component: seeded when built; state() is every rank's, in rank
// order (a collective: all ranks call it); load_state() restores this rank's when `states` has one
// per rank of this run. With another world size every rank keeps its freshly seeded generators
// (each rank's draws differ from the original run's then anyway).
class TrainingGenerators {
 public:
  TrainingGenerators(const at::Device& device, Communicator& communicator, uint64_t seed);
  std::vector<GeneratorStates> state() const;
  void load_state(const std::vector<GeneratorStates>& states);

 private:
  at::Device device_;
  Communicator* communicator_;
};

}  // namespace finetune
