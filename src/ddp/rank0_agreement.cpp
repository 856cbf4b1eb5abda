#include "finetune/ddp/rank0_agreement.h"

#include <exception>

namespace finetune {

std::string Rank0Outcome::message(const std::string& what) const {
  return error.empty() ? what + " failed on rank 0" : error;
}

Rank0Outcome run_on_rank0_then_agree(Communicator& communicator, const at::Device& device, const std::string& what,
                                     const std::function<void()>& work) {
  Rank0Outcome outcome;
  if (communicator.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      outcome.error = e.what();
    }
  }
  auto failed = at::full({1}, outcome.error.empty() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble).device(device));
  communicator.all_reduce(failed, what);
  outcome.failed = failed.item<double>() != 0;
  return outcome;
}

}  // namespace finetune
