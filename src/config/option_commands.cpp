// The commands (`finetune train|eval|generate|chat|export|dpo|orpo|plot`) and the choice tables that the
// option set shares with its consumers: one place each, read by the parser, the help text and the
// commands.
#include <algorithm>

#include "finetune/config/options.h"
#include "finetune/util/errors.h"

namespace finetune {

const std::vector<ActionInfo>& action_table() {
  static const std::vector<ActionInfo> table = {
      {Action::Train, "train", "LoRA/QLoRA fine-tuning, then the adapter (and --save_model's export) (the default)",
       "finetune [train] --model_name M --dataset D [--OPTION VALUE]..."},
      {Action::Eval, "eval", "mean token loss and perplexity of a model (with --adapter) on a dataset",
       "finetune eval --model_name M --dataset D [--adapter A] [--OPTION VALUE]..."},
      {Action::Generate, "generate", "continuations of --prompt or of a JSONL file of --prompts",
       "finetune generate --model_name M (--prompt TEXT | --prompts FILE) [--adapter A] [--OPTION VALUE]..."},
      {Action::Chat, "chat", "an interactive conversation on stdin/stdout, rendered by the chat template",
       "finetune chat --model_name M [--adapter A] [--OPTION VALUE]..."},
      {Action::Export, "export", "merge an adapter into its base model and write merged_16bit, merged_4bit or GGUF",
       "finetune export --model_name M [--adapter A] --save_method METHOD --save_path DIR [--OPTION VALUE]..."},
      {Action::Dpo, "dpo", "preference training on chosen/rejected pairs with TRL's DPO losses (LoRA, QLoRA, DDP)",
       "finetune dpo --model_name M --dataset D [--loss_type sigmoid|ipo|hinge|robust] [--OPTION VALUE]..."},
      {Action::Orpo, "orpo", "reference-free preference training with TRL's ORPO loss (LoRA, QLoRA, DDP)",
       "finetune orpo --model_name M --dataset D [--beta B] [--OPTION VALUE]..."},
      {Action::Plot, "plot", "loss curves of one or more runs' metrics.jsonl, overlaid, as one HTML page",
       "finetune plot RUN_DIR [RUN_DIR ...] [--out FILE]"},
  };
  return table;
}

const std::string& action_name(Action action) {
  for (const auto& info : action_table())
    if (info.action == action) return info.name;
  throw Error("action_name: an Action missing from action_table()");
}

std::vector<std::string> action_names() {
  std::vector<std::string> names;
  for (const auto& info : action_table()) names.push_back(info.name);
  return names;
}

bool is_training_action(Action action) {
  return action == Action::Train || action == Action::Dpo || action == Action::Orpo;
}

bool OptionSpec::read_by(Action action) const {
  return std::find(commands.begin(), commands.end(), action) != commands.end();
}

const std::vector<ReportTarget>& report_targets() {
  static const std::vector<ReportTarget> targets = {
      {"none", false}, {"jsonl", false}, {"tensorboard", true}, {"all", true}};
  return targets;
}

const ReportTarget& report_target(const std::string& name) {
  for (const auto& target : report_targets())
    if (target.name == name) return target;
  throw Error("--report_to: unknown value \"" + name + "\"");
}

}  // namespace finetune
