// The layered option parser: --config FILE.json < environment FINETUNE_<KEY> < command line.
// All three sources are reduced to strings first (a JSON array becomes a comma-separated list),
// so one conversion path (the table's bindings, option_table.cpp) validates every source and
// reports errors the same way.
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "finetune/checkpoint/save_methods.h"
#include "finetune/config/options.h"
#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/text.h"
#include "option_environment.h"
#include "option_values.h"

namespace finetune {
namespace {

// A raw value, the name it was given under (an alias or the option's name) and where it came
// from, for error messages.
struct RawValue {
  std::string text;
  std::string origin;  // "" (command line), "FINETUNE_R", "cfg.json"
  std::string name;    // as given: "lora_r" for --lora_r
};

std::string describe_option(const RawValue& raw) {
  return "--" + raw.name + (raw.origin.empty() ? "" : " (from " + raw.origin + ")");
}

// Within one source that has no order (a config file, the environment) an option may be given
// once: two of its names would leave the winner to chance. `label` names a value's entry there.
void store_unordered(std::map<std::string, RawValue>& source_values, const OptionRow& row, const RawValue& raw,
                     std::string (*label)(const RawValue&)) {
  const auto [it, inserted] = source_values.emplace(row.spec.name, raw);
  if (!inserted) {
    throw UsageError(label(it->second) + " and " + label(raw) + " both set --" + row.spec.name +
                     " (they are one option; keep one)");
  }
}

std::string file_key_label(const RawValue& raw) { return raw.origin + ": " + raw.name; }
std::string variable_label(const RawValue& raw) { return raw.origin; }

// Every name an option answers to, for "did you mean" hints.
std::vector<std::string> all_option_names() {
  std::vector<std::string> names;
  for (const auto& row : option_rows()) {
    names.push_back(row.spec.name);
    names.insert(names.end(), row.spec.aliases.begin(), row.spec.aliases.end());
  }
  return names;
}

// The error for a name that is no option: Unsloth's options finetune lacks say why, others get the
// nearest option name when there is one.
std::string unknown_option_message(const std::string& name) {
  for (const auto& [unsloth_name, reason] : unsloth_only_options())
    if (name == unsloth_name) return "an option of Unsloth's CLI that finetune does not have: " + reason;
  std::string message = "unknown option";
  if (const auto suggestion = closest_match(name, all_option_names())) message += "; did you mean --" + *suggestion + "?";
  return message;
}

// Config-file JSON values reduced to the string form the bindings take.
std::string json_value_to_text(const nlohmann::json& value, const OptionRow& row, const std::string& file) {
  const std::string where = file + ": " + row.spec.name + ": ";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer() || value.is_number_unsigned()) return value.dump();
  if (value.is_number_float()) {
    std::ostringstream out;
    out.precision(17);
    out << value.get<double>();
    return out.str();
  }
  if (value.is_array() && row.spec.type == "list") {
    std::vector<std::string> items;
    for (const auto& item : value) {
      if (!item.is_string()) throw UsageError(where + "expected an array of strings, got " + json_excerpt(value));
      items.push_back(item.get<std::string>());
    }
    return join(items, ",");
  }
  throw UsageError(where + "expected a " + row.spec.type + " value, got " + json_excerpt(value));
}

// Config files and the environment are shared between commands (one file for train, eval and
// generate), so an option there that `action` does not read is left out and noted in `ignored`;
// on the command line it is an error (parse_command).
std::string ignored_note(const std::string& where, Action action) {
  return where + ": not read by `finetune " + action_name(action) + "`; ignored";
}

std::map<std::string, RawValue> read_config_file(const std::string& file, Action action,
                                                 std::vector<std::string>& ignored) {
  nlohmann::json doc;
  try {
    doc = read_json_file(file);
  } catch (const Error& e) {
    throw UsageError(std::string("--config: ") + e.what());
  }
  if (!doc.is_object()) throw UsageError(file + ": expected a JSON object of option names to values");
  std::map<std::string, RawValue> values;
  for (const auto& [key, value] : doc.items()) {
    const OptionRow* row = find_option_row(key);
    if (row == nullptr) throw UsageError(file + ": " + in_quotes(key) + ": " + unknown_option_message(key));
    if (!row->spec.read_by(action)) {
      ignored.push_back(ignored_note(file + ": " + key, action));
      continue;
    }
    store_unordered(values, *row, RawValue{json_value_to_text(value, *row, file), file, key}, file_key_label);
  }
  return values;
}

std::map<std::string, RawValue> read_environment(const EnvMap& env, Action action, std::vector<std::string>& ignored) {
  std::map<std::string, RawValue> values;
  for (const auto& row : option_rows()) {
    std::vector<std::string> names = {row.spec.name};
    names.insert(names.end(), row.spec.aliases.begin(), row.spec.aliases.end());
    for (const auto& name : names) {
      const auto it = env.find(option_env_key(name));
      if (it == env.end()) continue;
      if (!row.spec.read_by(action)) {
        ignored.push_back(ignored_note(it->first, action));
        continue;
      }
      store_unordered(values, row, RawValue{it->second, it->first, name}, variable_label);
    }
  }
  return values;
}

// Three cxxopts quirks are smoothed over before it sees the arguments:
//  - an option with an implicit value never takes the next argument, so `--packing false` is
//    rewritten to `--packing=false`;
//  - cxxopts only matches long names of two or more characters, so `--r 8` / `--r=8` (Unsloth's
//    spelling) become the short form `-r 8`;
//  - a list option takes one or more values, as argparse's nargs='+' does in Unsloth's CLI
//    (`--quantization f16 q8_0`): the bare words after `--LIST VALUE` are joined to it by commas.
// Aliases are registered with cxxopts as options of their own (so errors name them as typed) and
// folded into their option when the values are layered.
std::vector<std::string> normalize_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  auto is_bare_word = [&](size_t i) { return i < args.size() && (args[i].empty() || args[i][0] != '-'); };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const auto equals = arg.find('=');
      const std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      const OptionRow* row = find_option_row(name);
      if (equals == std::string::npos && row != nullptr && row->spec.type == "bool" && i + 1 < args.size()) {
        // Any bare word after a boolean flag is its value (the action word can only come first),
        // so `--packing maybe` is reported against --packing rather than as a stray argument.
        if (is_bare_word(i + 1)) arg += "=" + args[++i];
      }
      if (equals == std::string::npos && row != nullptr && row->spec.type == "list" && is_bare_word(i + 1)) {
        std::string items = args[++i];
        while (is_bare_word(i + 1)) items += "," + args[++i];
        arg += "=" + items;
      }
      if (name.size() == 1) {
        out.push_back("-" + name);
        if (equals != std::string::npos) out.push_back(arg.substr(equals + 1));
        continue;
      }
    }
    out.push_back(arg);
  }
  return out;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

