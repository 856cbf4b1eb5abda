// FINETUNE_* environment variables: FINETUNE_<OPTION> sets an option (the middle layer between
// the config file and the command line, option_parser.cpp); a few others are exported by the
// project's own scripts and are tolerated; any other FINETUNE_* variable is a mistake (a typo of an
// option, or an option finetune does not have) and an error, since ignoring it would silently run
// with a setting the user did not ask for. Private to src/config/.
#pragma once

#include <string>

#include "finetune/launch/environment.h"

namespace finetune {

// "FINETUNE_" + the option name in upper case: lora_alpha -> FINETUNE_LORA_ALPHA.
std::string option_env_key(const std::string& option_name);

// Throws UsageError naming the first FINETUNE_* variable of `env` (in name order) that is neither
// an option's (by name or alias) nor tolerated, with the closest such name as a suggestion.
void check_finetune_environment(const EnvMap& env);

}  // namespace finetune
