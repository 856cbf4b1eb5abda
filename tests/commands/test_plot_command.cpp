// `finetune plot`'s own words: run directories, --out, --help, and what it refuses.
#include <gtest/gtest.h>

#include "../test_support.h"
#include "finetune/commands/plot_command.h"

namespace finetune {
namespace {

TEST(PlotCommand, RunDirectoriesAndOut) {
  auto request = parse_plot_arguments({"runs/a", "--out", "cmp.html", "runs/b"});
  EXPECT_EQ(request.run_dirs, (std::vector<std::string>{"runs/a", "runs/b"}));
  EXPECT_EQ(request.out, "cmp.html");
  EXPECT_FALSE(request.help);
  EXPECT_EQ(parse_plot_arguments({"--out=x.html", "a"}).out, "x.html");
  EXPECT_EQ(parse_plot_arguments({"a"}).out, "report.html");
  EXPECT_TRUE(parse_plot_arguments({"--help"}).help);
}

TEST(PlotCommand, RefusesWhatItDoesNotRead) {
  testing::expect_contains(testing::error_message([] { parse_plot_arguments({"a", "--model_name", "m"}); }),
                           {"--model_name", "not an option of `finetune plot`"});
  testing::expect_contains(testing::error_message([] { parse_plot_arguments({}); }), {"at least one run directory"});
  testing::expect_contains(testing::error_message([] { parse_plot_arguments({"a", "--out"}); }), {"--out"});
  EXPECT_THROW(parse_plot_arguments({"a", "--out="}), UsageError);
}

}  // namespace
}  // namespace finetune
