// The option table: every option's name, group, type, default, help and value binding, in one
// place. Choice lists are read from the modules that consume them (dtype_names.h,
// chat_template.h, projection_names.h, save_methods.h, optimizer_names.h), so the parser, the help text
// and the consumers cannot disagree (tests/commands/test_option_consumers.cpp checks both directions).
#include <algorithm>
#include <filesystem>

#include "finetune/checkpoint/save_methods.h"
#include "finetune/data/data_file_splits.h"
#include "finetune/data/chat_template.h"
#include "finetune/data/step_planner.h"
#include "finetune/gguf/quantization_names.h"
#include "finetune/lora/lora_config.h"
#include "finetune/model/dtype_names.h"
#include "finetune/model/offload_activations_names.h"
#include "finetune/model/projection_names.h"
#include "finetune/train/checkpoint_policy.h"
#include "finetune/train/lm_head_loss_names.h"
#include "finetune/train/lr_scheduler_names.h"
#include "finetune/train/micro_step_graph_limits.h"
#include "finetune/train/optimizer_names.h"
#include "finetune/train/dpo_loss_names.h"
#include "finetune/util/log.h"
#include "finetune/util/text.h"
#include "option_values.h"

namespace finetune {
namespace {

// Which commands read an option (OptionSpec::commands), named once for the table below.
using Commands = std::vector<Action>;
const Commands kEveryCommand = {Action::Train, Action::Eval, Action::Generate, Action::Chat, Action::Export,
                                Action::Dpo,   Action::Orpo};
// The training commands: SFT (train) and preference training (dpo, orpo).
const Commands kTrain = {Action::Train, Action::Dpo, Action::Orpo};
// SFT only: packing, raw text, completion masks, dataset mixtures, evaluation and the best model
// (preference training evaluates nothing).
const Commands kSft = {Action::Train};
const Commands kSftEval = {Action::Train, Action::Eval};
const Commands kTrainEval = {Action::Train, Action::Eval, Action::Dpo, Action::Orpo};
const Commands kTemplated = {Action::Train, Action::Eval, Action::Generate, Action::Chat,  // render rows or prompts
                             Action::Dpo,   Action::Orpo};
const Commands kTrainAndDecoding = {Action::Train, Action::Generate, Action::Chat,  // seed, profiling, output_dir
                                    Action::Dpo,   Action::Orpo};
const Commands kGenerating = {Action::Generate, Action::Chat};
const Commands kGenerateOnly = {Action::Generate};
const Commands kChatOnly = {Action::Chat};
const Commands kEvalOnly = {Action::Eval};
const Commands kExporting = {Action::Train, Action::Export, Action::Dpo, Action::Orpo};
// An adapter to start training from (train, dpo, orpo) or to evaluate (eval: either name, one setting).
const Commands kAdapterLoaders = {Action::Train, Action::Eval, Action::Dpo, Action::Orpo};
// An adapter to run or merge (eval reads it as --init_adapter: stage_configs.h, adapter_setup_from).
const Commands kAdapterAppliers = {Action::Eval, Action::Generate, Action::Chat, Action::Export};
// Preference training (TRL's DPOConfig / ORPOConfig names).
const Commands kPreference = {Action::Dpo, Action::Orpo};
const Commands kDpo = {Action::Dpo};

// Where a row sits: its help group and the commands that read it.
struct Placement {
  std::string group;
  Commands commands;
};

OptionSpec spec(const std::string& name, const Placement& at, const std::string& type,
                const std::string& default_value, const std::string& help,
                const std::vector<std::string>& choices = {}) {
  return OptionSpec{name, at.group, type, default_value, help, choices, {}, at.commands};
}

// The row under more names (each one accepted as flag, config-file key and FINETUNE_ variable).
OptionRow with_aliases(OptionRow row, const std::vector<std::string>& aliases) {
  row.spec.aliases = aliases;
  return row;
}

OptionRow int_row(const std::string& name, const Placement& at, int64_t Options::*field,
                  int64_t min_value, const std::string& help) {
  return {spec(name, at, "int", std::to_string(Options{}.*field), help),
          [=](Options& o, const std::string& v) { o.*field = parse_int(v, min_value); }};
}

OptionRow any_int_row(const std::string& name, const Placement& at, int64_t Options::*field,
                      const std::string& help) {
  return int_row(name, at, field, std::numeric_limits<int64_t>::min(), help);
}

OptionRow float_row(const std::string& name, const Placement& at, double Options::*field,
                    const Interval& interval, const std::string& help) {
  return {spec(name, at, "float", format_double(Options{}.*field), help),
          [=](Options& o, const std::string& v) { o.*field = parse_float(v, interval); }};
}

OptionRow bool_row(const std::string& name, const Placement& at, bool Options::*field,
                   const std::string& help, const std::vector<std::string>& extra_true_words = {}) {
  return {spec(name, at, "bool", Options{}.*field ? "true" : "false", help),
          [=](Options& o, const std::string& v) { o.*field = parse_bool(v, extra_true_words); }};
}

// --chat_template: a name (data/chat_template.h: chat_template_names(), or an alias) or a .jinja
// file that exists.
OptionRow chat_template_row() {
  return {spec("chat_template", {"data", kTemplated}, "string", Options{}.chat_template,
               "how rows and prompts become text: auto (the tokenizer's own chat_template), a built-in template, "
               "a .jinja file, or alpaca (instruction/input/output rows in the Alpaca prompt, as Unsloth's CLI "
               "formats them; no chat template) (" + join(chat_template_names(), "|") + ")",
               chat_template_names()),
          [](Options& o, const std::string& v) {
            for (const auto& [alias, name] : chat_template_aliases()) {
              if (v == alias) return void(o.chat_template = name);
            }
            const auto names = chat_template_names();
            std::error_code ec;  // a name too long for a path, or unreadable: not a file
            if (std::find(names.begin(), names.end(), v) != names.end() || std::filesystem::is_regular_file(v, ec)) {
              return void(o.chat_template = v);
            }
            throw BadValue("\"" + v + "\" is neither a template name (" + join(names, ", ") + ") nor an existing file");
          }};
}

// An Unsloth CLI option for a feature finetune lacks, whose "off" spellings (Unsloth's None
// default, or nothing) are accepted and do nothing, and whose other values are refused.
OptionRow unsupported_string_row(const std::string& name, const Placement& at, const std::string& reason,
                                 const std::string& help) {
  return {spec(name, at, "string", "None", help),
          [=](Options&, const std::string& v) {
            const std::string s = lowercase(trim(v));
            if (s != "none" && s != "null" && !s.empty())
              throw BadValue(in_quotes(v) + " is not supported (" + reason + "); only None is accepted");
          }};
}

// --neftune_noise_alpha: TRL's NEFTune (model/embedding_noise.h), SFT only (finetune's preference
// objectives do not draw it); None (HF's default) or 0 is off.
OptionRow neftune_noise_alpha_row() {
  return {spec("neftune_noise_alpha", {"training", kSft}, "float", "None",
               "TRL's NEFTune: uniform noise of magnitude alpha / sqrt(L * hidden_size) on the input embeddings "
               "while training (L: the micro-batch's longest sample, its padded length in transformers); seeded "
               "from --seed per micro-batch; None or 0: off. Not with --packing; steps are planned literally"),
          [](Options& o, const std::string& v) {
            const std::string s = lowercase(trim(v));
            o.neftune_noise_alpha = (s.empty() || s == "none" || s == "null") ? 0.0 : parse_float(v, kNonNegative);
          }};
}

// A comma-separated list whose items are each one of `set`'s choices; stored normalized, joined by commas.
OptionRow list_choice_row(const std::string& name, const Placement& at, std::string Options::*field,
                          const ChoiceSet& set, const std::string& help) {
  return {spec(name, at, "list", Options{}.*field, help + " (" + join(set.choices, "|") + ")", set.choices),
          [=](Options& o, const std::string& v) {
            std::vector<std::string> items;
            for (const auto& item : parse_list(v)) items.push_back(parse_choice(item, set));
            if (items.empty()) throw BadValue("expected at least one of " + join(set.choices, ", "));
            o.*field = join(items, ",");
          }};
}

OptionRow string_row(const std::string& name, const Placement& at, std::string Options::*field,
                     bool allow_empty, const std::string& help) {
  return {spec(name, at, "string", Options{}.*field, help),
          [=](Options& o, const std::string& v) {
            if (!allow_empty && trim(v).empty()) throw BadValue("expected a non-empty value");
            o.*field = v;
          }};
}

OptionRow choice_row(const std::string& name, const Placement& at, std::string Options::*field,
                     const ChoiceSet& set, const std::string& help) {
  return {spec(name, at, "string", Options{}.*field, help + " (" + join(set.choices, "|") + ")", set.choices),
          [=](Options& o, const std::string& v) { o.*field = parse_choice(v, set); }};
}

// A split name as HF datasets allows them (datasets/naming.py: \w+(\.\w+)*), so a typo such as
// "train[:10%]" (a slice, which finetune does not take) is refused before any data is read.
OptionRow split_row(const std::string& name, const Placement& at, std::string Options::*field,
                    const std::string& help) {
  return {spec(name, at, "string", Options{}.*field, help),
          [=](Options& o, const std::string& v) {
            if (!is_split_name(v))
              throw BadValue("expected a split name (letters, digits and _, parts joined by .), got " + in_quotes(v));
            o.*field = v;
          }};
}

OptionRow target_modules_row() {
  const auto& projections = projection_names();
  return {spec("target_modules", {"LoRA", kTrain}, "list", join(Options{}.target_modules, ","),
               "linear layers that get LoRA adapters (" + join(projections, ",") + ", or all-linear)", projections),
          [&projections](Options& o, const std::string& v) {
            std::vector<std::string> modules = parse_list(v);
            if (modules.size() == 1 && lowercase(modules[0]) == "all-linear") {
              o.target_modules = projections;  // PEFT's shorthand: every linear layer but lm_head
              return;
            }
            for (const auto& m : modules)
              if (std::find(projections.begin(), projections.end(), m) == projections.end())
                throw BadValue("unknown module " + in_quotes(m) + "; supported: " + join(projections, ", ") +
                               " or all-linear");
            o.target_modules = modules;
          }};
}

// --- mixture-of-experts options (one block)
// PEFT's target_parameters: the expert stacks a MoE model's LoRA also adapts, by parameter name or
// name suffix; which ones exist is checked against the model (lora/attach_lora.h).
OptionRow target_parameters_row() {
  return {spec("target_parameters", {"LoRA", kTrain}, "list", "",
               "a mixture-of-experts model's expert tensors that get LoRA adapters, by PEFT's names "
               "(mlp.experts.gate_up_proj,mlp.experts.down_proj); none by default"),
          [](Options& o, const std::string& v) {
            const std::string s = lowercase(trim(v));
            o.target_parameters.clear();
            if (s.empty() || s == "none" || s == "null") return;  // PEFT's None: no expert tensors
            std::vector<std::string> parameters = parse_list(v);
            for (const auto& p : parameters)
              if (p.empty() || p.front() == '.' || p.back() == '.') throw BadValue("not a parameter name: " + in_quotes(p));
            o.target_parameters = parameters;
          }};
}

// PEFT's modules_to_save: modules trained whole beside the adapter (None or empty: none).
OptionRow modules_to_save_row() {
  return {spec("modules_to_save", {"LoRA", kTrain}, "list", "None",
               "PEFT's modules_to_save: embed_tokens trains whole and is saved in the adapter (--dtype float32, "
               "untied embeddings, --use_gradient_checkpointing false)"),
          [](Options& o, const std::string& v) {
            const std::string s = lowercase(trim(v));
            o.modules_to_save.clear();
            if (s == "none" || s == "null" || s.empty()) return;
            for (const auto& module : parse_list(v)) {
              const std::string why = module_to_save_refusal(module);
              if (!why.empty()) throw BadValue(in_quotes(module) + ": " + why);
              o.modules_to_save.push_back(module);
            }
          }};
}

std::vector<OptionRow> build_option_table() {
  const ChoiceSet dtype{dtype_names(), dtype_aliases()};
  const ChoiceSet device{{"auto", "cpu", "cuda"}};
  const ChoiceSet bias{{"none", "all", "lora_only"}};
  // The optimizers and HF's aliases for them: train/optimizer_names.h.
  const ChoiceSet optim{optimizer_names(), optimizer_aliases(), unsupported_optimizers()};
  const ChoiceSet scheduler{lr_scheduler_types(), {}, unsupported_lr_scheduler_types()};
  const ChoiceSet strategy{interval_strategy_names(), {}, {{"best", "not implemented; --load_best_model_at_end with "
                                                                    "--save_strategy steps or epoch keeps the best checkpoint"}}};
  // Evaluation computes one metric, the loss (HF names it eval_loss; "loss" means the same).
  const ChoiceSet metric{{"eval_loss"}, {{"loss", "eval_loss"}}};
  const ChoiceSet save_method{supported_save_methods(), save_method_aliases(), {}, kGgufSaveMethodPrefix,
                              kGgufSaveMethodReason};
  // Unsloth CLI's --report_to choices (HF's integrations): named, so the refusal says why.
  std::vector<std::pair<std::string, std::string>> integrations;
  for (const char* name : {"azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte",
                           "mlflow", "neptune", "wandb"}) {
    integrations.emplace_back(name, "finetune writes TensorBoard event files (tensorboard, all) and OUTPUT_DIR/metrics.jsonl");
  }
  std::vector<std::string> report_to_names;
  for (const auto& target : report_targets()) report_to_names.push_back(target.name);
  const ChoiceSet report_to{report_to_names, {}, integrations};
  const ChoiceSet ddp_backend{{"auto", "nccl", "gloo"}};
  const ChoiceSet step_planning{step_planning_names()};

  return {
      // --- model
      string_row("model_name", {"model", kEveryCommand}, &Options::model_name, false,
                 "model directory, or hub id ORG/NAME (downloaded into the Hugging Face cache unless HF_HUB_OFFLINE=1)"),
      string_row("revision", {"model", kEveryCommand}, &Options::revision, false, "the hub model's branch, tag or commit"),
      // max_length: TRL's DPOConfig / ORPOConfig name for the same cap (the longest prompt + completion).
      with_aliases(int_row("max_seq_length", {"model", kTrainEval}, &Options::max_seq_length, 2,
                           "longest training sequence in tokens (dpo, orpo: prompt + completion, TRL's max_length)"),
                   {"max_length"}),
      choice_row("dtype", {"model", kEveryCommand}, &Options::dtype, dtype,
                 "compute dtype; auto (or None, Unsloth's spelling) = bfloat16 on CUDA, float32 on CPU"),
      bool_row("bf16", {"model", kEveryCommand}, &Options::bf16, "HF's bf16: the same as --dtype bfloat16"),
      bool_row("fp16", {"model", kEveryCommand}, &Options::fp16,
               "HF's fp16: the same as --dtype float16 (training with dynamic loss scaling)"),
      bool_row("load_in_4bit", {"model", kEveryCommand}, &Options::load_in_4bit,
               "quantize the decoder projections to 4-bit NF4 at load (QLoRA, bitsandbytes' format and double "
               "quantization); a checkpoint saved in 4-bit loads as 4-bit either way"),
      choice_row("device", {"model", kEveryCommand}, &Options::device, device, "where to train"),

      // --- LoRA
      // lora_r: torchrun's own parser takes --r for an abbreviation of its options and refuses it.
      with_aliases(int_row("r", {"LoRA", kTrain}, &Options::r, 1, "LoRA rank (--lora_r under torchrun)"), {"lora_r"}),
      float_row("lora_alpha", {"LoRA", kTrain}, &Options::lora_alpha, kPositive, "LoRA scaling numerator (scale = alpha/r)"),
      float_row("lora_dropout", {"LoRA", kTrain}, &Options::lora_dropout, kUnitHalfOpen, "dropout on the LoRA input"),
      choice_row("bias", {"LoRA", kTrain}, &Options::bias, bias,
                 "which biases train and are saved in the adapter (PEFT's LoraConfig.bias; lora_only: those of the "
                 "adapted projections); with --dtype float32"),
      bool_row("use_gradient_checkpointing", {"LoRA", kTrain}, &Options::use_gradient_checkpointing,
               "recompute activations in the backward pass (\"unsloth\" means true)", {"unsloth"}),
      int_row("random_state", {"LoRA", kTrain}, &Options::random_state, 0, "seed for the LoRA A initialisation"),
      bool_row("use_rslora", {"LoRA", kTrain}, &Options::use_rslora, "rank-stabilised scaling alpha/sqrt(r)"),
      bool_row("lora_operand_cache", {"LoRA", kTrain}, &Options::lora_operand_cache,
               "on CUDA in bf16/fp16, keep each adapter's half-precision [hi, lo] split of lora_A and lora_B from "
               "one optimizer step to the next (4 bytes per adapter weight: 0.16 GiB on Qwen3-8B at r 16); false "
               "(the default) splits them again in every forward and recompute that reads them (one small kernel "
               "per adapter per use) and frees them with the layer: the same values, less memory at the step's peak"),
      bool_row("use_dora", {"LoRA", kTrain}, &Options::use_dora,
               "DoRA: weight-decomposed LoRA (PEFT's use_dora), a trained magnitude per output row"),
      unsupported_string_row("loftq_config", {"LoRA", kTrain},
                             "LoftQ initialisation is not implemented (PEFT's default initialisation is used)",
                             "accepted for Unsloth compatibility; must be None"),
      target_modules_row(),
      target_parameters_row(),
      modules_to_save_row(),
      neftune_noise_alpha_row(),
      string_row("init_adapter", {"LoRA", kAdapterLoaders}, &Options::init_adapter, true,
                 "existing PEFT adapter directory to start from"),

      // --- training
      int_row("per_device_train_batch_size", {"training", kTrain}, &Options::per_device_train_batch_size, 1,
              "sequences per micro-batch on each process"),
      int_row("per_device_eval_batch_size", {"training", kSftEval}, &Options::per_device_eval_batch_size, 1,
              "sequences per evaluation batch on each process"),
      int_row("gradient_accumulation_steps", {"training", kTrain}, &Options::gradient_accumulation_steps, 1,
              "micro-batches per optimizer step"),
      int_row("warmup_steps", {"training", kTrain}, &Options::warmup_steps, 0, "linear warmup steps (overrides warmup_ratio when > 0)"),
      float_row("warmup_ratio", {"training", kTrain}, &Options::warmup_ratio, kUnitHalfOpen,
                "warmup as a fraction of the total steps"),
      any_int_row("max_steps", {"training", kTrain}, &Options::max_steps, "optimizer steps; <= 0 uses num_train_epochs"),
      float_row("num_train_epochs", {"training", kTrain}, &Options::num_train_epochs, kPositive,
                "epochs when max_steps <= 0"),
      float_row("learning_rate", {"training", kTrain}, &Options::learning_rate, kPositive, "peak learning rate"),
      choice_row("optim", {"training", kTrain}, &Options::optim, optim,
                 "optimizer: torch's AdamW (aliases adamw_torch_fused, paged_adamw_32bit), bitsandbytes' 8-bit AdamW "
                 "(aliases adamw_bnb_8bit, paged_adamw_8bit), torch's SGD (no momentum) or transformers' Adafactor "
                 "(HF's settings: lr given, no relative step or parameter scaling)"),
      float_row("weight_decay", {"training", kTrain}, &Options::weight_decay, kNonNegative,
                "weight decay (AdamW, Adafactor: decoupled; SGD: added to the gradient, as torch's SGD)"),
      float_row("adam_beta1", {"training", kTrain}, &Options::adam_beta1, kUnitHalfOpen, "AdamW beta1"),
      float_row("adam_beta2", {"training", kTrain}, &Options::adam_beta2, kUnitHalfOpen, "AdamW beta2"),
      float_row("adam_epsilon", {"training", kTrain}, &Options::adam_epsilon, kPositive, "AdamW epsilon"),
      float_row("max_grad_norm", {"training", kTrain}, &Options::max_grad_norm, kAnyNumber,
                "gradient clipping norm; <= 0 disables clipping"),
      choice_row("lr_scheduler_type", {"training", kTrain}, &Options::lr_scheduler_type, scheduler,
                 "learning-rate schedule (transformers' get_scheduler)"),
      string_row("lr_scheduler_kwargs", {"training", kTrain}, &Options::lr_scheduler_kwargs, true,
                 "JSON object of the schedule's own arguments (get_scheduler's scheduler_specific_kwargs), e.g. "
                 "'{\"num_cycles\": 2}' (cosine_with_restarts), '{\"lr_end\": 1e-6, \"power\": 2}' (polynomial), "
                 "'{\"min_lr_rate\": 0.1}' (cosine_with_min_lr), '{\"num_decay_steps\": 100}' (warmup_stable_decay)"),
      int_row("seed", {"training", kTrainAndDecoding}, &Options::seed, 0, "seed for data order and dropout"),
      choice_row("step_planning", {"training", kTrain}, &Options::step_planning, step_planning,
                 "how each optimizer step's samples (world x batch x accumulation; packed rows with --packing) "
                 "are spread over ranks and micro-batches: balanced (ranks balanced by tokens, micro-batches "
                 "padding-free up to per_device_train_batch_size x max_seq_length tokens) or literal "
                 "(DistributedSampler's rank r gets samples r, r + world, ...; micro-batches of "
                 "per_device_train_batch_size samples); the same samples per step either way"),

      string_row("run_name", {"training", kTrain}, &Options::run_name, true,
                 "the run's name in the end summary and in OUTPUT_DIR/report.html (default: OUTPUT_DIR's name)"),
      choice_row("eval_strategy", {"training", kSft}, &Options::eval_strategy, strategy,
                 "when to evaluate (with evaluation data): steps = every --eval_steps and at the last step, epoch = "
                 "at every epoch's end, no = never"),
      choice_row("save_strategy", {"training", kTrain}, &Options::save_strategy, strategy,
                 "when to write checkpoint-N: steps = every --save_steps and at the last step, epoch = at every "
                 "epoch's end, no = never"),
      bool_row("load_best_model_at_end", {"training", kSft}, &Options::load_best_model_at_end,
               "after training, load the checkpoint with the best --metric_for_best_model and save that adapter "
               "(needs equal --eval_strategy and --save_strategy; with steps, --save_steps a multiple of --eval_steps)"),
      choice_row("metric_for_best_model", {"training", kSft}, &Options::metric_for_best_model, metric,
                 "the evaluation metric that decides the best checkpoint and early stopping"),
      bool_row("greater_is_better", {"training", kSft}, &Options::greater_is_better,
               "whether a larger --metric_for_best_model is better (false for the loss)"),
      int_row("early_stopping_patience", {"training", kSft}, &Options::early_stopping_patience, 0,
              "stop after this many evaluations in a row without improvement (HF's EarlyStoppingCallback); 0 = off"),
      float_row("early_stopping_threshold", {"training", kSft}, &Options::early_stopping_threshold, kNonNegative,
                "how much an evaluation must beat the best one by to count as an improvement"),
      bool_row("cuda_graphs", {"training", kTrain}, &Options::cuda_graphs,
               "on CUDA, replay micro-steps of up to " + std::to_string(kCudaGraphMaxTokens) + " tokens (" +
                   std::to_string(kCudaGraphMaxTokensSparse) +
                   " for mixture-of-experts models) from CUDA graphs captured once per padded length (after the "
                   "warm-up, those of the next " +
                   std::to_string(kCudaGraphCaptureAheadSteps) + " steps at once), at most " +
                   std::to_string(kCudaGraphMaxShapes) + " lengths (plain LoRA or QLoRA without lora_dropout; DoRA runs eagerly)"),
      // Long context (issue 31): README "Long context".
      choice_row("offload_activations", {"training", kTrain}, &Options::offload_activations,
                 ChoiceSet{offload_activations_names()},
                 "with gradient checkpointing, keep each layer's checkpointed input in pinned host memory until its "
                 "recompute in backward (CUDA-graph micro-steps into one pinned arena); auto = on a CUDA device, "
                 "never on the CPU (where true runs the same bookkeeping with plain copies)"),
      choice_row("lm_head_loss", {"training", kSft}, &Options::lm_head_loss, ChoiceSet{lm_head_loss_names()},
                 "how the fused LM head + cross-entropy of SFT training walks the trained positions x vocabulary "
                 "logits: vocab_tiles (tiles of at most 512 positions x ~32 MiB of fp32 logits, an online "
                 "logsumexp) or row_chunks (~256 MiB of fp32 logits of whole-vocabulary rows at a time); the "
                 "same loss and gradients either way"),

      // --- preference training (dpo, orpo): TRL 1.16's DPOConfig / ORPOConfig
      float_row("beta", {"preference", kPreference}, &Options::beta, kPositive,
                "DPO: the KL penalty's weight (rewards = beta x log-ratio); ORPO: the odds-ratio term's weight"),
      choice_row("loss_type", {"preference", kDpo}, &Options::loss_type, ChoiceSet{dpo_loss_type_names()},
                 "DPO loss as TRL 1.16 computes it"),
      float_row("label_smoothing", {"preference", kDpo}, &Options::label_smoothing, Interval{0.0, true, 0.5, false},
                "--loss_type robust: the assumed label noise, in [0, 0.5) (TRL 1.16 reads it for robust only)"),
      choice_row("truncation_mode", {"preference", kDpo}, &Options::truncation_mode, ChoiceSet{{"keep_start", "keep_end"}},
                 "which end of prompt + completion --max_length keeps (keep_start drops pairs whose prompt alone "
                 "fills it, as TRL)"),
      bool_row("precompute_ref_log_probs", {"preference", kDpo}, &Options::precompute_ref_log_probs,
               "compute the reference model's log-probs of every pair once before training, as TRL (the same "
               "numbers, no reference forward per step)"),

      // --- data
      string_row("dataset", {"data", kTrainEval}, &Options::dataset, true,
                 "a data file (.json, .jsonl, .parquet, .txt), a directory, or a hub id ORG/NAME in the local Hugging "
                 "Face cache; several separated by commas; a directory's splits are found from file names as HF "
                 "datasets finds them"),
      split_row("dataset_split", {"data", kTrainEval}, &Options::dataset_split,
                "the split of --dataset to train on (eval: to evaluate, when there is no --eval_dataset)"),
      string_row("eval_dataset", {"data", kSftEval}, &Options::eval_dataset, true,
                 "evaluation data: a file, directory or hub id (an existing path wins; a directory's validation "
                 "split, else its test split, else its only split), or the name of a split of --dataset"),
      float_row("eval_split", {"data", kSft}, &Options::eval_split, kUnitHalfOpen,
                "fraction of the training rows held out for evaluation"),
      int_row("eval_steps", {"data", kSft}, &Options::eval_steps, 0, "evaluate every N steps; 0 = only at the end"),
      chat_template_row(),
      string_row("chat_template_kwargs", {"data", kTemplated}, &Options::chat_template_kwargs, true,
                 "JSON object of extra chat template variables, e.g. '{\"enable_thinking\": false}'"),
      string_row("dataset_weights", {"data", kSft}, &Options::dataset_weights, true,
                 "comma-separated weights of the --dataset list: each dataset's rows appear weight times per epoch"),
      string_row("raw_text_file", {"data", kSft}, &Options::raw_text_file, true,
                 "train on a raw text file cut into overlapping chunks (instead of --dataset)"),
      int_row("chunk_size", {"data", kSft}, &Options::chunk_size, 1, "tokens per --raw_text_file chunk"),
      int_row("stride", {"data", kSft}, &Options::stride, 0, "tokens shared by consecutive --raw_text_file chunks"),
      bool_row("train_on_completions", {"data", kSftEval}, &Options::train_on_completions,
               "compute the loss on assistant replies only"),
      bool_row("skip_bad_rows", {"data", kTrainEval}, &Options::skip_bad_rows, "skip malformed rows instead of failing"),
      bool_row("group_by_length", {"data", kTrain}, &Options::group_by_length, "batch sequences of similar length"),
      bool_row("packing", {"data", kSft}, &Options::packing, "pack several short sequences into one"),
      bool_row("shuffle", {"data", kTrain}, &Options::shuffle, "shuffle the training rows every epoch"),
      bool_row("dataloader_drop_last", {"data", kTrain}, &Options::dataloader_drop_last, "drop the last incomplete batch"),

      // --- saving
      string_row("output_dir", {"saving", kTrainAndDecoding}, &Options::output_dir, false, "checkpoints, adapter and metrics go here"),
      int_row("save_steps", {"saving", kTrain}, &Options::save_steps, 0, "checkpoint every N steps; 0 = only the final save"),
      int_row("save_total_limit", {"saving", kTrain}, &Options::save_total_limit, 0,
              "keep only the newest N checkpoints; 0 = keep all"),
      string_row("resume_from_checkpoint", {"saving", kTrain}, &Options::resume_from_checkpoint, true,
                 "continue a run from a checkpoint directory, or true: the newest checkpoint in output_dir"),
      bool_row("overwrite_output_dir", {"saving", kTrain}, &Options::overwrite_output_dir,
               "replace an earlier run's files in output_dir (otherwise such a directory is refused)"),
      bool_row("save_only_model", {"saving", kTrain}, &Options::save_only_model,
               "checkpoints hold the adapter and trainer_state.json only, no optimizer or generator state (smaller; "
               "training cannot resume from them)"),
      bool_row("save_model", {"saving", kTrain}, &Options::save_model,
               "also export per --save_method into --save_path (the adapter is always in output_dir)"),
      choice_row("save_method", {"saving", kExporting}, &Options::save_method, save_method, "export format"),
      string_row("save_path", {"saving", kExporting}, &Options::save_path, false, "export directory"),
      bool_row("push_model", {"saving", kTrain}, &Options::push_model,
               "upload --save_path (with --save_model) or the adapter in output_dir to the hub repo --hub_path"),
      string_row("hub_path", {"saving", kExporting}, &Options::hub_path, true,
                 "hub repo ORG/NAME that --push_model / --push_gguf push to (created if missing)"),
      string_row("hub_token", {"saving", kEveryCommand}, &Options::hub_token, true,
                 "hub token (else HF_TOKEN, else the token file of `hf auth login`)"),
      bool_row("hub_private_repo", {"saving", kExporting}, &Options::hub_private_repo, "create the --hub_path repo private"),
      list_choice_row("quantization", {"saving", kExporting}, &Options::quantization, ChoiceSet{gguf_quantization_names(),
                      gguf_quantization_aliases()}, "GGUF tensor type(s) for --save_method gguf / --save_gguf"),
      bool_row("save_gguf", {"saving", kExporting}, &Options::save_gguf,
               "also write SAVE_PATH/<MODEL>.<TYPE>.gguf per --quantization type (MODEL: the model directory's "
               "name); train: with --save_model, as in Unsloth's CLI"),
      bool_row("push_gguf", {"saving", kExporting}, &Options::push_gguf,
               "upload the GGUF files and their Ollama Modelfile to the hub repo --hub_path (Unsloth's flag)"),

      // --- generation
      string_row("adapter", {"generation", kAdapterAppliers}, &Options::adapter, true,
                 "generate/chat/export: a local PEFT adapter directory applied to --model_name"),
      string_row("prompt", {"generation", kGenerateOnly}, &Options::prompt, true, "generate: the prompt text"),
      string_row("prompts", {"generation", kGenerateOnly}, &Options::prompts, true,
                 "generate: a JSONL file, one {\"prompt\": TEXT} or {\"messages\": [...]} per line"),
      int_row("max_new_tokens", {"generation", kGenerating}, &Options::max_new_tokens, 1, "most tokens generated per prompt"),
      float_row("temperature", {"generation", kGenerating}, &Options::temperature, kNonNegative,
                "sampling temperature; 0 = greedy decoding"),
      float_row("top_p", {"generation", kGenerating}, &Options::top_p, kUnitOpenClosed, "nucleus sampling mass (1 = off)"),
      int_row("top_k", {"generation", kGenerating}, &Options::top_k, 0, "sample from the K most likely tokens (0 = off)"),
      float_row("repetition_penalty", {"generation", kGenerating}, &Options::repetition_penalty, kPositive,
                "penalty on tokens already in the sequence, as transformers applies it (1 = off)"),
      string_row("stop", {"generation", kGenerating}, &Options::stop, true,
                 "stop string, or a JSON list of them (generation also stops at the EOS token)"),
      string_row("system_prompt", {"generation", kChatOnly}, &Options::system_prompt, true, "chat: the system message"),
      int_row("generation_batch_size", {"generation", kGenerateOnly}, &Options::generation_batch_size, 1,
              "generate: prompts decoded together"),

      // --- logging
      choice_row("report_to", {"logging", kTrain}, &Options::report_to, report_to,
                 "extra metrics sink (metrics.jsonl is always written)"),
      int_row("logging_steps", {"logging", kTrain}, &Options::logging_steps, 1, "log every N optimizer steps"),
      choice_row("log_level", {"logging", kEveryCommand}, &Options::log_level, ChoiceSet{log::level_names()},
                 "least severe messages shown on stderr"),
      bool_row("require_loss_decrease", {"logging", kTrain}, &Options::require_loss_decrease,
               "smoke test: exit 1 (after saving) unless the mean loss of the last quarter of the steps is below "
               "that of the first quarter"),
      string_row("dump_logits", {"logging", kEvalOnly}, &Options::dump_logits, true,
                 "eval: write logits to this .safetensors file"),
      int_row("profile_start_step", {"logging", kTrainAndDecoding}, &Options::profile_start_step, 0,
              "profile optimizer steps (generate: decode steps) from this one (Chrome trace and kernel time "
              "breakdown in output_dir); 0 = off"),
      int_row("profile_steps", {"logging", kTrainAndDecoding}, &Options::profile_steps, 1,
              "number of optimizer steps (generate: decode steps) to profile"),

      // --- distributed
      float_row("ddp_timeout", {"distributed", kTrain}, &Options::ddp_timeout, kPositive,
                "seconds a collective may make no progress (a stuck peer) before aborting; a peer that "
                "died or failed ends the job within seconds regardless"),
      int_row("ddp_bucket_cap_mb", {"distributed", kTrain}, &Options::ddp_bucket_cap_mb, 1, "gradient bucket size in MiB"),
      bool_row("ddp_find_unused_parameters", {"distributed", kTrain}, &Options::ddp_find_unused_parameters,
               "tolerate trainable parameters without gradients"),
      int_row("ddp_check_consistency_steps", {"distributed", kTrain}, &Options::ddp_check_consistency_steps, 0,
              "every N steps verify all ranks hold identical LoRA weights; 0 = never"),
      choice_row("ddp_backend", {"distributed", kTrain}, &Options::ddp_backend, ddp_backend, "collective backend"),
  };
}

}  // namespace

const std::vector<OptionRow>& option_rows() {
  static const std::vector<OptionRow> table = build_option_table();  // immutable after first use
  return table;
}

const OptionRow* find_option_row(const std::string& name) {
  for (const auto& row : option_rows()) {
    if (row.spec.name == name) return &row;
    for (const auto& alias : row.spec.aliases)
      if (alias == name) return &row;
  }
  return nullptr;
}

const std::vector<std::pair<std::string, std::string>>& unsloth_only_options() {
  static const std::vector<std::pair<std::string, std::string>> options = {
      {"adapter_file", "an MLX option; the adapter is written to --output_dir as PEFT safetensors"},
  };
  return options;
}

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> out;
    for (const auto& row : option_rows()) out.push_back(row.spec);
    return out;
  }();
  return specs;
}

}  // namespace finetune
