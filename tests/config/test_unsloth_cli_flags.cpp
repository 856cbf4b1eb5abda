// Every flag of Unsloth's unsloth-cli.py, with the type, default and nargs its argparse declares
// (unslothai/unsloth, unsloth-cli.py at 015bdef0d94a, read flag by flag): each is an option of
// finetune's table taking the same kind of value (store_true flags are booleans that need no
// value, nargs='+' flags are lists), or one finetune lacks, refused with a reason
// (unsloth_only_options). Unsloth's default, passed explicitly, gives finetune's default — except
// the deliberate differences, each of which the README's "Coming from Unsloth's CLI" table lists.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../src/config/option_values.h"
#include "finetune/util/text.h"
#include "option_test_helpers.h"

namespace finetune {
namespace {

using testing::parse_train;

struct UnslothFlag {
  std::string name;
  std::string kind;           // str, int, float, store_true
  std::string default_value;  // as argparse holds it; "None" for None
  bool nargs_plus = false;
};

// unsloth-cli.py's add_argument calls, in its order.
const std::vector<UnslothFlag>& unsloth_cli_flags() {
  static const std::vector<UnslothFlag> flags = {
      {"model_name", "str", "unsloth/llama-3-8b"}, {"max_seq_length", "int", "2048"},
      {"dtype", "str", "None"}, {"load_in_4bit", "store_true", "False"},
      {"dataset", "str", "yahma/alpaca-cleaned"},
      {"r", "int", "16"}, {"lora_alpha", "int", "16"}, {"lora_dropout", "float", "0.0"}, {"bias", "str", "none"},
      {"use_gradient_checkpointing", "str", "unsloth"}, {"random_state", "int", "3407"},
      {"use_rslora", "store_true", "False"}, {"loftq_config", "str", "None"}, {"use_dora", "store_true", "False"},
      {"per_device_train_batch_size", "int", "2"}, {"per_device_eval_batch_size", "int", "4"},
      {"gradient_accumulation_steps", "int", "4"}, {"warmup_steps", "int", "5"}, {"max_steps", "int", "400"},
      {"learning_rate", "float", "2e-4"}, {"optim", "str", "adamw_8bit"}, {"weight_decay", "float", "0.01"},
      {"lr_scheduler_type", "str", "linear"}, {"seed", "int", "3407"}, {"packing", "store_true", "False"},
      {"report_to", "str", "tensorboard"}, {"logging_steps", "int", "1"},
      {"output_dir", "str", "outputs"}, {"save_model", "store_true", "False"}, {"save_method", "str", "merged_16bit"},
      {"save_gguf", "store_true", "False"}, {"save_path", "str", "model"}, {"quantization", "str", "q8_0", true},
      {"push_model", "store_true", "False"}, {"push_gguf", "store_true", "False"}, {"hub_path", "str", "hf/model"},
      {"hub_token", "str", "None"},
      {"raw_text_file", "str", "None"}, {"chunk_size", "int", "2048"}, {"stride", "int", "512"},
  };
  return flags;
}

// Defaults finetune does not share, on purpose (README "Coming from Unsloth's CLI" says why).
const std::set<std::string>& deliberate_default_differences() {
  static const std::set<std::string> names = {"model_name", "dataset", "optim", "report_to", "hub_path"};
  return names;
}

// Each flag's setting in Options, as text, to compare Unsloth's default with finetune's.
std::string setting(const Options& o, const std::string& name) {
  static const std::map<std::string, std::function<std::string(const Options&)>> fields = {
      {"model_name", [](const Options& x) { return x.model_name; }},
      {"max_seq_length", [](const Options& x) { return std::to_string(x.max_seq_length); }},
      {"dtype", [](const Options& x) { return x.dtype; }},
      {"load_in_4bit", [](const Options& x) { return std::to_string(x.load_in_4bit); }},
      {"dataset", [](const Options& x) { return x.dataset; }},
      {"r", [](const Options& x) { return std::to_string(x.r); }},
      {"lora_alpha", [](const Options& x) { return std::to_string(x.lora_alpha); }},
      {"lora_dropout", [](const Options& x) { return std::to_string(x.lora_dropout); }},
      {"bias", [](const Options& x) { return x.bias; }},
      {"use_gradient_checkpointing", [](const Options& x) { return std::to_string(x.use_gradient_checkpointing); }},
      {"random_state", [](const Options& x) { return std::to_string(x.random_state); }},
      {"use_rslora", [](const Options& x) { return std::to_string(x.use_rslora); }},
      {"loftq_config", [](const Options&) { return std::string("none"); }},  // only None is accepted
      {"use_dora", [](const Options& x) { return std::to_string(x.use_dora); }},
      {"per_device_train_batch_size", [](const Options& x) { return std::to_string(x.per_device_train_batch_size); }},
      {"per_device_eval_batch_size", [](const Options& x) { return std::to_string(x.per_device_eval_batch_size); }},
      {"gradient_accumulation_steps", [](const Options& x) { return std::to_string(x.gradient_accumulation_steps); }},
      {"warmup_steps", [](const Options& x) { return std::to_string(x.warmup_steps); }},
      {"max_steps", [](const Options& x) { return std::to_string(x.max_steps); }},
      {"learning_rate", [](const Options& x) { return std::to_string(x.learning_rate); }},
      {"optim", [](const Options& x) { return x.optim; }},
      {"weight_decay", [](const Options& x) { return std::to_string(x.weight_decay); }},
      {"lr_scheduler_type", [](const Options& x) { return x.lr_scheduler_type; }},
      {"seed", [](const Options& x) { return std::to_string(x.seed); }},
      {"packing", [](const Options& x) { return std::to_string(x.packing); }},
      {"report_to", [](const Options& x) { return x.report_to; }},
      {"logging_steps", [](const Options& x) { return std::to_string(x.logging_steps); }},
      {"output_dir", [](const Options& x) { return x.output_dir; }},
      {"save_model", [](const Options& x) { return std::to_string(x.save_model); }},
      {"save_method", [](const Options& x) { return x.save_method; }},
      {"save_gguf", [](const Options& x) { return std::to_string(x.save_gguf); }},
      {"save_path", [](const Options& x) { return x.save_path; }},
      {"quantization", [](const Options& x) { return x.quantization; }},
      {"push_model", [](const Options& x) { return std::to_string(x.push_model); }},
      {"hub_path", [](const Options& x) { return x.hub_path; }},
      {"hub_token", [](const Options& x) { return x.hub_token; }},
      {"raw_text_file", [](const Options& x) { return x.raw_text_file; }},
      {"chunk_size", [](const Options& x) { return std::to_string(x.chunk_size); }},
      {"stride", [](const Options& x) { return std::to_string(x.stride); }},
  };
  return fields.at(name)(o);
}

bool refused_with_reason(const std::string& name) {
  for (const auto& [option, reason] : unsloth_only_options())
    if (option == name) return !reason.empty();
  return false;
}

TEST(UnslothCliFlags, EveryFlagIsAnOptionOfTheSameKindOrRefusedWithAReason) {
  for (const auto& flag : unsloth_cli_flags()) {
    SCOPED_TRACE("--" + flag.name);
    if (refused_with_reason(flag.name)) {
      EXPECT_EQ(find_option_row(flag.name), nullptr);
      continue;
    }
    const OptionRow* row = find_option_row(flag.name);
    ASSERT_NE(row, nullptr) << "an unsloth-cli.py flag finetune neither has nor refuses";
    if (flag.kind == "store_true") {
      EXPECT_EQ(row->spec.type, "bool");
      EXPECT_EQ(row->spec.default_value, "false");
    } else if (flag.nargs_plus) {
      EXPECT_EQ(row->spec.type, "list");
    } else if (flag.kind == "int") {
      // --lora_alpha: Unsloth's int, PEFT's float (a README row); a float option takes every int.
      EXPECT_TRUE(row->spec.type == "int" || (row->spec.type == "float" && flag.name == "lora_alpha")) << row->spec.type;
    } else if (flag.kind == "float") {
      EXPECT_EQ(row->spec.type, "float");
    }
  }
}

TEST(UnslothCliFlags, UnslothsDefaultsAreFinetunesButTheDeliberateDifferences) {
  const Options defaults = parse_train({}).options;
  for (const auto& flag : unsloth_cli_flags()) {
    SCOPED_TRACE("--" + flag.name);
    if (refused_with_reason(flag.name) || flag.kind == "store_true") continue;  // store_true: tested above
    // The default as a command line would spell it (argparse's None is no value: the unset setting).
    const bool none = flag.default_value == "None";
    const Options given = none ? defaults : parse_train({"--" + flag.name, flag.default_value}).options;
    const bool same = setting(given, flag.name) == setting(defaults, flag.name) &&
                      (!none || setting(defaults, flag.name).empty() || flag.name == "dtype" ||
                       flag.name == "loftq_config");
    EXPECT_EQ(!same, deliberate_default_differences().count(flag.name) > 0)
        << "Unsloth's default " << flag.default_value << " gives " << setting(given, flag.name) << ", finetune's is "
        << setting(defaults, flag.name);
  }
  // argparse's None for --dtype is "auto": finetune spells it the same way.
  EXPECT_EQ(parse_train({"--dtype", "None"}).options.dtype, defaults.dtype);
  EXPECT_EQ(parse_train({"--quantization", "f16", "q8_0"}).options.quantization, "f16,q8_0");  // nargs='+'
}

TEST(UnslothCliFlags, TheReadmeTableListsEveryDeliberateDifference) {
  // The checkout's README: $FINETUNE_ROOT (build/env.sh), else the working directory's.
  const char* root = std::getenv("FINETUNE_ROOT");
  const auto readme = std::filesystem::path(root && *root ? root : ".") / "README.md";
  std::ifstream in(readme);
  ASSERT_TRUE(in) << readme << " (set FINETUNE_ROOT to the checkout)";
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const auto start = all.find("## Coming from Unsloth's CLI");
  ASSERT_NE(start, std::string::npos);
  std::istringstream section(all.substr(start, all.find("\n## ", start + 1) - start));
  std::set<std::string> first_cells;  // the flag column of the table's rows
  for (std::string line; std::getline(section, line);) {
    if (line.rfind("| ", 0) == 0) first_cells.insert(line.substr(0, line.find(" | ", 2)));
  }
  auto has_row = [&](const std::string& name) {
    for (const auto& cell : first_cells)
      if (cell.find("`--" + name + "`") != std::string::npos) return true;
    return false;
  };
  for (const auto& name : deliberate_default_differences()) EXPECT_TRUE(has_row(name)) << "--" << name;
  for (const auto& [name, reason] : unsloth_only_options()) EXPECT_TRUE(has_row(name)) << "--" << name;
}

}  // namespace
}  // namespace finetune
