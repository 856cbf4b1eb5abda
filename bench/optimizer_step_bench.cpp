// One optimizer step, timed: the fused 32-bit AdamW (ATen's _fused_adamw_) against bitsandbytes'
// 8-bit AdamW as finetune runs it, on the LoRA parameter set of a real shape (r=16 on all seven
// projections of every layer). Prints one JSON line. GPU machine:
//   build/finetune_optimizer_bench --shape qwen3-8b --steps 200
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "finetune/train/optimizer.h"

namespace {

void synchronize_gpu() { c10::impl::VirtualGuardImpl(at::kCUDA).synchronizeDevice(0); }

struct Shape {
  int64_t layers, hidden, intermediate, q_size, kv_size;
};

// (out, in) of each adapted projection: q, k, v, o, gate, up, down.
std::vector<std::pair<int64_t, int64_t>> projections(const Shape& s) {
  return {{s.q_size, s.hidden}, {s.kv_size, s.hidden}, {s.kv_size, s.hidden}, {s.hidden, s.q_size},
          {s.intermediate, s.hidden}, {s.intermediate, s.hidden}, {s.hidden, s.intermediate}};
}

double time_steps(const std::string& name, const Shape& shape, int64_t r, int steps) {
  at::manual_seed(0);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  std::vector<at::Tensor> parameters;
  for (int64_t layer = 0; layer < shape.layers; ++layer) {
    for (const auto& [out, in] : projections(shape)) {
      for (auto sizes : {std::vector<int64_t>{r, in}, std::vector<int64_t>{out, r}}) {
        auto p = (at::randn(sizes, options) * 0.02).requires_grad_(true);
        p.mutable_grad() = at::randn(sizes, options) * 1e-3;
        parameters.push_back(p);
      }
    }
  }
  auto optimizer = finetune::make_optimizer(name, parameters, finetune::AdamWOptions{}, /*fused=*/true);
  for (int i = 0; i < 10; ++i) optimizer->step(1e-4);  // warm-up
  synchronize_gpu();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) optimizer->step(1e-4);
  synchronize_gpu();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name = "qwen3-8b";
  int steps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--shape") shape_name = argv[i + 1];
    if (flag == "--steps") steps = std::stoi(argv[i + 1]);
  }
  const Shape shape = shape_name == "llama-3.2-1b" ? Shape{16, 2048, 8192, 2048, 512} : Shape{36, 4096, 12288, 4096, 1024};
  const double fused_ms = time_steps("adamw_torch", shape, 16, steps);
  const double eight_bit_ms = time_steps("adamw_8bit", shape, 16, steps);
  std::printf("{\"shape\": \"%s\", \"adamw_torch_fused_ms\": %.4f, \"adamw_8bit_ms\": %.4f, \"ratio_8bit_over_fused\": %.3f}\n",
              shape_name.c_str(), fused_ms, eight_bit_ms, eight_bit_ms / fused_ms);
  return 0;
}
