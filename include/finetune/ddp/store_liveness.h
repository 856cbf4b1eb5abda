// Connections to a rendezvous store whose host may vanish without a word.
//
// Note [Vanished store host]
// A store host whose machine loses power, or whose network goes, sends no FIN or RST: a TCPStore
// call on a connection to it then blocks with no error, and a survivor would wait out
// --ddp_timeout (Note [Peer heartbeats] in peer_monitor.h relies on store calls failing). So this
// process's connections to the store endpoint get
//   - TCP_USER_TIMEOUT = the limit: data the host's kernel has not acknowledged within it makes our
//     kernel drop the connection, and the pending call fails ("Connection timed out");
//   - keepalive probes after 1 s of silence, 1 s apart (bounded by the same limit): a request the
//     host acknowledged just before it vanished, whose answer never comes.
// A process that is frozen on a live host (SIGSTOP) keeps its kernel acknowledging, so it stays a
// stall, caught by --ddp_timeout, as before. Rehearsed with a node powered off (its link cut, then
// its processes killed) in tests/e2e/test_multinode.py.
#pragma once

#include <chrono>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace finetune {

// Applies Note [Vanished store host] to every socket of this process connected to the endpoint of
// `store` (a TCPStore, or a PrefixStore over one); returns those sockets' descriptors (none for a
// store that is not a TCPStore). Throws Error naming the endpoint when a socket option is refused.
std::vector<int> bound_store_silence(c10d::Store& store, std::chrono::milliseconds limit);

}  // namespace finetune
