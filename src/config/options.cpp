// The option table and the layered parser (config file < environment < command line).
//
// Every option is one row of `build_option_table()`: its OptionSpec (name, group, type, default,
// help) plus a binding that converts and validates a string into its `Options` field. All three
// sources are reduced to strings first (a JSON array becomes a comma-separated list), so one
// conversion path validates every source and reports errors the same way.
#include "finetune/config/options.h"

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// A value that does not fit its option; the caller prefixes the option's name and origin.
struct BadValue : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Binding = std::function<void(Options&, const std::string&)>;

struct OptionRow {
  OptionSpec spec;
  Binding bind;
};

const char* const kGroupOrder[] = {"model", "LoRA", "training", "data", "saving", "logging", "distributed"};

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string format_double(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// ---- value converters (throw BadValue with what was expected and what was given)

int64_t parse_int(const std::string& text, int64_t min_value) {
  const std::string expected = min_value == std::numeric_limits<int64_t>::min()
                                   ? "expected an integer"
                                   : "expected an integer >= " + std::to_string(min_value);
  const std::string s = trim(text);
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) throw BadValue(expected + ", got " + in_quotes(text));
  if (value < min_value) throw BadValue(expected + ", got " + in_quotes(text));
  return value;
}

// A numeric interval; open ends are written as "(" / ")".
struct Interval {
  double low = -std::numeric_limits<double>::infinity();
  bool low_inclusive = true;
  double high = std::numeric_limits<double>::infinity();
  bool high_inclusive = true;

  bool contains(double v) const {
    return (low_inclusive ? v >= low : v > low) && (high_inclusive ? v <= high : v < high);
  }
  std::string describe() const {
    const bool has_low = std::isfinite(low), has_high = std::isfinite(high);
    if (has_low && has_high)
      return std::string("in ") + (low_inclusive ? "[" : "(") + format_double(low) + ", " +
             format_double(high) + (high_inclusive ? "]" : ")");
    if (has_low) return (low_inclusive ? ">= " : "> ") + format_double(low);
    if (has_high) return (high_inclusive ? "<= " : "< ") + format_double(high);
    return "";
  }
};

const Interval kAnyNumber{};
const Interval kPositive{0.0, false};
const Interval kNonNegative{0.0, true};
const Interval kUnitHalfOpen{0.0, true, 1.0, false};  // [0, 1)

double parse_float(const std::string& text, const Interval& interval) {
  const std::string range = interval.describe();
  const std::string expected = "expected a number" + (range.empty() ? "" : " " + range);
  const std::string s = trim(text);
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
    throw BadValue(expected + ", got " + in_quotes(text));
  if (!interval.contains(value)) throw BadValue(expected + ", got " + in_quotes(text));
  return value;
}

// true/false/1/0 (case-insensitive), plus option-specific words that mean true.
bool parse_bool(const std::string& text, const std::vector<std::string>& extra_true_words = {}) {
  const std::string s = lowercase(trim(text));
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  for (const auto& word : extra_true_words)
    if (s == word) return true;
  std::string expected = "expected true, false, 1 or 0";
  for (const auto& word : extra_true_words) expected += " or " + in_quotes(word);
  throw BadValue(expected + ", got " + in_quotes(text));
}

std::vector<std::string> parse_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (item.empty()) throw BadValue("expected a comma-separated list without empty items, got " + in_quotes(text));
    items.push_back(item);
  }
  if (items.empty()) throw BadValue("expected a non-empty comma-separated list, got " + in_quotes(text));
  return items;
}

// ---- row factories: each binds one Options field, its default is read from Options{}

OptionSpec spec(const std::string& name, const std::string& group, const std::string& type,
                const std::string& default_value, const std::string& help) {
  return OptionSpec{name, group, type, default_value, help};
}

OptionRow int_row(const std::string& name, const std::string& group, int64_t Options::*field,
                  int64_t min_value, const std::string& help) {
  return {spec(name, group, "int", std::to_string(Options{}.*field), help),
          [=](Options& o, const std::string& v) { o.*field = parse_int(v, min_value); }};
}

