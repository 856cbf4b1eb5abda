#include "finetune/ddp/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <string>

#ifdef FINETUNE_WITH_MPI
#include <mpi.h>
#endif

#include "finetune/util/errors.h"
#include "finetune/util/log.h"

namespace finetune {
namespace {

bool launched_by_mpi(const LaunchEnv& launch) {
  return launch.launcher == Launcher::OpenMpi || launch.launcher == Launcher::Pmi;
}

#ifdef FINETUNE_WITH_MPI
// A port the kernel says is free now (bound to 0, read back, released); rank 0's TCPStore binds
// it moments later.
int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw DistributedError("rank 0: cannot open a socket to choose a rendezvous port");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    throw DistributedError("rank 0: cannot bind a socket to choose a rendezvous port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) throw DistributedError("rank 0: gethostname failed");
  return name;
}
#endif

}  // namespace

bool mpi_compiled_in() {
#ifdef FINETUNE_WITH_MPI
  return true;
#else
  return false;
#endif
}

Rendezvous::Rendezvous(LaunchEnv launch) : launch_(std::move(launch)) {
  if (launch_.world_size == 1 || launch_.master_addr_given || !launched_by_mpi(launch_)) {
    if (launch_.multi_node && !launch_.master_addr_given && !launch_.use_agent_store) {
      throw UsageError("a multi-node job needs MASTER_ADDR (the rank-0 host) and MASTER_PORT in every rank's "
                       "environment");
    }
    return;
  }
#ifdef FINETUNE_WITH_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    mpi_started_ = true;
  }
  char address[320] = {};
  if (launch_.rank == 0) {
    const std::string host = launch_.multi_node ? this_host() : "127.0.0.1";
    std::snprintf(address, sizeof address, "%s:%d", host.c_str(), free_tcp_port());
  }
  MPI_Bcast(address, sizeof address, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string text(address);
  const auto colon = text.rfind(':');
  launch_.master_addr = text.substr(0, colon);
  launch_.master_port = std::stoi(text.substr(colon + 1));
  launch_.master_addr_given = true;
  log::debug("rendezvous over MPI: " + text);
#else
  if (launch_.multi_node) {
    throw UsageError("a multi-node mpirun job needs MASTER_ADDR (the rank-0 host) and MASTER_PORT: this build has "
                     "no MPI to exchange them (pass them with mpirun -x MASTER_ADDR=... -x MASTER_PORT=...)");
  }
#endif
}

Rendezvous::~Rendezvous() {
#ifdef FINETUNE_WITH_MPI
  if (mpi_started_ && std::uncaught_exceptions() == 0) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
#endif
}

}  // namespace finetune
