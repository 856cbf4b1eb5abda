#include <gtest/gtest.h>

#include <algorithm>

#include "../test_support.h"

#include "finetune/ddp/network_interfaces.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

TEST(NetworkInterfaces, SplitsTorchsCommaList) {
  EXPECT_TRUE(split_interface_names("", "GLOO_SOCKET_IFNAME").empty());
  EXPECT_EQ(split_interface_names("eth0", "GLOO_SOCKET_IFNAME"), (std::vector<std::string>{"eth0"}));
  EXPECT_EQ(split_interface_names("ib0,ib1", "GLOO_SOCKET_IFNAME"), (std::vector<std::string>{"ib0", "ib1"}));
  for (const char* bad : {",", "a,", ",a", "a,,b"}) {
    const std::string message = testing::error_message([&] { split_interface_names(bad, "GLOO_SOCKET_IFNAME"); });
    EXPECT_NE(message.find("GLOO_SOCKET_IFNAME=\"" + std::string(bad) + "\""), std::string::npos) << message;
  }
}

TEST(NetworkInterfaces, LoopbackIsPresentAndUnknownNamesAreListed) {
  const std::vector<std::string> present = host_interface_names();
  ASSERT_NE(std::find(present.begin(), present.end(), "lo"), present.end());
  require_host_interfaces({"lo"}, "GLOO_SOCKET_IFNAME");
  const std::string message =
      testing::error_message([&] { require_host_interfaces({"lo", "nosuch9"}, "GLOO_SOCKET_IFNAME"); });
  EXPECT_NE(message.find("'nosuch9'"), std::string::npos) << message;
  for (const std::string& name : present) EXPECT_NE(message.find(name), std::string::npos) << message;
}

}  // namespace
}  // namespace finetune