OptionRow any_int_row(const std::string& name, const std::string& group, int64_t Options::*field,
                      const std::string& help) {
  return int_row(name, group, field, std::numeric_limits<int64_t>::min(), help);
}

OptionRow float_row(const std::string& name, const std::string& group, double Options::*field,
                    const Interval& interval, const std::string& help) {
  return {spec(name, group, "float", format_double(Options{}.*field), help),
          [=](Options& o, const std::string& v) { o.*field = parse_float(v, interval); }};
}

OptionRow bool_row(const std::string& name, const std::string& group, bool Options::*field,
                   const std::string& help, const std::vector<std::string>& extra_true_words = {}) {
  return {spec(name, group, "bool", Options{}.*field ? "true" : "false", help),
          [=](Options& o, const std::string& v) { o.*field = parse_bool(v, extra_true_words); }};
}

// A flag kept for compatibility with Unsloth's CLI whose `true` we cannot honour.
OptionRow unsupported_true_row(const std::string& name, const std::string& group, bool Options::*field,
                               const std::string& reason, const std::string& help) {
  return {spec(name, group, "bool", Options{}.*field ? "true" : "false", help),
          [=](Options& o, const std::string& v) {
            const bool value = parse_bool(v);
            if (value) throw BadValue("true is not supported (" + reason + ")");
            o.*field = value;
          }};
}

OptionRow string_row(const std::string& name, const std::string& group, std::string Options::*field,
                     bool allow_empty, const std::string& help) {
  return {spec(name, group, "string", Options{}.*field, help),
          [=](Options& o, const std::string& v) {
            if (!allow_empty && trim(v).empty()) throw BadValue("expected a non-empty value");
            o.*field = v;
          }};
}

// Choice values: `choices` are stored as given, `aliases` map to a choice, `unsupported` maps a
// known-but-unimplemented value to the reason we reject it (with a better message than "unknown").
struct ChoiceSet {
  std::vector<std::string> choices;
  std::vector<std::pair<std::string, std::string>> aliases = {};
  std::vector<std::pair<std::string, std::string>> unsupported = {};
  std::string unsupported_prefix = "";  // any value starting with it is unsupported (e.g. gguf_*)
  std::string unsupported_prefix_reason = "";
};

std::string parse_choice(const std::string& text, const ChoiceSet& set) {
  const std::string s = lowercase(trim(text));
  for (const auto& choice : set.choices)
    if (s == lowercase(choice)) return choice;
  for (const auto& alias : set.aliases)
    if (s == alias.first) return alias.second;
  const std::string supported = "supported: " + join(set.choices, ", ");
  for (const auto& bad : set.unsupported)
    if (s == bad.first) throw BadValue(in_quotes(text) + " is not supported (" + bad.second + "); " + supported);
  if (!set.unsupported_prefix.empty() && s.rfind(set.unsupported_prefix, 0) == 0)
    throw BadValue(in_quotes(text) + " is not supported (" + set.unsupported_prefix_reason + "); " + supported);
  throw BadValue("unknown value " + in_quotes(text) + "; " + supported);
}

OptionRow choice_row(const std::string& name, const std::string& group, std::string Options::*field,
                     const ChoiceSet& set, const std::string& help) {
  return {spec(name, group, "string", Options{}.*field, help + " (" + join(set.choices, "|") + ")"),
          [=](Options& o, const std::string& v) { o.*field = parse_choice(v, set); }};
}

const std::vector<std::string> kLoraTargets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};

