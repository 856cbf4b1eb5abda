// Mean per-token loss and perplexity of a model over samples (eval loop shared by `finetune eval`
// and the trainer's periodic evaluation, which shards it over the ranks). The loss is the token
// cross-entropy summed over every batch's trained tokens, plus, for a MoE model with
// output_router_logits, each batch's router term weighted by its trained tokens (Note [Router
// load-balancing loss] in train/objective.h: with one batch, transformers' eval loss exactly).
// Optionally writes every sample's logits (its real tokens only) to a safetensors file as
// `logits.<index>` (len, vocab) fp32, for parity checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/data/sample.h"
#include "finetune/ddp/communicator.h"
#include "finetune/model/causal_lm.h"

namespace finetune {

struct EvalResult {
  double loss_sum = 0;
  int64_t tokens = 0;  // trainable (scored) tokens
  double mean_loss() const;
  double perplexity() const;
};

EvalResult evaluate(const CausalLM& model, const std::vector<Sample>& samples, const std::vector<int64_t>& indices,
                    int64_t batch_size, int64_t pad_token_id, const std::string& dump_logits_path = "");

// The mean token loss over every sample, scored across the ranks: rank r takes rows r, r+world,
// ... (each row exactly once: Note [One rule for ranks] without padding) and the (loss sum, token count) pairs are all-reduced. Every rank
// must call it (it is a collective) and gets the same value.
double evaluate_across_ranks(const CausalLM& model, const std::vector<Sample>& samples, Communicator& communicator,
                             int64_t batch_size, int64_t pad_token_id);

}  // namespace finetune