namespace {

const char* const kHowOptionsAreGiven =
    "Every option can also be set as a key of the --config JSON file or as the environment\n"
    "variable FINETUNE_<OPTION> (upper case); the command line wins over the environment,\n"
    "which wins over the file (a repeated flag: the last one wins). Lists are comma-separated\n"
    "or space-separated after the flag (JSON arrays in the file); booleans are true/false/1/0,\n"
    "and a bare --FLAG means true. Each command reads its own options: another command's option\n"
    "is an error on the command line and ignored (logged at --log_level debug) in the file or the\n"
    "environment, which commands share. Any other FINETUNE_* variable is an error, except the\n"
    "few that finetune's own scripts export.\n";

std::string option_lines(Action action) {
  std::ostringstream out;
  for (const char* group : kOptionGroupOrder) {
    std::ostringstream lines;
    for (const auto& spec : option_table()) {
      if (spec.group != group || !spec.read_by(action)) continue;
      std::string flag = "  --" + spec.name;
      for (const auto& alias : spec.aliases) flag += ", --" + alias;
      flag += " <" + spec.type + ">";
      if (flag.size() < 40) flag.resize(40, ' ');
      else flag += "  ";
      lines << flag << spec.help << " [default: " << (spec.default_value.empty() ? "\"\"" : spec.default_value)
            << "]\n";
    }
    if (!lines.str().empty()) out << "\n" << group << ":\n" << lines.str();
  }
  return out.str();
}

const ActionInfo& action_info(Action action) {
  for (const auto& info : action_table())
    if (info.action == action) return info;
  throw Error("action_info: an Action missing from action_table()");
}

// "eval, generate, chat, export": the commands that read `spec`, in the table's order.
std::string readers_of(const OptionSpec& spec) {
  std::vector<std::string> names;
  for (const auto& info : action_table())
    if (spec.read_by(info.action)) names.push_back(info.name);
  return join(names, ", ");
}

// The option of `action` that the user most likely meant by `name`: the nearest spelling, else one
// whose name ends with it or that it ends with (--adapter / --init_adapter).
std::optional<std::string> option_of_command_like(const std::string& name, Action action) {
  std::vector<std::string> names;
  for (const auto& spec : option_table())
    if (spec.read_by(action)) names.push_back(spec.name);
  if (auto nearest = closest_match(name, names)) return nearest;
  for (const auto& candidate : names)
    if (ends_with(candidate, "_" + name) || ends_with(name, "_" + candidate)) return candidate;
  return std::nullopt;
}

std::string not_read_message(const std::string& given_name, const OptionSpec& spec, Action action) {
  std::string message = "--" + given_name + " is not an option of `finetune " + action_name(action) +
                        "` (it is read by " + readers_of(spec);
  if (const auto suggestion = option_of_command_like(spec.name, action)) message += "; did you mean --" + *suggestion + "?";
  return message + ")";
}

}  // namespace