OptionRow target_modules_row() {
  return {spec("target_modules", "LoRA", "list", join(Options{}.target_modules, ","),
               "linear layers that get LoRA adapters (" + join(kLoraTargets, ",") + ", or all-linear)"),
          [](Options& o, const std::string& v) {
            std::vector<std::string> modules = parse_list(v);
            if (modules.size() == 1 && lowercase(modules[0]) == "all-linear") {
              o.target_modules = kLoraTargets;  // PEFT's shorthand: every linear layer but lm_head
              return;
            }
            for (const auto& m : modules)
              if (std::find(kLoraTargets.begin(), kLoraTargets.end(), m) == kLoraTargets.end())
                throw BadValue("unknown module " + in_quotes(m) + "; supported: " + join(kLoraTargets, ", ") +
                               " or all-linear");
            o.target_modules = modules;
          }};
}

std::vector<OptionRow> build_option_table() {
  const ChoiceSet dtype{{"auto", "bfloat16", "float16", "float32"},
                        {{"bf16", "bfloat16"}, {"fp16", "float16"}, {"fp32", "float32"}}};
  const ChoiceSet device{{"auto", "cpu", "cuda"}};
  const ChoiceSet bias{{"none"},
                       {},
                       {{"all", "only none is supported"}, {"lora_only", "only none is supported"}}};
  // adamw_torch_fused computes the same update as adamw_torch; the fused kernel is an HF detail.
  const ChoiceSet optim{{"adamw_torch"},
                        {{"adamw_torch_fused", "adamw_torch"}},
                        {{"adamw_8bit", "8-bit optimizers are not implemented"},
                         {"paged_adamw_8bit", "8-bit optimizers are not implemented"},
                         {"paged_adamw_32bit", "paged optimizers are not implemented"}}};
  const ChoiceSet scheduler{{"linear", "cosine", "constant", "constant_with_warmup"}};
  const ChoiceSet chat_template{{"auto", "chatml", "llama3", "mistral", "alpaca"}};
  const ChoiceSet save_method{{"lora", "merged_16bit"},
                              {},
                              {{"merged_4bit", "4-bit export is not implemented"},
                               {"merged_4bit_forced", "4-bit export is not implemented"}},
                              "gguf",
                              "GGUF export is not implemented"};
  const ChoiceSet report_to{{"none", "jsonl"}};
  const ChoiceSet ddp_backend{{"auto", "nccl", "gloo"}};

  return {
      // --- model
      string_row("model_name", "model", &Options::model_name, false,
                 "model directory, or hub id ORG/NAME found in the local Hugging Face cache"),
      int_row("max_seq_length", "model", &Options::max_seq_length, 2, "longest training sequence in tokens"),
      choice_row("dtype", "model", &Options::dtype, dtype,
                 "compute dtype; auto = bfloat16 on CUDA, float32 on CPU"),
      unsupported_true_row("load_in_4bit", "model", &Options::load_in_4bit,
                           "4-bit quantized base weights are not implemented",
                           "accepted for Unsloth compatibility; must be false"),
      choice_row("device", "model", &Options::device, device, "where to train"),

      // --- LoRA
      int_row("r", "LoRA", &Options::r, 1, "LoRA rank"),
      float_row("lora_alpha", "LoRA", &Options::lora_alpha, kPositive, "LoRA scaling numerator (scale = alpha/r)"),
      float_row("lora_dropout", "LoRA", &Options::lora_dropout, kUnitHalfOpen, "dropout on the LoRA input"),
      choice_row("bias", "LoRA", &Options::bias, bias, "which biases to train"),
      bool_row("use_gradient_checkpointing", "LoRA", &Options::use_gradient_checkpointing,
               "recompute activations in the backward pass (\"unsloth\" means true)", {"unsloth"}),
      int_row("random_state", "LoRA", &Options::random_state, 0, "seed for the LoRA A initialisation"),
      bool_row("use_rslora", "LoRA", &Options::use_rslora, "rank-stabilised scaling alpha/sqrt(r)"),
      target_modules_row(),
      string_row("init_adapter", "LoRA", &Options::init_adapter, true,
                 "existing PEFT adapter directory to start from"),

      // --- training
      int_row("per_device_train_batch_size", "training", &Options::per_device_train_batch_size, 1,
              "sequences per micro-batch on each process"),
      int_row("per_device_eval_batch_size", "training", &Options::per_device_eval_batch_size, 1,
              "sequences per evaluation batch on each process"),
      int_row("gradient_accumulation_steps", "training", &Options::gradient_accumulation_steps, 1,
              "micro-batches per optimizer step"),
      int_row("warmup_steps", "training", &Options::warmup_steps, 0, "linear warmup steps (overrides warmup_ratio when > 0)"),
      float_row("warmup_ratio", "training", &Options::warmup_ratio, kUnitHalfOpen,
                "warmup as a fraction of the total steps"),
      any_int_row("max_steps", "training", &Options::max_steps, "optimizer steps; <= 0 uses num_train_epochs"),
      float_row("num_train_epochs", "training", &Options::num_train_epochs, kPositive,
                "epochs when max_steps <= 0"),
      float_row("learning_rate", "training", &Options::learning_rate, kPositive, "peak learning rate"),
      choice_row("optim", "training", &Options::optim, optim, "optimizer (adamw_torch_fused is an alias)"),
      float_row("weight_decay", "training", &Options::weight_decay, kNonNegative, "AdamW decoupled weight decay"),
      float_row("adam_beta1", "training", &Options::adam_beta1, kUnitHalfOpen, "AdamW beta1"),
      float_row("adam_beta2", "training", &Options::adam_beta2, kUnitHalfOpen, "AdamW beta2"),
      float_row("adam_epsilon", "training", &Options::adam_epsilon, kPositive, "AdamW epsilon"),
      float_row("max_grad_norm", "training", &Options::max_grad_norm, kAnyNumber,
                "gradient clipping norm; <= 0 disables clipping"),
      choice_row("lr_scheduler_type", "training", &Options::lr_scheduler_type, scheduler, "learning-rate schedule"),
      int_row("seed", "training", &Options::seed, 0, "seed for data order and dropout"),

      // --- data
      string_row("dataset", "data", &Options::dataset, true,
                 ".json/.jsonl file or directory, or hub id in the local Hugging Face datasets cache"),
      string_row("eval_dataset", "data", &Options::eval_dataset, true, "evaluation data, same forms as --dataset"),
      float_row("eval_split", "data", &Options::eval_split, kUnitHalfOpen,
                "fraction of the training rows held out for evaluation"),
      int_row("eval_steps", "data", &Options::eval_steps, 0, "evaluate every N steps; 0 = only at the end"),
      choice_row("chat_template", "data", &Options::chat_template, chat_template, "prompt format"),
      bool_row("train_on_completions", "data", &Options::train_on_completions,
               "compute the loss on assistant replies only"),
      bool_row("skip_bad_rows", "data", &Options::skip_bad_rows, "skip malformed rows instead of failing"),
      bool_row("group_by_length", "data", &Options::group_by_length, "batch sequences of similar length"),
      bool_row("packing", "data", &Options::packing, "pack several short sequences into one"),
      bool_row("shuffle", "data", &Options::shuffle, "shuffle the training rows every epoch"),
      bool_row("dataloader_drop_last", "data", &Options::dataloader_drop_last, "drop the last incomplete batch"),

      // --- saving
      string_row("output_dir", "saving", &Options::output_dir, false, "checkpoints, adapter and metrics go here"),
      int_row("save_steps", "saving", &Options::save_steps, 0, "checkpoint every N steps; 0 = only the final save"),
      bool_row("save_model", "saving", &Options::save_model, "also export per --save_method into --save_path"),
      choice_row("save_method", "saving", &Options::save_method, save_method, "export format"),
      string_row("save_path", "saving", &Options::save_path, false, "export directory"),

      // --- logging
      choice_row("report_to", "logging", &Options::report_to, report_to,
                 "extra metrics sink (metrics.jsonl is always written)"),
      int_row("logging_steps", "logging", &Options::logging_steps, 1, "log every N optimizer steps"),
      string_row("dump_logits", "logging", &Options::dump_logits, true,
                 "eval: write logits to this .safetensors file"),
      int_row("profile_start_step", "logging", &Options::profile_start_step, 0,
              "profile optimizer steps from this one (Chrome trace and kernel time breakdown in output_dir); 0 = off"),
      int_row("profile_steps", "logging", &Options::profile_steps, 1, "number of optimizer steps to profile"),

      // --- distributed
      float_row("ddp_timeout", "distributed", &Options::ddp_timeout, kPositive,
                "seconds without progress before aborting"),
      int_row("ddp_bucket_cap_mb", "distributed", &Options::ddp_bucket_cap_mb, 1, "gradient bucket size in MiB"),
      bool_row("ddp_find_unused_parameters", "distributed", &Options::ddp_find_unused_parameters,
               "tolerate trainable parameters without gradients"),
      int_row("ddp_check_consistency_steps", "distributed", &Options::ddp_check_consistency_steps, 0,
              "every N steps verify all ranks hold identical LoRA weights; 0 = never"),
      choice_row("ddp_backend", "distributed", &Options::ddp_backend, ddp_backend, "collective backend"),
  };
}

