// Seeds of the percent_format target: "FORMAT\0ARGS", ARGS a JSON array (the tuple right of %),
// object (a mapping, for %(name)s) or scalar (a single value). Each one renders without error.
#include <string>
#include <vector>

#include "fuzz_seeds.h"

namespace finetune::fuzz {
namespace {

std::string seed(const std::string& format, const std::string& args) { return format + std::string(1, '\0') + args; }

}  // namespace

std::vector<std::string> percent_format_seeds() {
  return {
      seed("[%s|%d|%5.2f|%*s|%-*d|%.*f]", R"(["x", 7, 1.5, 4, "ab", -3, 5, 2, 2.25])"),
      seed("%(name)s has %(n)05d items, %(f).3e", R"({"name": "q", "n": 42, "f": 0.5})"),
      seed("%x %X %o %#o %#x %c %r %a %i %u %% %+d", R"([255, 255, 8, 8, 255, 65, "r", "a", 1, 2, 3])"),
      seed("%10.4s|%-8s|%g|%G|%E", R"(["abcdef", "l", 1e-7, 1e20, 3.0])"),
      seed("%s alone", R"("single")"),
      seed("[%*s][%.*s]", R"([-5, "a", -1, "abc"])"),
  };
}

}  // namespace finetune::fuzz
