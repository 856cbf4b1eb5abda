// The network interfaces a Gloo job binds to: GLOO_SOCKET_IFNAME ("eth0" or "ib0,ib1"), as
// torch.distributed reads it. A name this host does not have is an error naming the variable and
// listing the interfaces it does have, before any rendezvous (Gloo's own message is an opaque
// "device not found" from deep inside the process group's constructor).
#pragma once

#include <string>
#include <vector>

namespace finetune {

// "a,b" -> {"a", "b"}; "" -> {}. An empty entry ("a,,b", "a,") is an error naming `variable`.
std::vector<std::string> split_interface_names(const std::string& value, const std::string& variable);

// The interface names of this host (if_nameindex), in the kernel's order.
std::vector<std::string> host_interface_names();

// Throws unless every name in `names` is an interface of this host.
void require_host_interfaces(const std::vector<std::string>& names, const std::string& variable);

}  // namespace finetune
