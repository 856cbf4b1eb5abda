#include "finetune/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "finetune/generate/logits_processors.h"
#include "finetune/generate/stop_criteria.h"
#include "finetune/model/kv_cache.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Note [Phi-3 cache recompute]
// Phi3ForCausalLM.prepare_inputs_for_generation drops the KV cache once, at the step where the
// sequence (left padding included) first reaches original_max_position_embeddings + 1 tokens while
// the cache holds at most original_max_position_embeddings: the whole sequence is then run again,
// so with longrope every key is recomputed with the long factors. The sequence length at which
// that happens, for Phi-3; none for other families.
std::optional<int64_t> phi3_cache_recompute_length(const ModelConfig& config) {
  if (config.model_type != "phi3") return std::nullopt;
  return config.rope_scaling.original_max_position_embeddings + 1;
}

}  // namespace

Generator::Generator(const CausalLM& model, const Tokenizer& tokenizer, GenerationConfig config,
                     std::set<int64_t> eos_ids, int64_t pad_id)
    : model_(model), tokenizer_(tokenizer), config_(std::move(config)), eos_ids_(std::move(eos_ids)),
      pad_id_(pad_id), sampler_(config_, model.device()),
      profiler_(config_.profile_start_step, config_.profile_steps, config_.profile_dir, 0, model.device(),
                "decode steps") {}

std::vector<GeneratedText> Generator::generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                                     const TextCallback& on_text) {
  if (prompts.empty()) return {};
  c10::InferenceMode inference;
  const auto device = model_.device();
  const int64_t batch = static_cast<int64_t>(prompts.size());
  int64_t prompt_length = 0;
  for (size_t row = 0; row < prompts.size(); ++row) {
    if (prompts[row].empty()) throw Error("prompt " + std::to_string(row) + " of the batch has no tokens");
    prompt_length = std::max<int64_t>(prompt_length, static_cast<int64_t>(prompts[row].size()));
  }

  // The cache holds the model's context at most: a row that reaches max_position_embeddings stops
  // there ("length"), so a huge --max_new_tokens never becomes a huge allocation.
  const int64_t context = model_.config().max_position_embeddings;
  if (context > 0 && prompt_length >= context) {
    throw Error("a prompt of " + std::to_string(prompt_length) + " tokens fills the model's context (" +
                "max_position_embeddings " + std::to_string(context) + " in config.json): nothing can be generated");
  }
  const int64_t max_new_tokens =
      context > 0 ? std::min(config_.max_new_tokens, context - prompt_length) : config_.max_new_tokens;

  // Left padding, transformers' mask and position ids.
  auto ids = at::full({batch, prompt_length}, pad_id_, at::TensorOptions().dtype(at::kLong));  // (B, P)
  auto mask = at::zeros({batch, prompt_length}, at::TensorOptions().dtype(at::kLong));          // (B, P)
  auto ids_at = ids.accessor<int64_t, 2>();
  auto mask_at = mask.accessor<int64_t, 2>();
  bool padded = false;
  for (int64_t row = 0; row < batch; ++row) {
    const auto& prompt = prompts[row];
    const int64_t offset = prompt_length - static_cast<int64_t>(prompt.size());
    padded = padded || offset > 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      ids_at[row][offset + static_cast<int64_t>(t)] = prompt[t];
      mask_at[row][offset + static_cast<int64_t>(t)] = 1;
    }
    stats_.prefill_tokens += static_cast<int64_t>(prompt.size());
  }
  ids = ids.to(device);
  mask = mask.to(device);
  auto positions = (mask.cumsum(-1) - 1).masked_fill(mask.eq(0), 0);  // (B, P)

  auto start = std::chrono::steady_clock::now();
  KVCache cache = allocate_kv_cache(model_.config(), batch, prompt_length + max_new_tokens, model_.dtype(),
                                    device);
  auto hidden = model_.forward_cached(ids, positions, cache, padded ? mask : at::Tensor());  // (B, P, C)
  auto logits = model_.lm_head(hidden.select(1, -1)).to(at::kFloat);                         // (B, V)

  std::vector<GeneratedText> out(prompts.size());
  std::vector<bool> finished(prompts.size(), false);
  auto sequences = ids;                                                    // (B, P + steps)
  auto unfinished = at::ones({batch}, ids.options());                      // (B) 1 while running
  auto position = positions.select(1, -1);                                 // (B)
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    auto next = sampler_.next_tokens(process_logits(logits, sequences, config_));  // (B)
    next = next * unfinished + pad_id_ * (1 - unfinished);
    sequences = at::cat({sequences, next.unsqueeze(1)}, 1);
    const auto next_host = next.cpu();  // the step's one host sync
    const auto* next_ids = next_host.data_ptr<int64_t>();
    int64_t running = 0;
    for (size_t row = 0; row < out.size(); ++row) {
      if (finished[row]) continue;
      auto& result = out[row];
      result.token_ids.push_back(static_cast<int32_t>(next_ids[row]));
      if (eos_ids_.count(next_ids[row])) {
        result.finish_reason = "eos";
      } else if (step + 1 == max_new_tokens) {
        result.finish_reason = "length";
      }
      // The text is decoded when it is needed: at the end, for the callback, or for stop strings.
      if (!result.finish_reason.empty() || on_text || !config_.stop_strings.empty()) {
        result.text = tokenizer_.decode(result.token_ids, /*skip_special_tokens=*/true);
        const auto stop_at = result.finish_reason == "eos" ? std::nullopt
                                                           : find_stop_string(result.text, config_.stop_strings);
        if (stop_at) {
          result.text.resize(*stop_at);
          result.finish_reason = "stop";
        }
      }
      if (on_text) on_text(row, result.text);
      finished[row] = !result.finish_reason.empty();
      if (finished[row]) unfinished[row] = 0;
      running += finished[row] ? 0 : 1;
    }
    if (step == 0) {
      stats_.prefill_seconds += seconds_since(start);
      start = std::chrono::steady_clock::now();
    } else {
      profiler_.after_step(decode_steps_);  // a decode step: its forward, sampling and host bookkeeping
    }
    if (running == 0 || step + 1 == max_new_tokens) break;
    profiler_.before_step(++decode_steps_);
    position = position + 1;
    mask = at::cat({mask, at::ones({batch, 1}, mask.options())}, 1);          // (B, P + step + 1)
    const auto recompute_at = phi3_cache_recompute_length(model_.config());
    if (recompute_at && sequences.size(1) >= *recompute_at && cache.length < *recompute_at) {
      cache.length = 0;  // Note [Phi-3 cache recompute]
      const auto all_positions = (mask.cumsum(-1) - 1).masked_fill(mask.eq(0), 0);  // (B, P + step + 1)
      hidden = model_.forward_cached(sequences, all_positions, cache, padded ? mask : at::Tensor());
      logits = model_.lm_head(hidden.select(1, -1)).to(at::kFloat);            // (B, V)
    } else {
      hidden = model_.forward_cached(next.unsqueeze(1), position.unsqueeze(1), cache, padded ? mask : at::Tensor());
      logits = model_.lm_head(hidden.squeeze(1)).to(at::kFloat);              // (B, V)
    }
    stats_.decode_tokens += running;
  }
  stats_.decode_seconds += seconds_since(start);
  return out;
}

}  // namespace finetune
