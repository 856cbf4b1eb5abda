// What `generate` and `chat` share: the model with its weights, tokenizer and --adapter (left
// unmerged, as PeftModel runs it), the chat template, and the Generator made from the options.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "finetune/commands/run_setup.h"
#include "finetune/data/chat_template.h"
#include "finetune/generate/generator.h"

namespace finetune {

struct GenerationSession {
  LoadedModel loaded;
  std::unique_ptr<Generator> generator;
  std::string chat_template_choice;  // --chat_template
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();

  const Tokenizer& tokenizer() const { return *loaded.tokenizer; }
  // --chat_template's template (made on first use): UsageError when it names none or, for "auto",
  // the tokenizer has none.
  const ChatTemplate& chat_template();

 private:
  std::unique_ptr<ChatTemplate> chat_template_;
};

// Opens --model_name with its --adapter for `action` (generate or chat: run_setup.h, open_model),
// reads the EOS ids; an Error when the model has no tokenizer.
GenerationSession start_generation_session(const Options& options, const EnvMap& env, Action action);

// A conversation's prompt ids: rendered with add_generation_prompt and encoded without adding
// special tokens, as apply_chat_template(tokenize=True) does (the template writes BOS itself).
std::vector<int32_t> chat_prompt_ids(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                     const Conversation& conversation);

// One prompt decoded with its text streamed to stdout as it comes (generate/text_streamer.h:
// whole words and characters, nothing that may start a stop string), then a newline.
GeneratedText stream_reply(GenerationSession& session, const std::vector<int32_t>& prompt_ids);

// "generate | prefill N tokens in S s (R tokens/s) | decode ..." for stderr.
std::string generation_summary(const std::string& command, const GenerationStats& stats);

}  // namespace finetune