const std::vector<OptionRow>& rows() {
  static const std::vector<OptionRow> table = build_option_table();  // immutable after first use
  return table;
}

const OptionRow* find_row(const std::string& name) {
  for (const auto& row : rows())
    if (row.spec.name == name) return &row;
  return nullptr;
}

std::string env_key(const std::string& name) {
  std::string key = "FINETUNE_";
  for (unsigned char c : name) key += static_cast<char>(std::toupper(c));
  return key;
}

// A raw value and where it came from, for error messages.
struct RawValue {
  std::string text;
  std::string origin;  // "" (command line), "FINETUNE_R", "cfg.json"
};

std::string describe_option(const std::string& name, const RawValue& raw) {
  return "--" + name + (raw.origin.empty() ? "" : " (from " + raw.origin + ")");
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
      if (!item.is_string()) throw UsageError(where + "expected an array of strings, got " + value.dump());
      items.push_back(item.get<std::string>());
    }
    return join(items, ",");
  }
  throw UsageError(where + "expected a " + row.spec.type + " value, got " + value.dump());
}

void read_config_file(const std::string& file, std::map<std::string, RawValue>& values) {
  std::ifstream in(file);
  if (!in) throw UsageError("--config: cannot read " + in_quotes(file));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw UsageError(file + ": malformed JSON: " + what);
  }
  if (!doc.is_object()) throw UsageError(file + ": expected a JSON object of option names to values");
  for (const auto& [key, value] : doc.items()) {
    const OptionRow* row = find_row(key);
    if (row == nullptr) throw UsageError(file + ": unknown option " + in_quotes(key));
    values[key] = RawValue{json_value_to_text(value, *row, file), file};
  }
}

