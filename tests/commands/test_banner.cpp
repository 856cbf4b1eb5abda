// The banner's chat-template line names the template only when rows use it.
#include <gtest/gtest.h>

#include "finetune/commands/banner.h"

namespace finetune {
namespace {

TEST(Banner, ChatTemplateLineSaysWhetherAnyRowUsesTheTemplate) {
  Datasets data;
  data.chat_template_description = "the tokenizer's chat_template";
  data.train.stats.rows_kept = 64;  // alpaca or text rows: none rendered by the template
  EXPECT_EQ(chat_template_line(data),
            "not used (no conversation rows; alpaca rows use Unsloth CLI's alpaca prompt, text rows their text)");
  data.train.stats.templated_rows = 1200;
  data.eval.emplace();
  data.eval->stats.templated_rows = 34;
  EXPECT_EQ(chat_template_line(data), "the tokenizer's chat_template (1,234 conversation rows)");
}

TEST(Banner, ThousandsSeparators) {
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(-1234), "-1,234");
  EXPECT_EQ(with_thousands(999), "999");
}

}  // namespace
}  // namespace finetune