std::string usage_text() {
  std::ostringstream out;
  out << "Usage: finetune [" << join(action_names(), "|") << "] [--config FILE.json] [--OPTION VALUE | --OPTION=VALUE]...\n"
      << "       finetune COMMAND --help | finetune --version\n"
      << "\n"
      << "LoRA supervised and preference (DPO, ORPO) fine-tuning of Hugging Face causal LMs (Llama, Qwen2, Qwen3, Mistral).\n"
      << "\n"
      << "Commands (without one, finetune trains):\n";
  for (const auto& info : action_table()) {
    std::string name = "  " + info.name;
    name.resize(12, ' ');
    out << name << info.summary << "\n";
  }
  out << "\nRun `finetune COMMAND --help` for the options of a command.\n\n" << kHowOptionsAreGiven;
  return out.str();
}

std::string usage_text(Action action) {
  std::ostringstream out;
  const ActionInfo& info = action_info(action);
  out << "Usage: " << info.usage << "\n"
      << "\n"
      << "finetune " << info.name << ": " << info.summary << ".\n"
      << "\n"
      << kHowOptionsAreGiven << "\n"
      << "  -h, --help            show this text\n"
      << "  --version             the version and the LibTorch/CUDA finetune was built with\n"
      << "  --config FILE.json    read options from a JSON object\n"
      << option_lines(action);
  return out.str();
}

