// `finetune chat`: an interactive conversation on stdin/stdout. Each line read is a user turn; the
// whole conversation (with --system_prompt first, when given) is rendered by the chat template
// (--chat_template, auto = the tokenizer's own) with add_generation_prompt, and the reply is
// streamed to stdout, followed by a newline, then kept in the conversation. "/reset" forgets the
// conversation, "/exit" or end of input ends. The "> " prompt is printed only when stdin is a
// terminal, so piped input gives the replies alone.
#include <unistd.h>

#include <iostream>

#include "finetune/commands/commands.h"
#include "finetune/commands/generation_setup.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

Conversation fresh_conversation(const std::string& system_prompt) {
  Conversation conversation;
  if (!system_prompt.empty()) conversation.messages.push_back({{"role", "system"}, {"content", system_prompt}});
  return conversation;
}

}  // namespace

int run_chat(const Options& options, const EnvMap& env) {
  auto session = start_generation_session(options, env, Action::Chat);
  const ChatTemplate& chat_template = session.chat_template();  // before the first turn: a missing one fails now
  log::info("chat | template: " + chat_template.description() + "; /reset clears the conversation, /exit ends");
  const bool interactive = isatty(STDIN_FILENO) != 0;
  Conversation conversation = fresh_conversation(options.system_prompt);
  std::string line;
  int64_t turn = 0;
  while (true) {
    if (interactive) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    const std::string command = trim(line);
    if (command == "/exit") break;
    if (command == "/reset") {
      conversation = fresh_conversation(options.system_prompt);
      log::info("chat | conversation cleared");
      continue;
    }
    if (command.empty()) continue;
    conversation.messages.push_back({{"role", "user"}, {"content", line}});
    const auto ids = chat_prompt_ids(chat_template, session.tokenizer(), conversation);
    const auto reply = stream_reply(session, ids);
    conversation.messages.push_back({{"role", "assistant"}, {"content", reply.text}});
    log::info("chat | turn " + std::to_string(++turn) + ": " + std::to_string(ids.size()) + " prompt tokens, " +
              std::to_string(reply.token_ids.size()) + " new, finish_reason " + reply.finish_reason);
  }
  log::info(generation_summary(action_name(Action::Chat), session.generator->stats()));
  return 0;
}

}  // namespace finetune
