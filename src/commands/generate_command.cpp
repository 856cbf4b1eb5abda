// `finetune generate`: model + weights (+ adapter) -> prompts -> decoded continuations.
//   --prompt TEXT     raw text (BOS added as the tokenizer's encode does); the continuation is
//                     streamed to stdout as it is generated (generate/text_streamer.h)
//   --prompts FILE    JSONL, one {"prompt": TEXT} or {"messages": [...]} per line (messages are
//                     rendered with the chat template and add_generation_prompt, as `chat` does);
//                     decoded in batches of --generation_batch_size, one JSON line per prompt on
//                     stdout in input order: {"prompt_index", "text", "token_ids", "finish_reason"}
// A summary line with prefill and decode tokens/s goes to stderr.
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "finetune/commands/commands.h"
#include "finetune/commands/generation_setup.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

// One line of --prompts: its raw text prompt or its conversation.
struct PromptLine {
  std::string where;  // FILE:LINE
  std::string prompt;
  std::optional<Conversation> conversation;
};

std::vector<PromptLine> read_prompt_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("--prompts: cannot open " + path);
  std::vector<PromptLine> lines;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    PromptLine line{path + ":" + std::to_string(number), "", std::nullopt};
    nlohmann::ordered_json row;
    try {
      row = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error("--prompts " + line.where + ": not JSON (" + e.what() + ")");
    }
    if (row.is_object() && row.contains("prompt") && row["prompt"].is_string()) {
      line.prompt = row["prompt"].get<std::string>();
    } else if (row.is_object() && row.contains("messages") && row["messages"].is_array()) {
      Conversation conversation;
      conversation.messages = row["messages"];
      if (row.contains("chat_template_kwargs") && row["chat_template_kwargs"].is_object()) {
        conversation.kwargs = row["chat_template_kwargs"];
      }
      line.conversation = std::move(conversation);
    } else {
      throw Error("--prompts " + line.where + ": expected an object with \"prompt\" (a string) or \"messages\" "
                  "(a list), got " + row.dump().substr(0, 80));
    }
    lines.push_back(std::move(line));
  }
  if (lines.empty()) throw Error("--prompts " + path + ": no prompts");
  return lines;
}

void stream_one_prompt(GenerationSession& session, const std::string& prompt) {
  const auto reply = stream_reply(session, session.tokenizer().encode(prompt, /*add_special_tokens=*/true));
  log::info("generate | " + std::to_string(reply.token_ids.size()) + " tokens, finish_reason " + reply.finish_reason);
}

void generate_prompt_lines(GenerationSession& session, const std::vector<PromptLine>& lines) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& line : lines) {
    try {
      prompts.push_back(line.conversation
                            ? chat_prompt_ids(session.chat_template(), session.tokenizer(), *line.conversation)
                            : session.tokenizer().encode(line.prompt, /*add_special_tokens=*/true));
    } catch (const Error& e) {
      throw Error("--prompts " + line.where + ": " + e.what());
    }
    if (prompts.back().empty()) throw Error("--prompts " + line.where + ": the prompt has no tokens");
  }
  const size_t batch_size = static_cast<size_t>(session.generator->config().batch_size);
  for (size_t begin = 0; begin < prompts.size(); begin += batch_size) {
    const size_t end = std::min(prompts.size(), begin + batch_size);
    const std::vector<std::vector<int32_t>> batch(prompts.begin() + begin, prompts.begin() + end);
    const auto results = session.generator->generate_batch(batch);
    for (size_t i = 0; i < results.size(); ++i) {
      const nlohmann::ordered_json out = {{"prompt_index", begin + i},
                                          {"text", results[i].text},
                                          {"token_ids", results[i].token_ids},
                                          {"finish_reason", results[i].finish_reason}};
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    std::cout << std::flush;
  }
}

}  // namespace

int run_generate(const Options& options, const EnvMap& env) {
  // Every line is read before the model loads: a bad file fails fast.
  const auto lines = options.prompts.empty() ? std::vector<PromptLine>{} : read_prompt_lines(options.prompts);
  auto session = start_generation_session(options, env, Action::Generate);
  if (options.prompts.empty()) {
    stream_one_prompt(session, options.prompt);
  } else {
    generate_prompt_lines(session, lines);
  }
  log::info(generation_summary(action_name(Action::Generate), session.generator->stats()));
  return 0;
}

}  // namespace finetune
