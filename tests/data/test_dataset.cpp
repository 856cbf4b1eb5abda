// load_dataset: file reading, format detection, tokenization with label masks, errors naming
// file and line, skip_bad_rows, truncation and statistics.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "byte_tokenizer.h"
#include "finetune/data/dataset.h"
#include "finetune/data/chat_template.h"
#include "finetune/data/dataset_files.h"
#include "finetune/util/errors.h"
#include "fixtures.h"

namespace finetune {
namespace {

using data_test::ByteTokenizer;
using nlohmann::json;

// Gives each test fresh files in the temp dir and removes them afterwards.
class DatasetLoading : public ::testing::Test {
 protected:
  // Writes `content` to a new file whose name ends with `name`; returns its path.
  std::string write_file(const std::string& name, const std::string& content) {
    const std::string path = ::testing::TempDir() + "finetune_data_" + std::to_string(getpid()) + "_" +
                             std::to_string(written_.size()) + "_" + name;
    std::ofstream(path, std::ios::binary) << content;
    written_.push_back(path);
    return path;
  }

  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
  }

 private:
  std::vector<std::string> written_;
};

std::string jsonl(const std::vector<json>& rows) {
  std::string text;
  for (const json& row : rows) text += row.dump() + "\n";
  return text;
}

// The error message load_dataset throws, or "" if it does not throw.
std::string load_error(const std::vector<std::string>& files, const Tokenizer* tokenizer, DatasetOptions options = {}) {
  try {
    load_dataset(files, tokenizer, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<int32_t> trainable_ids(const Sample& sample) {
  std::vector<int32_t> ids;
  for (size_t t = 0; t < sample.labels.size(); ++t) {
    if (sample.labels[t] != kIgnoreIndex) {
      EXPECT_EQ(sample.labels[t], sample.input_ids[t]) << "a label that is not -100 must equal its input id";
      ids.push_back(sample.labels[t]);
    }
  }
  return ids;
}

// A built-in chat template with the tokenizer's special tokens.
ChatTemplate builtin(const std::string& name, const Tokenizer& tokenizer) {
  return ChatTemplate::select(name, {}, tokenizer.special_tokens(), nlohmann::ordered_json::object());
}

const std::string kAlpacaPrefix =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n    ### Instruction:\n    ";

TEST_F(DatasetLoading, AlpacaJsonlWithLabelMask) {
  const ByteTokenizer tokenizer = data_test::qwen_like_tokenizer();
  const std::string path = write_file("alpaca.jsonl", jsonl({{{"instruction", "Add."}, {"input", "2 3"}, {"output", "5"}},
                                                            {{"instruction", "Hi"}, {"input", ""}, {"output", "Yo"}}}) +
                                                          "\n  \n");
  const TokenizedDataset data = load_dataset({path}, &tokenizer, {});
  ASSERT_EQ(data.samples.size(), 2u);
  const Sample& first = data.samples[0];
  EXPECT_EQ(tokenizer.decode(first.input_ids, false),
            kAlpacaPrefix + "Add.\n\n    ### Input:\n    2 3\n\n    ### Response:\n    5<|im_end|>");
  EXPECT_EQ(tokenizer.decode(trainable_ids(first), false), "5<|im_end|>");
  EXPECT_EQ(first.labels.size(), first.input_ids.size());
  // the mask is a prefix: prompt -100, then output + EOS
  const size_t prompt = first.input_ids.size() - 2;
  for (size_t t = 0; t < prompt; ++t) EXPECT_EQ(first.labels[t], kIgnoreIndex) << t;
  EXPECT_EQ(tokenizer.decode(data.samples[1].input_ids, false),
            kAlpacaPrefix + "Hi\n\n    ### Input:\n    \n\n    ### Response:\n    Yo<|im_end|>");
  EXPECT_EQ(data.stats.rows_read, 2);
  EXPECT_EQ(data.stats.rows_kept, 2);
  EXPECT_EQ(data.stats.rows_bad, 0);
  EXPECT_EQ(data.stats.tokens, static_cast<int64_t>(first.input_ids.size() + data.samples[1].input_ids.size()));
  EXPECT_EQ(data.stats.trainable_tokens, 2 + 3);
}

TEST_F(DatasetLoading, BosFromPostProcessorOnlyWhenTemplateDoesNotWriteIt) {
  const ByteTokenizer llama = data_test::llama3_like_tokenizer();
  const int32_t bos = *llama.special_tokens().bos_token_id;
  const std::string alpaca = write_file("a.json", json::array({{{"instruction", "i"}, {"output", "o"}}}).dump());
  const Sample a = load_dataset({alpaca}, &llama, {}).samples.at(0);
  EXPECT_EQ(a.input_ids.at(0), bos);
  EXPECT_NE(a.input_ids.at(1), bos);
  EXPECT_EQ(llama.decode(a.input_ids, true), kAlpacaPrefix + "i\n\n    ### Input:\n    \n\n    ### Response:\n    o");

  const ChatTemplate llama3 = builtin("llama3", llama);
  DatasetOptions options;
  options.chat_template = &llama3;
  const std::string chat =
      write_file("c.jsonl", jsonl({{{"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "r"}}}}}}));
  const Sample c = load_dataset({chat}, &llama, options).samples.at(0);
  EXPECT_EQ(c.input_ids.at(0), bos);
  EXPECT_NE(c.input_ids.at(1), bos) << "BOS written by the template must not be doubled";

  const std::string text = write_file("t.jsonl", jsonl({{{"text", "hello"}}}));
  const Sample t = load_dataset({text}, &llama, {}).samples.at(0);
  EXPECT_EQ(llama.decode(t.input_ids, false), "<|begin_of_text|>hello<|eot_id|>");
  EXPECT_EQ(t.labels, std::vector<int32_t>(t.input_ids.begin(), t.input_ids.end()));
}

// Every reference conversation, loaded as a messages row and as a sharegpt row, tokenizes to the
// reference text with exactly the assistant pieces trainable.
TEST_F(DatasetLoading, ConversationsMatchReferenceTemplates) {
  const json fixture = data_test::load_data_fixture("chat_templates.json");
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  const ByteTokenizer llama = data_test::llama3_like_tokenizer();
  const ByteTokenizer mistral = data_test::mistral_like_tokenizer();
  int checked = 0;
  for (const auto& family : fixture.at("families")) {
    const std::string name = family.at("format");
    const ByteTokenizer& tokenizer = name == "llama3" ? llama : name == "mistral" ? mistral : qwen;
    std::vector<json> message_rows, sharegpt_rows;
    std::vector<std::string> expected_texts;
    std::vector<std::string> expected_trainable;
    for (const auto& c : family.at("cases")) {
      if (c.at("error").get<bool>()) continue;
      std::string trainable;
      json conversations = json::array();
      for (const auto& m : c.at("messages")) {
        const std::string role = m.at("role");
        const std::string content = m.at("content");
        conversations.push_back({{"from", role == "user" ? "human" : role == "assistant" ? "gpt" : role}, {"value", content}});
        if (role != "assistant") continue;
        if (name == "llama3") trainable += testing::python_strip(content) + "<|eot_id|>";
        else if (name == "mistral") trainable += " " + content + "</s>";
        else trainable += content + "<|im_end|>";
      }
      if (trainable.empty()) continue;  // no assistant turn: skipped (tested below)
      message_rows.push_back({{"messages", c.at("messages")}});
      sharegpt_rows.push_back({{"conversations", conversations}});
      expected_texts.push_back(c.at("expected"));
      expected_trainable.push_back(trainable);
    }
    const ChatTemplate chat_template = builtin(name, tokenizer);
    DatasetOptions options;
    options.chat_template = &chat_template;
    const TokenizedDataset data = load_dataset({write_file("m.jsonl", jsonl(message_rows)),
                                                write_file("s.json", json(sharegpt_rows).dump())},
                                               &tokenizer, options);
    ASSERT_EQ(data.samples.size(), 2 * expected_texts.size()) << name;
    for (size_t i = 0; i < data.samples.size(); ++i) {
      SCOPED_TRACE(name + " sample " + std::to_string(i));
      const Sample& sample = data.samples[i];
      EXPECT_EQ(tokenizer.decode(sample.input_ids, false), expected_texts[i % expected_texts.size()]);
      EXPECT_EQ(tokenizer.decode(trainable_ids(sample), false), expected_trainable[i % expected_texts.size()]);
      ++checked;
    }

    options.train_on_completions = false;
    const TokenizedDataset full = load_dataset({write_file("m.jsonl", jsonl(message_rows))}, &tokenizer, options);
    for (const Sample& sample : full.samples) EXPECT_EQ(sample.labels, sample.input_ids);
  }
  // 13 conversations render in three families and 10 in Mistral; "system_only" has no assistant turn
  EXPECT_EQ(checked, 2 * (3 * 13 + 10 - 4));
}

TEST_F(DatasetLoading, RowsWithoutAssistantTurnAreSkipped) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  const ChatTemplate chatml = builtin("chatml", qwen);
  DatasetOptions options;
  options.chat_template = &chatml;
  const std::string path = write_file("n.jsonl", jsonl({{{"messages", {{{"role", "user"}, {"content", "only a question"}}}}},
                                                       {{"messages", {{{"role", "user"}, {"content", "q"}},
                                                                      {{"role", "assistant"}, {"content", "a"}}}}}}));
  const TokenizedDataset data = load_dataset({path}, &qwen, options);
  EXPECT_EQ(data.samples.size(), 1u);
  EXPECT_EQ(data.stats.rows_read, 2);
  EXPECT_EQ(data.stats.rows_no_trainable, 1);
  EXPECT_EQ(data.stats.rows_kept, 1);
}

TEST_F(DatasetLoading, PreTokenizedRows) {
  const std::string path = write_file("p.jsonl", jsonl({{{"input_ids", {1, 2, 3}}},
                                                       {{"input_ids", {4, 5, 6, 7}}, {"labels", {-100, -100, 6, 7}}},
                                                       {{"input_ids", {8, 9}}, {"labels", {8, -100}}}}));
  const TokenizedDataset data = load_dataset({path}, nullptr, {});
  ASSERT_EQ(data.samples.size(), 2u);
  EXPECT_EQ(data.samples[0].labels, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(data.samples[1].labels, (std::vector<int32_t>{-100, -100, 6, 7}));
  EXPECT_EQ(data.stats.rows_no_trainable, 1);  // only position 0 was labelled
  EXPECT_EQ(data.stats.trainable_tokens, 2 + 2);
  EXPECT_EQ(data.stats.tokens, 7);

  const auto error_for = [&](const json& row) {
    return load_error({write_file("bad.jsonl", jsonl({{{"input_ids", {1, 2}}}, row}))}, nullptr);
  };
  EXPECT_NE(error_for({{"input_ids", {1, 2}}, {"labels", {1}}}).find("bad.jsonl:2"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, 2}}, {"labels", {1}}}).find("labels"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, "x"}}}).find("input_ids\"[1] must be an integer"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, 2.5}}}).find("must be an integer"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, -3}}}).find("not a token id"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, 2}}, {"labels", {1, -5}}}).find("not a token id or -100"), std::string::npos);
  // 2^64 - 100 once wrapped to -100 through int64 and was taken for the ignore index.
  EXPECT_NE(error_for({{"input_ids", {1, 2}}, {"labels", {1, 18446744073709551516ULL}}}).find("= 18446744073709551516 is not"),
            std::string::npos);
  EXPECT_NE(error_for({{"input_ids", {1, 9223372036854775808ULL}}}).find("is not a token id"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", "12"}}).find("must be an array"), std::string::npos);
  EXPECT_NE(error_for({{"input_ids", json::array()}}).find("empty"), std::string::npos);
}

TEST_F(DatasetLoading, MalformedJsonlNamesFileAndLine) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  const std::string good = R"({"instruction": "a", "input": "", "output": "b"})";
  const std::string path = write_file("broken.jsonl", good + "\n\n{\"instruction\": oops}\n" + good + "\n");
  const std::string error = load_error({path}, &qwen);
  EXPECT_NE(error.find("broken.jsonl:3: invalid JSON"), std::string::npos) << error;
  EXPECT_NE(error.find("broken.jsonl:3: invalid JSON: column 17: syntax error"), std::string::npos) << error;

  const std::string missing = write_file("missing.jsonl", good + "\n" + R"({"instruction": "a", "input": ""})" + "\n");
  const std::string missing_error = load_error({missing}, &qwen);
  EXPECT_NE(missing_error.find("missing.jsonl:2: missing field \"output\""), std::string::npos) << missing_error;

  const std::string typed = write_file("typed.jsonl", good + "\n" + R"({"instruction": 5, "output": "b"})" + "\n");
  const std::string typed_error = load_error({typed}, &qwen);
  EXPECT_NE(typed_error.find("typed.jsonl:2: field \"instruction\" must be a string, got number"), std::string::npos)
      << typed_error;

  const std::string scalar = write_file("scalar.jsonl", good + "\n[1, 2]\n");
  EXPECT_NE(load_error({scalar}, &qwen).find("scalar.jsonl:2: row must be a JSON object, got array"), std::string::npos);
}

