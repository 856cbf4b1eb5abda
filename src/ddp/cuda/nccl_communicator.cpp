// CUDA collectives through the NCCL C API (compiled only in CUDA builds).
//
// Note [NCCL stream ordering]
// Collectives run on the communicator's own stream. Launch: record an event on the caller's
// current (compute) stream, make the comm stream wait on it, enqueue the NCCL op, record a "done"
// event on the comm stream. CollectiveWork::wait() makes the caller's current stream wait on
// "done": the host never blocks in the hot path. Only barrier() waits on the host, polling so that
// the watchdog's failure is seen.
//
// Note [Enqueue off the caller's thread]
// A non-blocking communicator hands each collective to a thread NCCL starts for it (group.cc:
// groupLaunchNonBlocking), and the call returns ncclInProgress until that thread has launched the
// kernel. A profiled eager backward on an H200 showed 3-4 ms of GPU idle before every bucket's
// all-reduce while its gradient hook (on the autograd engine's thread) waited for that. So the
// enqueue runs on the communicator's own SerialWorker: the caller records the "ready" event on its
// stream and goes on; the worker makes the comm stream wait on it, enqueues, records "done". One
// worker keeps the collectives in the order of the calls, the order every rank shares.
// CollectiveWork::wait() first waits (on the host, watching the watchdog) until the worker has
// enqueued the collective, then makes the caller's stream wait on "done".
//
// The communicator is created non-blocking (ncclConfig_t::blocking = 0) so that ncclCommAbort
// from the watchdog thread can release a collective stuck on a dead peer; see watchdog.h. NCCL
// itself does not notice a peer that died (within a node its kernels spin): the peer monitor does
// (Note [Peer heartbeats]) and hands its verdict to the watchdog, which aborts.
//
// A world of one rank is legal NCCL (train uses LocalCommunicator for it; the GPU tests build this
// one on a single GPU): it has no peer to watch, so no peer monitor (which needs one), and a
// signal can only come from this rank (wait_for answers from what it published, as
// LocalCommunicator does).
#include <cuda_runtime.h>
#include <nccl.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "finetune/ddp/backends.h"
#include "finetune/ddp/ddp_error.h"
#include "finetune/ddp/peer_monitor.h"
#include "finetune/ddp/store_bootstrap.h"
#include "finetune/ddp/store_signals.h"
#include "finetune/ddp/watchdog.h"
#include "finetune/util/log.h"
#include "finetune/util/serial_worker.h"

namespace finetune {

namespace {

using Milliseconds = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

void cuda_check(cudaError_t status, int rank, const std::string& operation) {
  if (status != cudaSuccess) throw distributed_error(rank, operation, std::string("CUDA error: ") + cudaGetErrorString(status));
}

ncclDataType_t nccl_dtype(at::ScalarType type, int rank, const std::string& operation) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kDouble: return ncclFloat64;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    default:
      throw distributed_error(rank, operation, std::string("has no NCCL type for dtype ") + c10::toString(type));
  }
}

// A CUDA event without timing, shared between the work object and the watchdog's probe.
std::shared_ptr<cudaEvent_t> make_event(int rank, const std::string& operation) {
  auto event = std::shared_ptr<cudaEvent_t>(new cudaEvent_t, [](cudaEvent_t* e) {
    cudaEventDestroy(*e);
    delete e;
  });
  cuda_check(cudaEventCreateWithFlags(event.get(), cudaEventDisableTiming), rank, operation);
  return event;
}

// A collective handed to the communicator's worker: `enqueued` is ready once the worker has
// enqueued it and recorded `done` after it on the comm stream (or holds why it could not).
struct Launched {
  std::shared_ptr<cudaEvent_t> done;
  std::shared_future<void> enqueued;
};

// Waits on the host until the worker has enqueued `launched`, polling so that a watchdog failure
// (an abort releasing a stuck enqueue) is seen; rethrows the enqueue's own failure.
void wait_until_enqueued(const Launched& launched, Watchdog& watchdog) {
  while (launched.enqueued.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
    watchdog.throw_if_failed();
  }
  launched.enqueued.get();
}

class NcclWork : public CollectiveWork {
 public:
  NcclWork(std::shared_ptr<Watchdog> watchdog, Launched launched, at::Device device, int rank, std::string operation)
      : watchdog_(std::move(watchdog)), launched_(std::move(launched)), device_(device), rank_(rank),
        operation_(std::move(operation)) {}

