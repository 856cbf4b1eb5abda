// bound_store_silence (Note [Vanished store host]): which sockets get the options, and which.
// That a vanished host is then noticed is rehearsed end to end with a node powered off
// (tests/e2e/test_multinode.py).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "finetune/ddp/store_liveness.h"

namespace finetune {
namespace {

using namespace std::chrono_literals;

int int_option(int fd, int level, int name) {
  int value = -1;
  socklen_t length = sizeof value;
  EXPECT_EQ(::getsockopt(fd, level, name, &value, &length), 0);
  return value;
}

c10::intrusive_ptr<c10d::TCPStore> store_at(uint16_t port, bool server) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = server;
  options.waitWorkers = false;
  options.timeout = 10s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

TEST(StoreLiveness, EveryConnectionToTheStoreEndpointGetsTheBounds) {
  auto host = store_at(0, /*server=*/true);
  auto client = store_at(host->getPort(), /*server=*/false);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("finetune/attempt_0", client->clone());

  const auto fds = bound_store_silence(*prefixed, 2500ms);
  // The host's own client connection, the client's, and the clone's (TCPStore connects through
  // IPv6 sockets to ::ffff:127.0.0.1, where "127.0.0.1" resolves to IPv4): the server's accepted
  // sockets (whose peers are ephemeral ports) are not connections to the endpoint.
  ASSERT_EQ(fds.size(), 3u);
  for (const int fd : fds) {
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 2500);
    EXPECT_EQ(int_option(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE), 1);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), 1);
  }
  // The connections still work.
  prefixed->set("key", std::vector<uint8_t>{1, 2});
  EXPECT_EQ(prefixed->get("key"), (std::vector<uint8_t>{1, 2}));
}

TEST(StoreLiveness, AStoreOfAnotherKindHasNoSockets) {
  c10d::HashStore store;
  EXPECT_TRUE(bound_store_silence(store, 2500ms).empty());
}

}  // namespace
}  // namespace finetune
