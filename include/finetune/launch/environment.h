// The process environment as a value. current_environment() is the one place that reads it, so
// everything downstream (launch detection, option layering, cache lookup) is a pure function of
// an EnvMap and testable without touching the real environment.
#pragma once

#include <map>
#include <string>

namespace finetune {

using EnvMap = std::map<std::string, std::string>;

// Snapshot of the process environment.
EnvMap current_environment();

// The value of `key`, "" when it is not set.
std::string env_value(const EnvMap& env, const std::string& key);

// This machine's name, gethostname(2), as Python's socket.gethostname(); an Error if it fails.
std::string host_name();

}  // namespace finetune