// Two cxxopts quirks are smoothed over before it sees the arguments:
//  - an option with an implicit value never takes the next argument, so `--packing false` is
//    rewritten to `--packing=false`;
//  - cxxopts only matches long names of two or more characters, so `--r 8` / `--r=8` (Unsloth's
//    spelling) become the short form `-r 8`.
std::vector<std::string> normalize_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const auto equals = arg.find('=');
      const std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      const OptionRow* row = find_row(name);
      if (equals == std::string::npos && row != nullptr && row->spec.type == "bool" && i + 1 < args.size()) {
        // Any bare word after a boolean flag is its value (the action word can only come first),
        // so `--packing maybe` is reported against --packing rather than as a stray argument.
        if (args[i + 1].empty() || args[i + 1][0] != '-') arg += "=" + args[++i];
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

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> out;
    for (const auto& row : rows()) out.push_back(row.spec);
    return out;
  }();
  return specs;
}

std::string usage_text() {
  std::ostringstream out;
  out << "Usage: finetune [train|eval] [--config FILE.json] [--OPTION VALUE | --OPTION=VALUE]...\n"
      << "\n"
      << "LoRA supervised fine-tuning of Hugging Face causal LMs (Llama, Qwen2, Qwen3, Mistral).\n"
      << "Every option can also be set as a key of the --config JSON file or as the environment\n"
      << "variable FINETUNE_<OPTION> (upper case); the command line wins over the environment,\n"
      << "which wins over the file. Lists are comma-separated (JSON arrays in the file); booleans\n"
      << "are true/false/1/0, and a bare --FLAG means true.\n"
      << "\n"
      << "  -h, --help            show this text\n"
      << "  --config FILE.json    read options from a JSON object\n";
  for (const char* group : kGroupOrder) {
    out << "\n" << group << ":\n";
    for (const auto& spec : option_table()) {
      if (spec.group != group) continue;
      std::string flag = "  --" + spec.name + " <" + spec.type + ">";
      if (flag.size() < 40) flag.resize(40, ' ');
      else flag += "  ";
      out << flag << spec.help << " [default: " << (spec.default_value.empty() ? "\"\"" : spec.default_value)
          << "]\n";
    }
  }
  return out.str();
}

