// parse_json / read_json_file: the nesting limit (exactly kMaxJsonDepth levels pass, one more
// fails, ~120 KB of nesting fails without a crash), error positions, the key observer, and
// json_excerpt's cut.
#include <gtest/gtest.h>

#include "../test_support.h"

#include <string>
#include <vector>

#include "finetune/util/json_parse.h"

namespace finetune {
namespace {

using nlohmann::json;
using testing::error_message;
using testing::expect_contains;
using testing::nested_json;

std::string brackets(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string objects(int depth) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += "{\"k\":";
  text += "null";
  return text + std::string(depth, '}');
}

// Levels of containers along the first element of each.
int depth_of(const json& value) {
  int depth = 0;
  for (const json* v = &value; v->is_structured(); v = v->is_array() ? &(*v)[0] : &v->begin().value()) {
    ++depth;
    if (v->empty()) break;
  }
  return depth;
}

TEST(JsonParse, ParsesOrdinaryJson) {
  const json value = parse_json(R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": 18446744073709551615})", "t.json");
  EXPECT_EQ(value["a"][1].get<int64_t>(), -2);
  EXPECT_EQ(value["a"][3], "x");
  EXPECT_TRUE(value["a"][6]["b"].is_object());
  EXPECT_EQ(value["c"].get<uint64_t>(), 18446744073709551615ULL);
  EXPECT_EQ(parse_json("  7 ", "t.json"), json(7));
  EXPECT_EQ(parse_json(R"({"k": 1, "k": 2})", "t.json")["k"], 2);  // last wins, as in Python
}

TEST(JsonParse, AcceptsExactlyTheDepthLimit) {
  EXPECT_EQ(depth_of(parse_json(brackets(kMaxJsonDepth), "t.json")), kMaxJsonDepth);
  EXPECT_EQ(depth_of(parse_json(objects(kMaxJsonDepth), "t.json")), kMaxJsonDepth);
  expect_contains(error_message([] { parse_json(brackets(kMaxJsonDepth + 1), "t.json"); }),
                  {"t.json: invalid JSON at line 1, column " + std::to_string(kMaxJsonDepth + 1) + ": nests deeper than " +
                   std::to_string(kMaxJsonDepth)});
  expect_contains(error_message([] { parse_json(objects(kMaxJsonDepth + 1), "t.json"); }), {"t.json", "nests deeper than"});
}

TEST(JsonParse, HugeNestingIsAnErrorNotACrash) {
  for (const char bracket : {'[', '{'}) {
    for (const std::string& text : {nested_json(bracket), nested_json(bracket).substr(0, 60000)}) {  // closed, unclosed
      const std::string message = error_message([&] { parse_json(text, "deep.json"); });
      expect_contains(message, {"deep.json: invalid JSON at line 1, column ", "nests deeper than 128 levels"});
    }
  }
  // Nested below ordinary content, and inside a value that is never read.
  const std::string wrapped = "{\"fine\": [1, 2],\n \"unused\": " + nested_json('{') + "}";
  expect_contains(error_message([&] { parse_json(wrapped, "deep.json"); }), {"deep.json", "line 2", "nests deeper"});
}

TEST(JsonParse, BracketsInsideStringsDoNotCount) {
  const std::string text = "[\"" + std::string(1000, '[') + "\\\"{\", " + brackets(kMaxJsonDepth - 1) + "]";
  const json value = parse_json(text, "t.json");
  EXPECT_EQ(value[0].get<std::string>().size(), 1002u);
  const std::string deeper = "[\"[[[\\\"\", " + brackets(kMaxJsonDepth) + "]";
  // 10 bytes precede the inner brackets, which open depth 2 onwards: depth 129 is the 128th of them.
  expect_contains(error_message([&] { parse_json(deeper, "t.json"); }), {"column " + std::to_string(10 + kMaxJsonDepth)});
}

TEST(JsonParse, SyntaxErrorsGiveLineAndColumn) {
  try {
    parse_json("[1,\n  2,\n  x]", "bad.json");
    FAIL() << "expected JsonSyntaxError";
  } catch (const JsonSyntaxError& e) {
    EXPECT_EQ(e.line(), 3u);
    EXPECT_EQ(e.column(), 3u);
    EXPECT_NE(e.reason().find("syntax error"), std::string::npos) << e.reason();
    EXPECT_EQ(e.reason().find("json.exception"), std::string::npos) << e.reason();
    expect_contains(e.what(), {"bad.json: invalid JSON at line 3, column 3: syntax error"});
  }
  expect_contains(error_message([] { parse_json("", "empty.json"); }), {"empty.json", "unexpected end of input"});
  expect_contains(error_message([] { parse_json("{} x", "t.json"); }), {"column 4", "expected end of input"});
  expect_contains(error_message([] { parse_json("[1e400]", "t.json"); }), {"t.json", "number overflow"});
  expect_contains(error_message([] { parse_json("[\"\xff\"]", "t.json"); }), {"t.json", "UTF-8"});
}

TEST(JsonParse, KeyObserverSeesKeysWithTheirDepth) {
  std::vector<std::pair<int, std::string>> keys;
  parse_json(R"({"a": {"b": [{"c": 1}]}, "d": 2})", "t.json",
             [&](int depth, const std::string& key) { keys.emplace_back(depth, key); });
  const std::vector<std::pair<int, std::string>> expected = {{1, "a"}, {2, "b"}, {4, "c"}, {1, "d"}};
  EXPECT_EQ(keys, expected);
}

TEST(JsonParse, ReadJsonFileNamesTheFile) {
  testing::TempDir dir("json_parse");
  dir.write("ok.json", R"({"x": [1]})");
  EXPECT_EQ(read_json_file(dir.file("ok.json"))["x"][0], 1);
  dir.write("deep.json", nested_json('['));
  expect_contains(error_message([&] { read_json_file(dir.file("deep.json")); }), {dir.file("deep.json"), "nests deeper"});
  expect_contains(error_message([&] { read_json_file(dir.file("absent.json"), "is it there?"); }),
                  {dir.file("absent.json") + ": cannot open (is it there?)"});
}

TEST(JsonParse, ExcerptIsCut) {
  EXPECT_EQ(json_excerpt(json({1, 2})), "[1,2]");
  EXPECT_EQ(json_excerpt(json("abc")), "\"abc\"");
  const std::string long_excerpt = json_excerpt(json(std::vector<int>(10000, 7)));
  EXPECT_EQ(long_excerpt.size(), 123u);
  EXPECT_EQ(long_excerpt.substr(120), "...");
  EXPECT_EQ(json_excerpt(json(std::string(1 << 20, 'x'))).size(), 123u);
  // Cut on a character boundary: "é" is two bytes.
  std::string accents;
  for (int i = 0; i < 100; ++i) accents += "\xC3\xA9";
  const std::string cut = json_excerpt(json(accents), 10);
  EXPECT_EQ(cut, "\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9...");
}

}  // namespace
}  // namespace finetune
