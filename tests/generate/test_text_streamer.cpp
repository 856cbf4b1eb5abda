// What the streamer prints token by token, and stop strings: the printed pieces always add up to
// the final text, never show a partial word, a partial UTF-8 character or the start of a stop string.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/generate/stop_criteria.h"
#include "finetune/generate/text_streamer.h"

namespace finetune {
namespace {

// Feeds each prefix of `steps` (the row's text after each token), then finishes with `final_text`.
std::vector<std::string> stream(TextStreamer& streamer, const std::vector<std::string>& steps,
                                const std::string& final_text) {
  std::vector<std::string> pieces;
  for (const auto& text : steps) pieces.push_back(streamer.push(text));
  pieces.push_back(streamer.finish(final_text));
  return pieces;
}

TEST(TextStreamer, PrintsWholeWordsAndLines) {
  TextStreamer streamer;
  const auto pieces = stream(streamer, {"Hel", "Hello", "Hello wor", "Hello world", "Hello world!\n", "Hello world!\nBy"},
                             "Hello world!\nBye");
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", "Hello ", "", "world!\n", "", "Bye"}));
}

TEST(TextStreamer, HoldsAnIncompleteUtf8CharacterUntilItIsWhole) {
  // "é" is C3 A9; its first byte alone decodes as U+FFFD. "日" (E6 97 A5) is CJK: printed at once.
  TextStreamer streamer;
  const std::string replacement = "\xEF\xBF\xBD";
  const auto pieces = stream(streamer, {"caf" + replacement, "caf\xC3\xA9", "caf\xC3\xA9 ", "caf\xC3\xA9 \xE6\x97\xA5"},
                             "caf\xC3\xA9 \xE6\x97\xA5");
  EXPECT_EQ(pieces, (std::vector<std::string>{"", "", "caf\xC3\xA9 ", "\xE6\x97\xA5", ""}));
}

TEST(TextStreamer, HoldsBackWhatMayStartAStopString) {
  TextStreamer streamer({"\n###"});
  // "one two \n#" may become "\n###": "\n#" is held back; the final text is cut before the stop.
  const auto pieces = stream(streamer, {"one two ", "one two \n", "one two \n#"}, "one two ");
  EXPECT_EQ(pieces, (std::vector<std::string>{"one two ", "", "", ""}));
  TextStreamer other({"\n###"});
  EXPECT_EQ(stream(other, {"a \n", "a \nb "}, "a \nb c"), (std::vector<std::string>{"a ", "\nb ", "c"}));
}

TEST(StopStrings, EarliestOccurrence) {
  EXPECT_EQ(find_stop_string("abc User: x ###", {"###", "User:"}), std::optional<size_t>(4));
  EXPECT_EQ(find_stop_string("abc", {"###"}), std::nullopt);
  EXPECT_EQ(find_stop_string("abc", {}), std::nullopt);
}

}  // namespace
}  // namespace finetune
