#include "finetune/model/activation_offload.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/accumulate.h>

#include "finetune/util/errors.h"

namespace finetune {

// Note [Activation offloading]
// With gradient checkpointing the only activations a forward keeps are the layers' inputs
// (Note [Layer recompute]): tokens x hidden x layers values, 295 KB a token on Qwen3-8B, which
// decide the longest row that trains. Offloading moves each one to pinned host memory as soon as
// its layer has read it, and brings it back in backward one layer early:
//  - forward: the side stream waits on an event recorded on the compute stream (the input is
//    written), copies it to host asynchronously, and the input's device block is recorded on
//    the side stream, so the caching allocator reuses it only after the copy has read it;
//  - backward of layer i: layer i's copy is started if it is not under way yet and the compute
//    stream waits on its event before the recompute reads it; layer i-1's is started once layer i's
//    MLP has back-propagated (prefetch, from the recompute's LayerContext::after_mlp_backward), so
//    it runs on the side stream while layer i's attention back-propagates and is not on the device
//    through the MLP's backward, the layer's memory peak. A copy back goes into
//    a block allocated on the compute stream, after the side stream has waited on the compute
//    stream's work so far (the block's previous users).
// Host copies live on one side stream, so each copy back follows its copy out (stream order).
// Bits do not change: a copy is a copy, and the recompute reads the same values.
// With an arena (Note [Offload arena]), for micro-steps captured as CUDA graphs, the copy out goes
// to the arena instead of a pinned tensor of its own, and its input's block is not recorded on
// the side stream (the caching allocator would keep a block with a stream use until the capture
// ends, saving nothing): the compute stream waits for the copy out at the end of the layer's
// forward (finish_offload, before the input is dropped), so the block's reuse follows the copy in
// stream order. The copy overlaps the layer it was started before. Every side-stream copy is
// joined back into the compute stream by an event (the copy out by finish_offload, the copy back
// by restore), as a capture requires of a stream it forks.

namespace {

bool is_cuda(const at::Device& device) { return device.is_cuda(); }

// An event on `stream`'s work so far that `waiter` waits for.
void order_after(const c10::Stream& stream, const c10::Stream& waiter) {
  c10::Event event(stream.device_type());
  event.record(stream);
  event.block(waiter);
}

// The arena bytes one slot of `elements` values of `dtype` takes: its size, aligned.
int64_t offload_slot_bytes(int64_t elements, at::ScalarType dtype) {
  const int64_t bytes = elements * static_cast<int64_t>(c10::elementSize(dtype));
  return (bytes + kOffloadSlotAlignment - 1) / kOffloadSlotAlignment * kOffloadSlotAlignment;
}

}  // namespace

OffloadArena::OffloadArena(const at::Device& device, int64_t capacity_bytes)
    : buffer_(at::empty({capacity_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(is_cuda(device)))) {}

at::Tensor OffloadArena::view(int64_t offset, at::IntArrayRef sizes, at::ScalarType dtype) const {
  const int64_t bytes = c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
  if (offset < 0 || offset + bytes > capacity_bytes()) {
    throw Error("activation offload arena: " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                " do not fit its " + std::to_string(capacity_bytes()) + " bytes");
  }
  return buffer_.narrow(0, offset, bytes).view(dtype).view(sizes);
}

int64_t offload_arena_bytes(int64_t tokens, int64_t hidden_size, int64_t layers, at::ScalarType dtype) {
  return offload_slot_bytes(tokens * hidden_size, dtype) * layers;
}

std::optional<int64_t> offload_above_bytes(OffloadActivations mode, const at::Device& device) {
  switch (mode) {
    case OffloadActivations::kOn: return 0;
    case OffloadActivations::kOff: return std::nullopt;
    case OffloadActivations::kAuto: return device.is_cuda() ? std::optional<int64_t>(0) : std::nullopt;
  }
  return std::nullopt;
}

ActivationOffloader::ActivationOffloader(const at::Device& device, std::shared_ptr<const OffloadArena> arena)
    : device_(device), arena_(std::move(arena)) {
  if (is_cuda(device_)) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    side_stream_ = guard.getStreamFromGlobalPool(guard.getDevice(), /*isHighPriority=*/false);
  }
}

// The host tensor a slot's copy of `input` goes to: the arena's next bytes, or a tensor of its own.
at::Tensor ActivationOffloader::host_copy_of(const at::Tensor& input) {
  if (!arena_) {
    return at::empty(input.sizes(), input.options().device(at::kCPU).pinned_memory(side_stream_.has_value()));
  }
  auto host = arena_->view(arena_offset_, input.sizes(), input.scalar_type());
  arena_offset_ += offload_slot_bytes(input.numel(), input.scalar_type());
  return host;
}

size_t ActivationOffloader::offload(const at::Tensor& input) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot slot;
  slot.host = host_copy_of(input);
  if (side_stream_) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    order_after(guard.getStream(input.device()), *side_stream_);
    {
      const c10::StreamGuard on_side(*side_stream_);
      slot.host.copy_(input, /*non_blocking=*/true);
    }
    if (arena_) {
      slot.copied.emplace(device_.type());
      slot.copied->record(*side_stream_);
    } else {
      guard.recordDataPtrOnStream(input.storage().data_ptr(), *side_stream_);
    }
  } else {
    slot.host.copy_(input);  // the CPU: host memory already; a copy keeps the bookkeeping the same
  }
  slots_.push_back(std::move(slot));
  trace_.push_back({OffloadRecord::kOffloaded, slots_.size() - 1});
  return slots_.size() - 1;
}

ActivationOffloader::Slot& ActivationOffloader::slot_at(size_t index) {
  if (index >= slots_.size()) throw Error("ActivationOffloader: no slot " + std::to_string(index));
  return slots_[index];
}

void ActivationOffloader::finish_offload(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& slot = slot_at(index);
  if (!slot.copied) return;
  const c10::impl::VirtualGuardImpl guard(device_.type());
  slot.copied->block(guard.getStream(side_stream_->device()));
  slot.copied.reset();
}

void ActivationOffloader::start_prefetch(size_t index) {
  Slot& slot = slot_at(index);
  if (slot.device.defined()) return;
  if (!slot.host.defined()) throw Error("ActivationOffloader: slot " + std::to_string(index) + " was already restored");
  if (side_stream_) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    const auto compute = guard.getStream(side_stream_->device());
    slot.device = at::empty(slot.host.sizes(), slot.host.options().device(side_stream_->device()));
    order_after(compute, *side_stream_);
    {
      const c10::StreamGuard on_side(*side_stream_);
      slot.device.copy_(slot.host, /*non_blocking=*/true);
    }
    slot.ready.emplace(device_.type());
    slot.ready->record(*side_stream_);
  } else {
    slot.device = slot.host;
  }
  trace_.push_back({OffloadRecord::kPrefetched, index});
}

void ActivationOffloader::prefetch(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  start_prefetch(index);
}

at::Tensor ActivationOffloader::restore(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  start_prefetch(index);
  Slot& slot = slot_at(index);
  if (slot.ready) {
    const c10::impl::VirtualGuardImpl guard(device_.type());
    slot.ready->block(guard.getStream(side_stream_->device()));
  }
  trace_.push_back({OffloadRecord::kRestored, index});
  at::Tensor out = std::move(slot.device);
  slot = Slot{};
  trace_.push_back({OffloadRecord::kReleased, index});
  return out;
}

std::vector<OffloadRecord> ActivationOffloader::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return trace_;
}

}  // namespace finetune
