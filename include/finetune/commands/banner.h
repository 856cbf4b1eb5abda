// The start-of-run summary on rank 0: model, kernels, adapter, data, batch geometry.
#pragma once

#include <cstdint>
#include <string>

#include "finetune/commands/run_setup.h"
#include "finetune/data/micro_batch_stream.h"
#include "finetune/launch/launch_env.h"

namespace finetune {

struct RunShape {
  std::string dataset;
  int64_t per_device_batch = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  std::string optimizer = "adamw_torch";  // --optim's resolved name
};

void log_banner(const LoadedModel& loaded, const AttachedAdapter& adapter, const Datasets& data,
                const MicroBatchStream& stream, const LaunchEnv& launch, const RunShape& shape);

// "1,234,567"
std::string with_thousands(int64_t value);

// The banner's chat-template line: the template and how many rows it renders, or "not used" when
// no row is a conversation (alpaca, text, raw-text and pre-tokenized rows never reach it).
std::string chat_template_line(const Datasets& data);

}  // namespace finetune