TEST_F(DatasetLoading, ChatRowErrorsNameFileLineAndField) {
  const ByteTokenizer mistral = data_test::mistral_like_tokenizer();
  const ChatTemplate mistral_template = builtin("mistral", mistral);
  DatasetOptions options;
  options.chat_template = &mistral_template;
  const json ok = {{"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}};
  const auto error_for = [&](const json& row) {
    return load_error({write_file("chat.jsonl", jsonl({ok, ok, row}))}, &mistral, options);
  };
  std::string e = error_for({{"messages", {{{"role", "assistant"}, {"content", "a"}}}}});
  testing::expect_contains(e, {"chat.jsonl:3: ", "built-in mistral template line ",
                               "conversation roles must alternate user/assistant/user/assistant/..."});
  e = error_for({{"messages", {{{"role", "user"}, {"content", 3}}}}});
  testing::expect_contains(e, {"chat.jsonl:3: ", "message content must be a string or a list of parts"});
  e = error_for({{"messages", {{{"content", "x"}}}}});
  EXPECT_NE(e.find("chat.jsonl:3: messages[0]: missing field \"role\""), std::string::npos) << e;
  e = error_for({{"messages", "hello"}});
  EXPECT_NE(e.find("chat.jsonl:3: field \"messages\" must be an array"), std::string::npos) << e;
  e = error_for({{"messages", json::array()}});
  EXPECT_NE(e.find("chat.jsonl:3: field \"messages\" is an empty list"), std::string::npos) << e;
  e = error_for({{"text", "x"}});
  EXPECT_NE(e.find("chat.jsonl:3: missing field \"messages\""), std::string::npos) << e;

  const std::string sharegpt = write_file(
      "sg.jsonl", jsonl({{{"conversations", {{{"from", "human"}, {"value", "q"}}, {{"from", "bot"}, {"value", "a"}}}}}}));
  e = load_error({sharegpt}, &mistral, options);
  EXPECT_NE(e.find("sg.jsonl:1: conversations[1]: field \"from\" is \"bot\""), std::string::npos) << e;

  options.chat_template = nullptr;  // "auto" found no template
  e = load_error({write_file("chat.jsonl", jsonl({ok}))}, &mistral, options);
  EXPECT_NE(e.find("chat.jsonl:1: messages rows need a chat template"), std::string::npos) << e;
}

TEST_F(DatasetLoading, JsonArrayErrorsNameFileAndElement) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  const std::string bad_row = write_file("rows.json", R"([{"text": "a"}, {"text": "b"}, {"text": null}])");
  std::string e = load_error({bad_row}, &qwen);
  EXPECT_NE(e.find("rows.json element 2: field \"text\" must be a string, got null"), std::string::npos) << e;

  const std::string invalid = write_file("invalid.json", "[\n  {\"text\": \"a\"},\n  {\"text\" \"b\"}\n]");
  e = load_error({invalid}, &qwen);
  EXPECT_NE(e.find("invalid.json: invalid JSON at line 3, column "), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;

  // Not an array: JSON Lines (a .json file of one object per line, as datasets reads it), or one
  // pretty-printed object, which is one row.
  EXPECT_EQ(load_dataset({write_file("object.json", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n")}, &qwen, {}).samples.size(), 2u);
  EXPECT_EQ(load_dataset({write_file("pretty.json", "{\n  \"text\": \"ccc\"\n}\n")}, &qwen, {}).samples.size(), 1u);
  e = load_error({write_file("columns.json", "{\n  \"text\": [\"a\", \"bb\"]\n}\n")}, &qwen);
  EXPECT_NE(e.find("columns.json element 0: field \"text\" must be a string, got array"), std::string::npos) << e;
}

TEST_F(DatasetLoading, FileLevelErrors) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  std::string e = load_error({::testing::TempDir() + "does_not_exist.jsonl"}, &qwen);
  EXPECT_NE(e.find("does_not_exist.jsonl: cannot open"), std::string::npos) << e;
  e = load_error({write_file("data.csv", "a,b\n")}, &qwen);
  EXPECT_NE(e.find("data.csv: unsupported dataset file type"), std::string::npos) << e;
  e = load_error({write_file("keys.jsonl", "{\"question\": \"a\", \"answer\": \"b\"}\n")}, &qwen);
  EXPECT_NE(e.find("keys.jsonl:1: cannot tell the dataset format from the keys {question, answer}"), std::string::npos)
      << e;
  e = load_error({write_file("empty.jsonl", "\n\n")}, &qwen);
  EXPECT_NE(e.find("empty.jsonl: dataset file has no usable rows"), std::string::npos) << e;
  e = load_error({write_file("t.jsonl", "{\"text\": \"a\"}\n")}, nullptr);
  EXPECT_NE(e.find("t.jsonl: text rows need a tokenizer"), std::string::npos) << e;
  const ByteTokenizer no_eos({"<x>"}, "", "", false);
  e = load_error({write_file("t.jsonl", "{\"text\": \"a\"}\n")}, &no_eos);
  EXPECT_NE(e.find("no eos_token"), std::string::npos) << e;
  EXPECT_THROW(load_dataset({}, &qwen, {}), UsageError);
  DatasetOptions tiny;
  tiny.max_seq_length = 1;
  EXPECT_THROW(load_dataset({write_file("t.jsonl", "{\"text\": \"a\"}\n")}, &qwen, tiny), UsageError);
}

TEST_F(DatasetLoading, SkipBadRowsCountsAndKeepsGoodRows) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  std::string content = "{not json}\n";  // the first row is bad too: the format comes from the next one
  for (int i = 0; i < 15; ++i) content += R"({"text": "row"})" "\n" R"({"text": 1})" "\n";
  DatasetOptions options;
  options.skip_bad_rows = true;
  const TokenizedDataset data = load_dataset({write_file("mixed.jsonl", content)}, &qwen, options);
  EXPECT_EQ(data.samples.size(), 15u);
  EXPECT_EQ(data.stats.rows_read, 31);
  EXPECT_EQ(data.stats.rows_bad, 16);
  EXPECT_EQ(data.stats.rows_kept, 15);
  // unknown keys on the first good row still stop the load: the format cannot be known
  EXPECT_NE(load_error({write_file("k.jsonl", "{\"foo\": 1}\n{\"text\": \"a\"}\n")}, &qwen, options).find("k.jsonl:1"),
            std::string::npos);
}

// ~120 KB of nesting in a .jsonl row is a malformed row like any other (skippable); in a .json file
// it stops the load naming the file.
TEST_F(DatasetLoading, DeeplyNestedRowsAreMalformedRows) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  const std::string good = R"({"text": "row"})";
  for (const std::string& deep : {testing::nested_json('['), testing::nested_json('{'),
                                  R"({"text": "a", "meta": )" + testing::nested_json('{') + "}"}) {
    const std::string path = write_file("deep.jsonl", good + "\n" + deep + "\n" + good + "\n");
    testing::expect_contains(load_error({path}, &qwen), {path + ":2: invalid JSON: column ", "nests deeper than 128 levels"});
    DatasetOptions options;
    options.skip_bad_rows = true;
    const TokenizedDataset data = load_dataset({path}, &qwen, options);
    EXPECT_EQ(data.stats.rows_bad, 1);
    EXPECT_EQ(data.stats.rows_kept, 2);
  }
  for (const std::string& deep : {testing::nested_json('['), "[" + good + ", " + testing::nested_json('{') + "]"}) {
    const std::string path = write_file("deep.json", deep);
    testing::expect_contains(load_error({path}, &qwen), {path + ": invalid JSON at line 1, column ", "nests deeper"});
  }
}

TEST_F(DatasetLoading, TruncationAndStats) {
  const ByteTokenizer qwen = data_test::qwen_like_tokenizer();
  DatasetOptions options;
  options.max_seq_length = 20;
  const std::string path = write_file(
      "trunc.jsonl", jsonl({{{"text", std::string(30, 'x')}},
                            {{"text", "short"}},
                            {{"instruction", "i"}, {"output", "o"}}}));  // alpaca row in a text file: error
  EXPECT_NE(load_error({path}, &qwen, options).find("trunc.jsonl:3: missing field \"text\""), std::string::npos);

  const std::string texts = write_file("texts.jsonl", jsonl({{{"text", std::string(30, 'x')}}, {{"text", "short"}}}));
  const std::string alpaca = write_file("alpaca.jsonl", jsonl({{{"instruction", "i"}, {"output", "o"}}}));
  const TokenizedDataset data = load_dataset({texts, alpaca}, &qwen, options);
  ASSERT_EQ(data.samples.size(), 2u);
  EXPECT_EQ(data.samples[0].input_ids.size(), 20u);
  EXPECT_EQ(data.samples[0].labels.size(), 20u);
  EXPECT_EQ(data.samples[1].input_ids.size(), 6u);  // "short" + EOS
  EXPECT_EQ(data.stats.rows_read, 3);
  EXPECT_EQ(data.stats.rows_truncated, 2);     // the long text and the alpaca row
  EXPECT_EQ(data.stats.rows_no_trainable, 1);  // the alpaca output fell beyond max_seq_length
  EXPECT_EQ(data.stats.rows_kept, 2);
  EXPECT_EQ(data.stats.tokens, 26);
  EXPECT_EQ(data.stats.trainable_tokens, 19 + 5);
}

TEST(DatasetFiles, RowLocationDescribe) {
  EXPECT_EQ((RowLocation{"a.jsonl", 7, -1}).describe(), "a.jsonl:7");
  EXPECT_EQ((RowLocation{"a.json", 0, 3}).describe(), "a.json element 3");
}

}  // namespace
}  // namespace finetune