namespace {

// The first word, when it is not an option, names the command.
Action take_action_word(std::vector<std::string>& args, bool& named) {
  named = !args.empty() && !args[0].empty() && args[0][0] != '-';
  if (!named) return Action::Train;
  for (const auto& info : action_table()) {
    if (info.name == args[0]) {
      args.erase(args.begin());
      return info.action;
    }
  }
  throw UsageError("unknown command " + in_quotes(args[0]) + " (expected " + join(action_names(), ", ") +
                   ", before any option)");
}

cxxopts::ParseResult parse_with_cxxopts(const char* program, const std::vector<std::string>& args) {
  cxxopts::Options parser("finetune");
  auto adder = parser.add_options();
  adder("h,help", "show usage");
  adder("version", "show the version");
  adder("config", "options file", cxxopts::value<std::string>());
  for (const auto& row : option_rows()) {
    std::vector<std::string> names = {row.spec.name};
    names.insert(names.end(), row.spec.aliases.begin(), row.spec.aliases.end());
    for (const auto& name : names) {
      auto value = cxxopts::value<std::string>();
      if (row.spec.type == "bool") value->implicit_value("true");
      adder(name, row.spec.help, value);
    }
  }
  std::vector<const char*> cargv = {program};
  for (const auto& a : args) cargv.push_back(a.c_str());
  cxxopts::ParseResult parsed;
  try {
    parsed = parser.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::no_such_option& e) {
    // cxxopts says "Option ‘x’ does not exist"; name it the way the user typed it.
    std::string name = one_line(e.what());
    const auto open = name.find("\xE2\x80\x98"), close = name.find("\xE2\x80\x99");
    if (open != std::string::npos && close != std::string::npos && close > open) {
      name = name.substr(open + 3, close - open - 3);
      throw UsageError("--" + name + ": " + unknown_option_message(name) + " (see finetune --help)");
    }
    throw UsageError(name);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(one_line(e.what()));
  }
  if (!parsed.unmatched().empty())
    throw UsageError("unexpected argument " + in_quotes(parsed.unmatched().front()) +
                     " (options are --NAME VALUE; the command word (" + join(action_names(), ", ") +
                     ") must come first)");
  return parsed;
}

// HF TrainingArguments' rules for the best model (its __post_init__) and EarlyStoppingCallback's
// (on_train_begin), and a setting that would do nothing, refused instead of ignored.
void check_training_options(const Options& o) {
  auto given = [&](const char* name) { return o.given.count(name) > 0; };
  if (o.load_best_model_at_end) {
    if (o.eval_strategy != o.save_strategy) {
      throw UsageError("--load_best_model_at_end: needs --eval_strategy and --save_strategy to match (got " +
                       o.eval_strategy + " and " + o.save_strategy + "), so every checkpoint has an evaluation");
    }
    if (o.eval_strategy == "no") {
      throw UsageError("--load_best_model_at_end: needs evaluations and checkpoints (--eval_strategy and "
                       "--save_strategy steps or epoch)");
    }
    if (o.eval_strategy == "steps" && (o.eval_steps <= 0 || o.save_steps <= 0 || o.save_steps % o.eval_steps != 0)) {
      throw UsageError("--load_best_model_at_end: with the steps strategy --save_steps (" + std::to_string(o.save_steps) +
                       ") must be a positive multiple of --eval_steps (" + std::to_string(o.eval_steps) + ")");
    }
  }
  if (o.early_stopping_patience > 0 && o.eval_strategy == "no") {
    throw UsageError("--early_stopping_patience: needs evaluations (--eval_strategy steps or epoch)");
  }
  if (o.early_stopping_threshold != 0 && o.early_stopping_patience == 0) {
    throw UsageError("--early_stopping_threshold: does nothing without --early_stopping_patience");
  }
  if (given("eval_steps") && o.eval_steps != 0 && o.eval_strategy != "steps") {
    throw UsageError("--eval_steps: read only with --eval_strategy steps (got " + o.eval_strategy + ")");
  }
  if (given("save_steps") && o.save_steps != 0 && o.save_strategy != "steps") {
    throw UsageError("--save_steps: read only with --save_strategy steps (got " + o.save_strategy + ")");
  }
  if (o.neftune_noise_alpha > 0 && o.packing) {
    throw UsageError("--neftune_noise_alpha: not with --packing true (NEFTune's noise scale is 1/sqrt of the padded "
                     "batch length, which a packed row does not have; TRL's padding-free packing differs)");
  }
  if (o.neftune_noise_alpha > 0 && given("step_planning") && o.step_planning != "literal") {
    throw UsageError("--neftune_noise_alpha: needs --step_planning literal (the noise scale depends on each "
                     "micro-batch's longest sample, so the micro-batches must be HF's); it is the default with NEFTune");
  }
  const bool checkpoints = o.save_strategy == "epoch" || (o.save_strategy == "steps" && o.save_steps > 0);
  if (o.save_only_model && !checkpoints) {
    throw UsageError("--save_only_model: does nothing without checkpoints (--save_steps N, or --save_strategy epoch)");
  }
}

// TRL 1.16 reads label_smoothing for the robust loss only; elsewhere it would do nothing.
void check_dpo_options(const Options& o) {
  if (o.label_smoothing != 0 && o.loss_type != "robust") {
    throw UsageError("--label_smoothing: read by --loss_type robust only (TRL 1.16's other losses ignore it), got "
                     "--loss_type " + o.loss_type);
  }
}

// --bf16 / --fp16 (HF's precision flags) are --dtype bfloat16 / float16; they cannot disagree with
// a --dtype that was given.
void apply_precision_flags(Options& o) {
  if (o.bf16 && o.fp16) throw UsageError("--bf16 and --fp16: give one (they set --dtype bfloat16 / float16)");
  if (!o.bf16 && !o.fp16) return;
  const std::string flag = o.bf16 ? "--bf16" : "--fp16";
  const std::string dtype = o.bf16 ? "bfloat16" : "float16";
  if (o.given.count("dtype") && o.dtype != "auto" && o.dtype != dtype) {
    throw UsageError(flag + " and --dtype " + o.dtype + " disagree (" + flag + " means --dtype " + dtype + ")");
  }
  o.dtype = dtype;
}

// What each command needs besides its options' own rules.
void check_required(const Command& command) {
  const Options& o = command.options;
  if (o.model_name.empty()) throw UsageError("--model_name: required (a model directory or hub id)");
  if (command.action == Action::Train && o.dataset.empty() && o.raw_text_file.empty())
    throw UsageError("--dataset: required for train (a data file, a directory, or a hub id; or --raw_text_file)");
  if ((command.action == Action::Dpo || command.action == Action::Orpo) && o.dataset.empty())
    throw UsageError("--dataset: required for " + action_name(command.action) +
                     " (preference rows: prompt/chosen/rejected, or chosen/rejected)");
  if (command.action == Action::Dpo) check_dpo_options(o);
  if (command.action == Action::Generate && o.prompt.empty() == o.prompts.empty())
    throw UsageError("--prompt / --prompts: generate takes exactly one of them (a text, or a JSONL file of prompts)");
  if (command.action == Action::Export && save_method_from_name(o.save_method) == SaveMethod::Lora)
    throw UsageError("--save_method: export writes merged_16bit, merged_4bit or gguf (the adapter is already lora)");
  if (is_training_action(command.action) && o.push_gguf && !o.save_model)
    throw UsageError("--push_gguf: uploads the GGUF files of --save_model's export; add --save_model");
  if (is_training_action(command.action) && o.save_gguf && !o.save_model)
    throw UsageError("--save_gguf: writes GGUF as part of --save_model's export (as in Unsloth's CLI, where it "
                     "does nothing alone); add --save_model");
  if (!o.adapter.empty() && !o.init_adapter.empty())
    throw UsageError("--adapter and --init_adapter: `finetune " + action_name(command.action) +
                     "` reads them as one setting; give one");
  if (is_training_action(command.action)) check_training_options(o);
}

}  // namespace

