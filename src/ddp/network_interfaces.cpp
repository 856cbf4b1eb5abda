#include "finetune/ddp/network_interfaces.h"

#include <net/if.h>

#include <algorithm>

#include "finetune/util/errors.h"

namespace finetune {

std::vector<std::string> split_interface_names(const std::string& value, const std::string& variable) {
  std::vector<std::string> names;
  if (value.empty()) return names;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string name = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) throw UsageError(variable + "=\"" + value + "\": an empty interface name");
    names.push_back(name);
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

std::vector<std::string> host_interface_names() {
  std::vector<std::string> names;
  if (struct if_nameindex* list = ::if_nameindex()) {
    for (const struct if_nameindex* entry = list; entry->if_index != 0 && entry->if_name != nullptr; ++entry)
      names.emplace_back(entry->if_name);
    ::if_freenameindex(list);
  }
  return names;
}

void require_host_interfaces(const std::vector<std::string>& names, const std::string& variable) {
  const std::vector<std::string> present = host_interface_names();
  for (const std::string& name : names) {
    if (std::find(present.begin(), present.end(), name) != present.end()) continue;
    std::string listed;
    for (const std::string& p : present) listed += (listed.empty() ? "" : ", ") + p;
    throw UsageError(variable + ": this host has no network interface '" + name + "' (it has: " +
                     (listed.empty() ? "none" : listed) + ")");
  }
}

}  // namespace finetune
