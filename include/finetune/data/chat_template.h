// Prompt formats. We do not run Jinja: each supported family's chat format is rendered by code
// that reproduces its template's output exactly (checked against transformers'
// apply_chat_template(messages, tokenize=False) by tests/reference/make_data_fixtures.py):
//   ChatMl      plain ChatML, "<|im_start|>{role}\n{content}<|im_end|>\n" per message, no default
//               system prompt (the OpenHermes-style template). Qwen3's template is ChatML too but
//               adds an empty <think> block to the last assistant turn, which is not reproduced.
//   ChatMlQwen  Qwen2 / Qwen2.5-Instruct: ChatML, and when the first message is not a system
//               message the template inserts "You are Qwen, created by Alibaba Cloud. You are a
//               helpful assistant." as the system prompt.
//   Llama3      Meta-Llama-3-8B-Instruct (Llama-3, NOT 3.1: no "Cutting Knowledge Date" default
//               system header): bos + "<|start_header_id|>{role}<|end_header_id|>\n\n" +
//               content|trim + "<|eot_id|>" per message. `trim` is Python's str.strip().
//   Mistral     Mistral-7B-Instruct-v0.1/v0.2 (their 2024 tokenizer_config.json template): bos, then
//               " [INST] {user} [/INST]" and " {assistant}" + eos; an optional leading system
//               message is folded into the first user turn as "{system}\n\n{user}"; after it roles
//               must alternate user/assistant (else the template raises, and so do we).
//   Alpaca      the alpaca prompt of Unsloth's CLI (for instruction/input/output rows).
// With train_on_completions only assistant content and its end-of-turn token (<|im_end|>,
// <|eot_id|>, Mistral's </s>) are trainable; role headers and the newline after <|im_end|> are not.
// Mistral's space before a reply is trainable too: SentencePiece glues it to the reply's first
// token ("▁Hi").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

enum class ChatFormat { ChatMl, Llama3, Mistral, Alpaca, ChatMlQwen };

struct ChatMessage {
  std::string role;  // system|user|assistant
  std::string content;
};

// A piece of rendered text and whether its tokens are trained on (assistant replies, alpaca output).
struct TextSegment {
  std::string text;
  bool trainable;
};

// "auto" maps every template of a family to the one rendering above, so for a few relatives the
// text is close but not identical: Llama-3.1/3.2 templates (-> Llama3, without their default
// "Cutting Knowledge Date" system header), Mistral-7B-Instruct-v0.3 / Nemo (-> Mistral, whose
// spacing around [INST] and system placement differ), Qwen3 (-> ChatMl, no <think> block).
// Names: "chatml", "qwen2.5" (also "qwen2", "qwen"), "llama3" (also "llama-3"), "mistral",
// "alpaca", and "auto", which reads the tokenizer's chat template:
//   contains "<|im_start|>"        -> ChatMlQwen if it holds Qwen's default system prompt, else ChatMl
//   contains "<|start_header_id|>" -> Llama3
//   contains "[INST]"              -> Mistral
//   anything else (or empty)       -> Alpaca (conversation datasets then need an explicit format)
// An unknown name is a UsageError.
ChatFormat chat_format_from_name(const std::string& name, const std::string& tokenizer_chat_template);

// The names chat_format_from_name accepts ("auto" first), and its aliases -> name: the option
// parser and its help text read them from here.
const std::vector<std::string>& chat_template_names();
const std::vector<std::pair<std::string, std::string>>& chat_template_aliases();

// The canonical name of a format (as chat_format_from_name accepts it), for logs.
std::string chat_format_name(ChatFormat format);

// Renders a conversation into segments whose concatenation equals what the HF chat template
// produces (without a generation prompt). `bos`/`eos` are the tokenizer's special token strings.
// Adjacent segments of equal trainability are merged, so segment boundaries are exactly the
// trainability switches. Throws Error for an empty conversation, a role other than
// system/user/assistant, Alpaca (not a chat format), or (Mistral) roles that do not alternate.
std::vector<TextSegment> render_conversation(ChatFormat format, const std::vector<ChatMessage>& messages,
                                             const std::string& bos, const std::string& eos);

// Unsloth CLI's alpaca prompt: "Below is an instruction that describes a task, paired with an
// input that provides further context. Write a response that appropriately completes the
// request.\n\n### Instruction:\n{}\n\n### Input:\n{}\n\n### Response:\n{}" + EOS.
// The same prompt is used when `input` is empty (as Unsloth's CLI does). The prompt is not
// trainable; output + EOS is.
std::vector<TextSegment> render_alpaca(const std::string& instruction, const std::string& input,
                                       const std::string& output, const std::string& eos);

// Python's str.strip() on UTF-8 text (what Jinja's `trim` filter does): removes leading and
// trailing characters for which str.isspace() is true, including Unicode spaces like U+3000.
std::string python_strip(const std::string& text);

}  // namespace finetune