Command parse_command(int argc, const char* const* argv, const EnvMap& env) {
  Command command;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  // The action is an optional first word; any other bare word is an error below.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    if (args[0] != "train" && args[0] != "eval")
      throw UsageError("unknown action " + in_quotes(args[0]) + " (expected train or eval, before any option)");
    command.action = args[0];
    args.erase(args.begin());
  }
  args = normalize_args(args);

  cxxopts::Options parser("finetune");
  auto adder = parser.add_options();
  adder("h,help", "show usage");
  adder("config", "options file", cxxopts::value<std::string>());
  for (const auto& row : rows()) {
    auto value = cxxopts::value<std::string>();
    if (row.spec.type == "bool") value->implicit_value("true");
    adder(row.spec.name, row.spec.help, value);
  }

  std::vector<const char*> cargv = {argc > 0 ? argv[0] : "finetune"};
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
      throw UsageError("--" + name + ": unknown option (see finetune --help)");
    }
    throw UsageError(name);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(one_line(e.what()));
  }
  if (!parsed.unmatched().empty())
    throw UsageError("unexpected argument " + in_quotes(parsed.unmatched().front()) +
                     " (options are --NAME VALUE; the action word train|eval must come first)");

  if (parsed.count("help")) {
    command.help = true;
    command.help_text = usage_text();
    return command;
  }
  if (parsed.count("config") > 1) throw UsageError("--config: given more than once");
  for (const auto& row : rows())
    if (parsed.count(row.spec.name) > 1) throw UsageError("--" + row.spec.name + ": given more than once");

  // Layer the sources: later assignments win.
  std::map<std::string, RawValue> values;
  if (parsed.count("config")) {
    command.config_file = parsed["config"].as<std::string>();
    read_config_file(command.config_file, values);
  }
  for (const auto& row : rows()) {
    const auto it = env.find(env_key(row.spec.name));
    if (it != env.end()) values[row.spec.name] = RawValue{it->second, it->first};
  }
  for (const auto& row : rows())
    if (parsed.count(row.spec.name)) values[row.spec.name] = RawValue{parsed[row.spec.name].as<std::string>(), ""};

  for (const auto& row : rows()) {
    const auto it = values.find(row.spec.name);
    if (it == values.end()) continue;
    try {
      row.bind(command.options, it->second.text);
    } catch (const BadValue& e) {
      throw UsageError(describe_option(row.spec.name, it->second) + ": " + e.what());
    }
  }

  if (command.options.model_name.empty()) throw UsageError("--model_name: required (a model directory or hub id)");
  if (command.action == "train" && command.options.dataset.empty())
    throw UsageError("--dataset: required for train (a .json/.jsonl file, a directory, or a hub id)");
  return command;
}

}  // namespace finetune
