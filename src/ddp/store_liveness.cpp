// bound_store_silence(): see Note [Vanished store host] in store_liveness.h.
#include "finetune/ddp/store_liveness.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The TCPStore under any PrefixStores; null for another kind of store.
const c10d::TCPStore* tcp_store_of(c10d::Store& store) {
  if (const auto* tcp = dynamic_cast<const c10d::TCPStore*>(&store)) return tcp;
  if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(&store))
    return dynamic_cast<const c10d::TCPStore*>(prefix->getUnderlyingNonPrefixStore().get());
  return nullptr;
}

// The endpoint's addresses (every address its host name resolves to), with its port.
std::vector<sockaddr_storage> endpoint_addresses(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return {};
  std::vector<sockaddr_storage> addresses;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, a->ai_addr, a->ai_addrlen);
    addresses.push_back(address);
  }
  ::freeaddrinfo(found);
  return addresses;
}

// An address and port, IPv4-mapped IPv6 addresses as IPv4: TCPStore connects through an IPv6
// socket to "::ffff:10.0.0.1" where the host name resolves to 10.0.0.1.
std::pair<std::string, uint16_t> canonical(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    return {std::string(reinterpret_cast<const char*>(&v4.sin_addr), 4), ntohs(v4.sin_port)};
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    const char* bytes = reinterpret_cast<const char*>(&v6.sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) return {std::string(bytes + 12, 4), ntohs(v6.sin6_port)};
    return {std::string(bytes, 16), ntohs(v6.sin6_port)};
  }
  return {"", 0};
}

bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  const auto x = canonical(a);
  return !x.first.empty() && x == canonical(b);
}

// This process's socket descriptors whose peer is one of `endpoints`.
std::vector<int> sockets_connected_to(const std::vector<sockaddr_storage>& endpoints) {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat info {};
    if (::fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
    for (const auto& endpoint : endpoints)
      if (same_endpoint(peer, endpoint)) {
        fds.push_back(static_cast<int>(fd));
        break;
      }
  }
  ::closedir(dir);
  return fds;
}

void set_option(int fd, int level, int name, int value, const char* what, const std::string& endpoint) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0)
    throw Error("rendezvous store " + endpoint + ": setting " + what + " on its connection failed: " +
                std::strerror(errno));
}

}  // namespace

std::vector<int> bound_store_silence(c10d::Store& store, std::chrono::milliseconds limit) {
  const c10d::TCPStore* tcp = tcp_store_of(store);
  if (tcp == nullptr) return {};
  const std::string endpoint = tcp->getHost() + ":" + std::to_string(tcp->getPort());
  const auto fds = sockets_connected_to(endpoint_addresses(tcp->getHost(), tcp->getPort()));
  for (const int fd : fds) {
    set_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(limit.count()), "TCP_USER_TIMEOUT", endpoint);
    set_option(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE", endpoint);
    set_option(fd, IPPROTO_TCP, TCP_KEEPIDLE, 1, "TCP_KEEPIDLE", endpoint);
    set_option(fd, IPPROTO_TCP, TCP_KEEPINTVL, 1, "TCP_KEEPINTVL", endpoint);
  }
  return fds;
}

}  // namespace finetune
