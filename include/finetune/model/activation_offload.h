// Activation offloading (Note [Activation offloading]): the checkpointed input of every decoder
// layer waits out the forward pass in host memory instead of device memory, and comes back one
// layer ahead of its recompute in backward.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "finetune/model/offload_activations_names.h"

namespace finetune {

// The checkpointed inputs of one forward (tokens x hidden x layers x dtype size) above which they
// are offloaded: kOn 0 (always), kOff nullopt (never), kAuto 0 on a CUDA device and nullopt on the
// CPU (there is no device memory to save). Why always on a GPU: measured on an H200 (README "Long
// context"), the copies cost Qwen3-8B's seed setting under 1% (short rows; its peak drops 0.32 GiB)
// and the packed 2,048-token rows of the best settings nothing measurable; long rows need them most.
std::optional<int64_t> offload_above_bytes(OffloadActivations mode, const at::Device& device);

// Note [Offload arena]
// Host memory for the checkpointed inputs of micro-steps captured as CUDA graphs: one pinned
// buffer, allocated once before any capture and shared by every graph (they run one at a time,
// each after the previous one's copies back have read it), which a forward fills from offset 0 in
// layer order. A captured copy reads or writes the host addresses it was captured with, so they
// must stay valid and not be reused by anything else for the graphs' life: no pinned allocation
// happens during capture, and nothing but the graphs' forwards writes here.
class OffloadArena {
 public:
  // `capacity_bytes` of pinned host memory on a CUDA device, plain host memory on the CPU.
  OffloadArena(const at::Device& device, int64_t capacity_bytes);
  int64_t capacity_bytes() const { return buffer_.numel(); }
  // A host tensor of `sizes` and `dtype` at byte `offset` (aligned by the caller); Error when it
  // does not fit.
  at::Tensor view(int64_t offset, at::IntArrayRef sizes, at::ScalarType dtype) const;

 private:
  at::Tensor buffer_;  // (capacity) uint8
};

// The arena bytes a forward of `tokens` tokens through `layers` layers of `hidden_size` in `dtype`
// needs (each slot's start aligned to kOffloadSlotAlignment).
constexpr int64_t kOffloadSlotAlignment = 512;
int64_t offload_arena_bytes(int64_t tokens, int64_t hidden_size, int64_t layers, at::ScalarType dtype);

// One step of an offloaded input's life, in the order they happened (tests read them).
struct OffloadRecord {
  enum Step { kOffloaded, kPrefetched, kRestored, kReleased };
  Step step;
  size_t slot;
  bool operator==(const OffloadRecord& other) const { return step == other.step && slot == other.slot; }
};

// The host copies of one forward's checkpointed layer inputs, slot 0, 1, ... in forward order.
// Backward restores them in reverse order; while a layer back-propagates its attention (after its
// MLP, the layer's memory peak) the slot before it is prefetched, so at most two slots are on the
// device at a time, and one during an MLP's backward. On a CUDA device the copies run
// on a side stream into pinned host memory, ordered against the compute stream by events; on the
// CPU they are plain copies, so the bookkeeping runs (and is tested) everywhere.
class ActivationOffloader {
 public:
  // With `arena` (Note [Offload arena]) the host copies go there, slot after slot, and every step
  // is capturable in a CUDA graph; without, each slot takes its own pinned host tensor.
  explicit ActivationOffloader(const at::Device& device, std::shared_ptr<const OffloadArena> arena = nullptr);

  // Forward: starts copying `input` to host memory and returns its slot. The caller keeps no
  // reference to `input` for backward; its device memory is reused once the copy has read it.
  size_t offload(const at::Tensor& input);

  // Forward, once the layer that reads the slot's input is queued, before the input is dropped:
  // with an arena the compute stream waits for the slot's copy here (the input's device memory is
  // then free for reuse in stream order, which a capture can record; without an arena the block is
  // recorded on the side stream instead, and this does nothing).
  void finish_offload(size_t slot);

  // Backward: the slot's input on the device, ready for the current stream (its copy back is
  // started here unless prefetch started it); forgets this slot (host and device copies are
  // released by the caller's use).
  at::Tensor restore(size_t slot);

  // Backward, before the slot is restored: starts bringing its input back, so that the copy runs
  // while other work does (nothing if it is under way already).
  void prefetch(size_t slot);

  std::vector<OffloadRecord> trace() const;

 private:
  struct Slot {
    at::Tensor host;                   // the copy in (pinned) host memory until restored
    at::Tensor device;                 // the copy back on the device, once prefetched
    std::optional<c10::Event> copied;  // CUDA with an arena: recorded on the side stream after the copy out
    std::optional<c10::Event> ready;   // CUDA: recorded on the side stream after the copy back
  };
  Slot& slot_at(size_t index);  // Error for a slot that was never offloaded
  void start_prefetch(size_t slot);
  at::Tensor host_copy_of(const at::Tensor& input);

  at::Device device_;
  std::shared_ptr<const OffloadArena> arena_;  // null: a pinned tensor per slot
  int64_t arena_offset_ = 0;                   // where the next slot starts in the arena
  std::optional<c10::Stream> side_stream_;  // CUDA only
  mutable std::mutex mutex_;               // backward may run on autograd's device threads
  std::vector<Slot> slots_;
  std::vector<OffloadRecord> trace_;
};

}  // namespace finetune
