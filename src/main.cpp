// finetune: LoRA/SFT fine-tuning of Hugging Face causal LMs on LibTorch.
// main() parses the command, dispatches to it (commands/commands.h wires each command's stages),
// and is the one place that catches errors: usage errors exit 2, everything else exits 1.
#include <csignal>
#include <iostream>

#include "finetune/commands/commands.h"
#include "finetune/commands/plot_command.h"
#include "finetune/config/options.h"
#include "finetune/launch/stop_request.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace {

int run_action(const finetune::Command& command, const finetune::EnvMap& env) {
  using finetune::Action;
  switch (command.action) {
    case Action::Train: return finetune::run_train(command.options, env);
    case Action::Eval: return finetune::run_eval(command.options, env);
    case Action::Generate: return finetune::run_generate(command.options, env);
    case Action::Chat: return finetune::run_chat(command.options, env);
    case Action::Export: return finetune::run_export(command.options, env);
    case Action::Plot: return finetune::run_plot(finetune::parse_plot_arguments(command.plot_words));
    case Action::Dpo: return finetune::run_dpo(command.options, env);
    case Action::Orpo: return finetune::run_orpo(command.options, env);
  }
  throw finetune::Error("main: a command without a run function");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace finetune;
  // A file-size limit (ulimit -f) then fails the write with EFBIG, which the writers report as an
  // error naming the file, instead of killing the process silently mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  log::configure(0, 1);
  try {
    const auto env = current_environment();
    const auto command = parse_command(argc, argv, env);
    if (command.help) {
      std::cout << command.help_text;
      return 0;
    }
    if (command.version) {
      std::cout << version_text();
      return 0;
    }
    log::configure(0, 1, log::level_from_name(command.options.log_level));
    for (const auto& note : command.ignored_settings) log::debug(note);
    return run_action(command, env);
  } catch (const Preempted& e) {
    log::warn(e.what());
    return kPreemptedExitCode;
  } catch (const UsageError& e) {
    log::error(e.what());
    std::cerr << "Run `finetune --help` for the commands, `finetune COMMAND --help` for their options." << std::endl;
    return 2;
  } catch (const std::exception& e) {
    log::error(e.what());
    return 1;
  }
}
