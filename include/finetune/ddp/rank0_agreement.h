// "Do it on rank 0, then agree": work that only rank 0 does (writing a checkpoint, the final
// save), whose outcome every rank must learn so that all stop together or all go on. One
// collective after the work, on every rank, whatever rank 0's outcome: no rank waits alone.
#pragma once

#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "finetune/ddp/communicator.h"

namespace finetune {

// What rank 0's work came to, as every rank learns it.
struct Rank0Outcome {
  bool failed = false;
  std::string error;  // rank 0's exception message, on rank 0 only ("" elsewhere)
  // For an Error: rank 0's message, or on another rank "<what> failed on rank 0".
  std::string message(const std::string& what) const;
};

// Runs `work` on rank 0 (an exception is caught and becomes the outcome), then all-reduces the
// outcome (one scalar on `device`, the communicator's device) under the name `what`. Every rank
// must call it.
Rank0Outcome run_on_rank0_then_agree(Communicator& communicator, const at::Device& device, const std::string& what,
                                     const std::function<void()>& work);

}  // namespace finetune
