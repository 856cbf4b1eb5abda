// finetune: LoRA/SFT fine-tuning of Hugging Face causal LMs on LibTorch.
// main() parses the command, dispatches to an action (train/commands.h wires the stages), and is
// the one place that catches errors: usage errors exit 2, everything else exits 1.
#include <csignal>
#include <iostream>

#include "finetune/config/options.h"
#include "finetune/commands/commands.h"
#include "finetune/util/errors.h"
#include "finetune/util/log.h"

int main(int argc, char** argv) {
  using namespace finetune;
  // A file-size limit (ulimit -f) then fails the write with EFBIG, which the writers report as an
  // error naming the file, instead of killing the process silently mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  log::configure(0, 1);
  try {
    const auto env = current_environment();
    const auto command = parse_command(argc, argv, env);
    log::configure(0, 1, log::level_from_name(command.options.log_level));
    if (command.help) {
      std::cout << command.help_text;
      return 0;
    }
    if (command.action == "eval") return run_eval(command.options, env);
    if (command.action == "generate") return run_generate(command.options, env);
    if (command.action == "chat") return run_chat(command.options, env);
    if (command.action == "export") return run_export(command.options, env);
    return run_train(command.options, env);
  } catch (const UsageError& e) {
    log::error(e.what());
    std::cerr << "Run `finetune --help` for the list of options." << std::endl;
    return 2;
  } catch (const std::exception& e) {
    log::error(e.what());
    return 1;
  }
}