  void wait() override {
    watchdog_->throw_if_failed();
    wait_until_enqueued(launched_, *watchdog_);
    c10::cuda::CUDAGuard guard(device_);
    cuda_check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_.index()).stream(), *launched_.done, 0),
               rank_, operation_);
  }

 private:
  std::shared_ptr<Watchdog> watchdog_;
  Launched launched_;
  at::Device device_;
  int rank_;
  std::string operation_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& launch, const at::Device& device,
                   Milliseconds timeout, const PeerMonitorOptions& monitor_options)
      : rank_(launch.rank), world_size_(launch.world_size), device_(device), timeout_(timeout),
        signals_(store, launch.rank, timeout),
        comm_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {
    c10::cuda::CUDAGuard guard(device_);
    const ncclUniqueId id = exchange_unique_id(*store);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // abortable: see the note at the top
    const std::string init = "NCCL communicator init (" + std::to_string(world_size_) + " ranks)";
    ncclResult_t status = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (status != ncclSuccess && status != ncclInProgress) {
      throw distributed_error(rank_, init, std::string("failed: ") + ncclGetErrorString(status));
    }
    const auto started = Clock::now();
    while (true) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress || Clock::now() - started > timeout_) {
        const std::string detail = state != ncclInProgress
                                       ? std::string("failed: ") + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) + ")"
                                       : "timed out after " + seconds_text(timeout_);
        ncclCommAbort(comm_);
        throw distributed_error(rank_, init, detail);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int device_index = device_.index();
    enqueuer_ = std::make_unique<SerialWorker>([device_index] { cudaSetDevice(device_index); });
    WatchdogOptions options;
    options.timeout = timeout_;
    watchdog_ = std::make_shared<Watchdog>(
        rank_, options, [this] { return async_error(); }, [this] { abort_comm(); });
    // Also keeps the store (on rank 0: its server) alive for as long as the peers may use it.
    // Assigned under the mutex: the watchdog thread's async_error() reads it. None for a world of
    // one (see the top): every use below checks.
    std::lock_guard<std::timed_mutex> lock(nccl_mutex_);
    if (world_size_ > 1) {
      monitor_ = std::make_unique<PeerMonitor>(store, rank_, world_size_, store_host_rank(launch), monitor_options,
                                               [this](const std::string& message) { watchdog_->fail(message); });
    }
  }

  ~NcclCommunicator() override {
    enqueuer_.reset();  // runs what was handed to it (a stuck enqueue is bounded, and the watchdog still runs)
    watchdog_->stop();  // no async_error() (which waits on the monitor) after this
    monitor_.reset();   // its thread may still call watchdog_->fail, which stays valid until below
    const bool healthy = !watchdog_->failed();
    watchdog_.reset();
    std::lock_guard<std::timed_mutex> lock(nccl_mutex_);
    if (!healthy || comm_ == nullptr) return;  // already aborted
    // Finalize flushes outstanding operations; bounded so a dead peer cannot hang shutdown.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto started = Clock::now();
    while (state == ncclInProgress && Clock::now() - started < timeout_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &state);
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::unique_ptr<CollectiveWork> all_reduce_async(at::Tensor& tensor, const std::string& what) override {
    return launch_all_reduce(tensor, what, nullptr);
  }

  std::unique_ptr<CollectiveWork> all_reduce_after(at::Tensor& tensor, const std::string& what,
                                                   const ReadyEvent& ready) override {
    if (ready.cuda_event == nullptr) throw distributed_error(rank_, what, "was given no CUDA event to wait for");
    // Not owned: the event belongs to the graph that records it.
    return launch_all_reduce(tensor, what, std::make_shared<cudaEvent_t>(static_cast<cudaEvent_t>(ready.cuda_event)));
  }

  void broadcast(at::Tensor& tensor, int root, const std::string& what) override {
    check_tensor(tensor, what);
    if (root < 0 || root >= world_size_) throw distributed_error(rank_, what, "has no rank " + std::to_string(root));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const ncclDataType_t dtype = nccl_dtype(buffer.scalar_type(), rank_, what);
    void* data = buffer.data_ptr();
    const size_t count = static_cast<size_t>(buffer.numel());
    auto launched = launch(buffer, what, [this, data, count, dtype, root](cudaStream_t stream) {
      return ncclBroadcast(data, data, count, dtype, root, comm_, stream);
    });
    NcclWork(watchdog_, std::move(launched), device_, rank_, what).wait();
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  void barrier(const std::string& what) override {
    at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
    void* data = token.data_ptr();
    auto launched = launch(token, what, [this, data](cudaStream_t stream) {
      return ncclAllReduce(data, data, 1, ncclFloat32, ncclSum, comm_, stream);
    });
    wait_until_enqueued(launched, *watchdog_);
    wait_on_host(*launched.done, what);
  }

  void publish(const std::string& key, const std::string& value) override {
    signals_.publish(key, value);
    if (monitor_ == nullptr) published_[key] = value;  // a world of one: wait_for answers from here
  }
  std::string wait_for(const std::string& key, const std::string& what) override {
    if (monitor_ == nullptr) return published_by_this_rank(key, what);
    return signals_.wait_for(key, what, *monitor_);
  }

  void finish() override {
    if (monitor_ != nullptr) monitor_->finish();
  }

  void abort(const std::string& reason) override {
    if (monitor_ != nullptr) monitor_->report_failure(reason);
    watchdog_->fail("rank " + std::to_string(rank_) + ": communication aborted");
  }

 private:
  ncclUniqueId exchange_unique_id(c10d::Store& store) {
    // Rank 0 creates the id, everyone else reads it from the store (nccl-tests do this over MPI).
    const std::string key = "nccl_unique_id";
    ncclUniqueId id;
    if (rank_ == 0) {
      const ncclResult_t status = ncclGetUniqueId(&id);
      if (status != ncclSuccess) throw distributed_error(rank_, "ncclGetUniqueId", std::string("failed: ") + ncclGetErrorString(status));
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      const std::vector<uint8_t> bytes = store_get(store, key, timeout_, rank_, "NCCL unique id exchange");
      if (bytes.size() != sizeof(id)) {
        throw distributed_error(rank_, "NCCL unique id exchange", "got " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(sizeof(id)));
      }
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    return id;
  }

  // A world of one: no peer can publish, so waiting for a key this rank did not publish would only
  // run out the timeout. Refused at once, as LocalCommunicator does.
  std::string published_by_this_rank(const std::string& key, const std::string& what) const {
    const auto it = published_.find(key);
    if (it == published_.end()) throw distributed_error(rank_, "waiting for " + what, "is a wait for no peer (world size 1)");
    return it->second;
  }

  void check_tensor(const at::Tensor& tensor, const std::string& what) const {
    if (!tensor.defined() || tensor.device() != device_) {
      throw distributed_error(rank_, what, "needs a tensor on " + device_.str() + " for the nccl backend");
    }
  }

  // The in-place sum of `tensor`, after `ready` (null: after the caller's stream, launch()).
  std::unique_ptr<CollectiveWork> launch_all_reduce(at::Tensor& tensor, const std::string& what,
                                                    std::shared_ptr<cudaEvent_t> ready) {
    check_tensor(tensor, what);
    if (!tensor.is_contiguous()) throw distributed_error(rank_, what, "needs a contiguous tensor");
    const ncclDataType_t dtype = nccl_dtype(tensor.scalar_type(), rank_, what);
    void* data = tensor.data_ptr();
    const size_t count = static_cast<size_t>(tensor.numel());
    auto enqueue = [this, data, count, dtype](cudaStream_t stream) {
      return ncclAllReduce(data, data, count, dtype, ncclSum, comm_, stream);
    };
    auto launched = ready ? launch_after(std::move(ready), tensor, what, enqueue) : launch(tensor, what, enqueue);
    return std::make_unique<NcclWork>(watchdog_, std::move(launched), device_, rank_, what);
  }

  // Note [NCCL stream ordering], Note [Enqueue off the caller's thread]: records "ready" on the
  // caller's stream and hands the rest to the worker. The task keeps `tensor` alive until its
  // collective is on the comm stream, so that a caller dropping it at once frees it only after
  // that (the allocator's recordStream then covers the collective).
  template <typename Enqueue>
  Launched launch(const at::Tensor& tensor, const std::string& what, Enqueue enqueue) {
    c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    auto ready = make_event(rank_, what);
    cuda_check(cudaEventRecord(*ready, compute), rank_, what);
    return launch_after(ready, tensor, what, enqueue);
  }

  // launch() with the comm stream waiting for `ready`, already recorded (by the caller's stream or
  // by a graph launched before this call), instead of for the caller's stream.
  template <typename Enqueue>
  Launched launch_after(std::shared_ptr<cudaEvent_t> ready, const at::Tensor& tensor, const std::string& what,
                        Enqueue enqueue) {
    watchdog_->throw_if_failed();
    c10::cuda::CUDAGuard guard(device_);
    auto done = make_event(rank_, what);
    auto enqueued = enqueuer_->submit([this, tensor, what, enqueue, ready, done] {
      c10::cuda::CUDAGuard worker_guard(device_);
      cuda_check(cudaStreamWaitEvent(comm_stream_.stream(), *ready, 0), rank_, what);
      enqueue_on_comm_stream(what, enqueue);
      // The caching allocator must not hand this memory to the compute stream while NCCL uses it.
      c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), comm_stream_);
      cuda_check(cudaEventRecord(*done, comm_stream_.stream()), rank_, what);
      watchdog_->track(what, [done] {
        const cudaError_t state = cudaEventQuery(*done);
        if (state == cudaErrorNotReady) return false;
        if (state != cudaSuccess) throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(state));
        return true;
      });
    });
    return {done, enqueued};
  }

  // On the worker: the NCCL call, and (non-blocking communicator) the wait until NCCL's own thread
  // has enqueued it, bounded by the timeout; a failure is the watchdog's, then thrown.
  template <typename Enqueue>
  void enqueue_on_comm_stream(const std::string& what, const Enqueue& enqueue) {
    std::string failure;
    {
      std::lock_guard<std::timed_mutex> lock(nccl_mutex_);
      if (comm_ == nullptr) throw distributed_error(rank_, what, "was requested after the communicator was aborted");
      ncclResult_t status = enqueue(comm_stream_.stream());
      const auto started = Clock::now();
      while (status == ncclInProgress) {
        if (Clock::now() - started > timeout_) break;
        std::this_thread::yield();
        ncclCommGetAsyncError(comm_, &status);
      }
      if (status == ncclInProgress) {
        failure = distributed_error(rank_, what, "could not be enqueued within " + seconds_text(timeout_)).what();
      } else if (status != ncclSuccess) {
        failure = distributed_error(rank_, what, std::string("NCCL error: ") + ncclGetErrorString(status) + " (" +
                                                     ncclGetLastError(comm_) + ")").what();
      }
    }
    if (!failure.empty()) throw_failure(failure);  // outside the lock: the abort takes it
  }

  [[noreturn]] void throw_failure(const std::string& message) {
    watchdog_->fail(message);
    watchdog_->throw_if_failed();
    throw DistributedError(message);
  }

  // Polls instead of cudaEventSynchronize so that a watchdog abort is noticed.
  void wait_on_host(cudaEvent_t done, const std::string& what) {
    while (true) {
      watchdog_->throw_if_failed();
      const cudaError_t state = cudaEventQuery(done);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) throw_failure(distributed_error(rank_, what, std::string("CUDA error: ") + cudaGetErrorString(state)).what());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // On the watchdog thread. An error NCCL did notice (a peer's socket closed, across nodes) does not
  // say which rank died: give the peer monitor its usual bound to name it. Its verdict reaches the
  // watchdog first (on_lost), and the watchdog keeps the first failure.
  std::optional<std::string> async_error() {
    std::string error;
    PeerMonitor* monitor = nullptr;
    {
      std::unique_lock<std::timed_mutex> lock(nccl_mutex_, std::try_to_lock);
      if (!lock.owns_lock() || comm_ == nullptr) return std::nullopt;  // busy enqueueing: next poll
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
      error = std::string("NCCL error: ") + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) + ")";
      monitor = monitor_.get();
    }
    if (monitor != nullptr) monitor->wait_for_peer_loss();
    return error;
  }

  // Called by the watchdog on failure. A thread stuck inside an NCCL call may hold the mutex;
  // abort anyway after a short wait, since releasing that thread is the point.
  void abort_comm() {
    std::unique_lock<std::timed_mutex> lock(nccl_mutex_, std::defer_lock);
    const bool locked = lock.try_lock_for(std::chrono::seconds(1));
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    if (!locked) log::warn("rank " + std::to_string(rank_) + ": aborted the NCCL communicator while a call was in flight");
  }

  int rank_;
  int world_size_;
  at::Device device_;
  Milliseconds timeout_;
  StoreSignals signals_;
  c10::cuda::CUDAStream comm_stream_;
  ncclComm_t comm_ = nullptr;
  std::timed_mutex nccl_mutex_;
  std::shared_ptr<Watchdog> watchdog_;
  std::unique_ptr<PeerMonitor> monitor_;  // null in a world of one
  std::map<std::string, std::string> published_;  // a world of one only: this rank's signals
  std::unique_ptr<SerialWorker> enqueuer_;  // Note [Enqueue off the caller's thread]
};

}  // namespace

bool nccl_compiled_in() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const LaunchEnv& launch, const at::Device& device,
                                                     const CommunicatorOptions& options) {
  if (!device.is_cuda() || !device.has_index()) {
    throw UsageError("the nccl backend needs a CUDA device with an index (cuda:LOCAL_RANK), got " + device.str());
  }
  return std::make_unique<NcclCommunicator>(store, launch, device, timeout_from_seconds(options.timeout_seconds),
                                            options.peer_monitor);
}

}  // namespace finetune