Command parse_command(int argc, const char* const* argv, const EnvMap& env) {
  Command command;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  bool action_named = false;
  command.action = take_action_word(args, action_named);
  if (command.action == Action::Plot) {  // its own words, none of the option table's
    command.plot_words = args;
    return command;
  }
  const cxxopts::ParseResult parsed = parse_with_cxxopts(argc > 0 ? argv[0] : "finetune", normalize_args(args));

  if (parsed.count("help")) {
    command.help = true;
    command.help_text = action_named ? usage_text(command.action) : usage_text();
    return command;
  }
  if (parsed.count("version")) {
    command.version = true;
    return command;
  }
  // A repeated flag takes its last value (argparse's rule, which launch scripts rely on when they
  // append overrides to a fixed command line); cxxopts keeps the last one.
  if (parsed.count("config") > 1) throw UsageError("--config: given more than once (one options file per run)");

  check_finetune_environment(env);

  // Layer the sources, keyed by option name: later assignments win.
  std::map<std::string, RawValue> values;
  if (parsed.count("config")) {
    command.config_file = parsed["config"].as<std::string>();
    values = read_config_file(command.config_file, command.action, command.ignored_settings);
  }
  for (auto& [name, raw] : read_environment(env, command.action, command.ignored_settings)) values[name] = raw;
  // Command-line occurrences in order, under any of an option's names: each is validated (as
  // argparse converts every one), the last one wins.
  for (const auto& argument : parsed.arguments()) {
    const OptionRow* row = find_option_row(argument.key());
    if (row == nullptr) continue;  // --config, --help
    if (!row->spec.read_by(command.action)) throw UsageError(not_read_message(argument.key(), row->spec, command.action));
    const RawValue raw{argument.value(), "", argument.key()};
    try {
      Options scratch;
      row->bind(scratch, raw.text);
    } catch (const BadValue& e) {
      throw UsageError(describe_option(raw) + ": " + e.what());
    }
    values[row->spec.name] = raw;
  }

  for (const auto& row : option_rows()) {
    const auto it = values.find(row.spec.name);
    if (it == values.end()) continue;
    command.options.given.insert(row.spec.name);
    try {
      row.bind(command.options, it->second.text);
    } catch (const BadValue& e) {
      throw UsageError(describe_option(it->second) + ": " + e.what());
    }
  }
  apply_precision_flags(command.options);
  check_required(command);
  return command;
}

}  // namespace finetune
