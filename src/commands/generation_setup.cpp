#include "finetune/commands/generation_setup.h"

#include <cstdio>
#include <iostream>

#include "finetune/commands/hub_inputs.h"
#include "finetune/generate/stop_criteria.h"
#include "finetune/generate/text_streamer.h"
#include "finetune/model/device_selection.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {

const ChatTemplate& GenerationSession::chat_template() {
  if (!chat_template_) {
    const auto& special = loaded.tokenizer->special_tokens();
    chat_template_ = std::make_unique<ChatTemplate>(
        ChatTemplate::select(chat_template_choice, special.chat_templates, special, chat_template_kwargs));
  }
  return *chat_template_;
}

GenerationSession start_generation_session(const Options& options, const EnvMap& env, Action action) {
  const auto setup = model_stage_setup_from(options, action);
  const std::string& command = setup.command;
  GenerationSession session;
  session.loaded = open_model(setup, hub_inputs_from(setup.source, DataSetup{}, false), env,
                              command_device(setup.source, env), fetch_at_once(hub_settings_from(env, options.hub_token)))
                       .loaded;
  const auto data_setup = data_setup_from(options);
  session.chat_template_choice = data_setup.chat_template;
  session.chat_template_kwargs = data_setup.chat_template_kwargs;
  const auto& special = session.loaded.tokenizer->special_tokens();
  auto eos_ids = eos_token_ids(session.loaded.model_dir, special.eos_token_id);
  const int64_t pad_id = pad_token_id_for(*session.loaded.model, session.loaded.tokenizer.get());
  const auto& model = *session.loaded.model;
  const std::string& adapter = setup.adapter.init_adapter;
  log::info(command + " | model " + session.loaded.model_dir + " (" + dtype_string(model.dtype()) + " on " +
            model.device().str() + (adapter.empty() ? "" : ", adapter " + adapter) + "), loaded in " +
            c10::str(session.loaded.load_seconds) + " s");
  session.generator = std::make_unique<Generator>(model, *session.loaded.tokenizer, generation_config_from(options),
                                                  std::move(eos_ids), pad_id);
  return session;
}

std::vector<int32_t> chat_prompt_ids(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                     const Conversation& conversation) {
  return tokenizer.encode(chat_template.render(conversation, /*add_generation_prompt=*/true).text,
                          /*add_special_tokens=*/false);
}

GeneratedText stream_reply(GenerationSession& session, const std::vector<int32_t>& prompt_ids) {
  TextStreamer streamer(session.generator->config().stop_strings);
  auto results = session.generator->generate_batch(
      {prompt_ids}, [&](size_t, const std::string& text) { std::cout << streamer.push(text) << std::flush; });
  std::cout << streamer.finish(results.front().text) << std::endl;
  return std::move(results.front());
}

std::string generation_summary(const std::string& command, const GenerationStats& stats) {
  auto rate = [](int64_t tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; };
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s | prefill %lld tokens in %.3f s (%.1f tokens/s) | decode %lld tokens in %.3f s (%.1f tokens/s)",
                command.c_str(), static_cast<long long>(stats.prefill_tokens), stats.prefill_seconds,
                rate(stats.prefill_tokens, stats.prefill_seconds), static_cast<long long>(stats.decode_tokens),
                stats.decode_seconds, rate(stats.decode_tokens, stats.decode_seconds));
  return line;
}

}  // namespace finetune
