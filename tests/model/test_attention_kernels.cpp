// Note [Batched packed attention]: a padding-free row's soft-capped attention run as chunks of
// padded samples equals attending sample by sample (the reference below: the eager expression on
// each sample's own causal, windowed square), in the output and in the gradients of q, k and v.
// fp32 on the CPU: within 1e-6 of the largest value (only the reductions' order may differ with
// the batch shape). The CUDA case checks bf16 within the per-sample path's own bf16 rounding; a
// disabled case times both (run it with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "finetune/model/attention_kernels.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The per-sample path the batched one replaced: each sample's (1, H, len, D) through
// eager_attention with its causal (or, longer than the window, windowed) mask.
at::Tensor per_sample_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::vector<int64_t>& sample_lengths, const AttentionSpec& spec) {
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (int64_t length : sample_lengths) {
    auto sample = [start, length](const at::Tensor& t) { return t.narrow(0, start, length).transpose(0, 1).unsqueeze(0); };
    auto allowed = spec.window && length > *spec.window
                       ? sliding_window_keys(at::Tensor(), *spec.window, length, 0, q.device())
                       : causal_keys(length, 0, q.device());
    auto out = eager_attention(sample(q), sample(k), sample(v), allowed, spec);  // (1, H, len, D)
    outputs.push_back(out.squeeze(0).transpose(0, 1));                        // (len, H, D)
    start += length;
  }
  return at::cat(outputs, 0);  // (N, H, D)
}

struct PackedCase {
  std::string name;
  std::vector<int64_t> lengths;
  int64_t heads, kv_heads, head_dim;
  AttentionSpec spec;
  PackedAttentionLimits limits;
};

AttentionSpec softcapped(double scale, double cap, std::optional<int64_t> window = std::nullopt) {
  AttentionSpec spec;
  spec.scale = scale;
  spec.softcap = cap;
  spec.window = window;
  return spec;
}

int64_t total_tokens(const std::vector<int64_t>& lengths) {
  int64_t total = 0;
  for (int64_t length : lengths) total += length;
  return total;
}

// Random q (N, H, D), k, v (N, KV, D) and an upstream gradient (N, H, D), scaled so that the
// scores reach the cap's bend.
struct PackedInputs {
  at::Tensor q, k, v, grad_out;
};

PackedInputs random_inputs(const PackedCase& c, at::ScalarType dtype, const at::Device& device, uint64_t seed) {
  at::manual_seed(seed);
  const int64_t tokens = total_tokens(c.lengths);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  PackedInputs in;
  in.q = (at::randn({tokens, c.heads, c.head_dim}, options) * 2.0).to(device, dtype);
  in.k = (at::randn({tokens, c.kv_heads, c.head_dim}, options) * 2.0).to(device, dtype);
  in.v = at::randn({tokens, c.kv_heads, c.head_dim}, options).to(device, dtype);
  in.grad_out = at::randn({tokens, c.heads, c.head_dim}, options).to(device, dtype);
  return in;
}

// The output and the gradients of q, k, v of one attention function.
struct Results {
  at::Tensor out, dq, dk, dv;
};

template <typename Attention>
Results run_attention(const PackedInputs& in, const Attention& attention) {
  auto q = in.q.detach().clone().requires_grad_(true);
  auto k = in.k.detach().clone().requires_grad_(true);
  auto v = in.v.detach().clone().requires_grad_(true);
  auto out = attention(q, k, v);
  out.backward(in.grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// max |a - b| relative to max |b|.
double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const auto ad = a.to(at::kCPU, at::kDouble), bd = b.to(at::kCPU, at::kDouble);
  return (ad - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

Results batched(const PackedCase& c, const PackedInputs& in) {
  const auto plan = plan_packed_attention(c.lengths, c.heads, c.spec, in.q.device(), c.limits);
  return run_attention(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return packed_eager_attention(q, k, v, plan, c.spec);
  });
}

Results per_sample(const PackedCase& c, const PackedInputs& in) {
  return run_attention(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return per_sample_attention(q, k, v, c.lengths, c.spec);
  });
}

void expect_equal_to_per_sample(const PackedCase& c) {
  SCOPED_TRACE(c.name);
  const auto in = random_inputs(c, at::kFloat, at::kCPU, 7);
  const auto ours = batched(c, in);
  const auto reference = per_sample(c, in);
  ASSERT_EQ(ours.out.sizes(), reference.out.sizes());
  EXPECT_LE(relative_difference(ours.out, reference.out), 1e-6);
  EXPECT_LE(relative_difference(ours.dq, reference.dq), 1e-6);
  EXPECT_LE(relative_difference(ours.dk, reference.dk), 1e-6);
  EXPECT_LE(relative_difference(ours.dv, reference.dv), 1e-6);
}

TEST(PackedEagerAttention, ManyShortSamplesEqualPerSample) {
  expect_equal_to_per_sample({"many short", {5, 7, 3, 9, 4, 6, 8, 2, 1, 5, 6, 7}, 4, 2, 16, softcapped(0.25, 2.0), {}});
}

TEST(PackedEagerAttention, OneLongAndManyShortEqualPerSample) {
  expect_equal_to_per_sample({"one long", {3, 48, 5, 2, 6, 4, 7, 1}, 4, 4, 8, softcapped(0.35, 1.5), {}});
}

TEST(PackedEagerAttention, WindowsShorterThanSamplesEqualPerSample) {
  expect_equal_to_per_sample({"window 5", {13, 4, 9, 2, 11}, 6, 2, 12, softcapped(0.3, 3.0, 5), {}});
  // Gemma-2's proportions: query_pre_attn_scalar^-0.5, cap 50, GQA 2:1.
  expect_equal_to_per_sample(
      {"gemma-2-like", {40, 20, 25, 3, 17}, 8, 4, 32, softcapped(std::pow(32.0, -0.5), 50.0, 16), {}});
}

TEST(PackedEagerAttention, OddHeadDimsAndMultiQueryEqualPerSample) {
  expect_equal_to_per_sample({"mqa, head_dim 7", {10, 6, 6, 3}, 3, 1, 7, softcapped(0.4, 2.0, 4), {}});
  expect_equal_to_per_sample({"head_dim 13", {1, 1, 2, 9}, 5, 5, 13, softcapped(0.3, 2.5), {}});
}

TEST(PackedEagerAttention, EveryChunkingEqualsPerSample) {
  const std::vector<int64_t> lengths = {13, 4, 9, 2, 11, 9, 30};
  const auto spec = softcapped(0.3, 2.0, 6);
  PackedAttentionLimits alone;  // a byte budget no two samples fit: one chunk per sample
  alone.chunk_bytes = 1;
  PackedAttentionLimits together;  // no padding bound: the whole row in one chunk
  together.max_padded_area = 1e9;
  ASSERT_EQ(group_packed_samples(lengths, 4, alone).size(), lengths.size());
  ASSERT_EQ(group_packed_samples(lengths, 4, together).size(), 1u);
  expect_equal_to_per_sample({"a chunk per sample", lengths, 4, 2, 8, spec, alone});
  expect_equal_to_per_sample({"one chunk", lengths, 4, 2, 8, spec, together});
}

TEST(PackedEagerAttention, EmptySamplesAreSkipped) {
  PackedCase c{"empty samples", {0, 5, 0, 3, 0}, 2, 1, 4, softcapped(0.5, 2.0), {}};
  expect_equal_to_per_sample(c);
  EXPECT_EQ(plan_packed_attention(c.lengths, 2, c.spec, at::kCPU).chunks.size(), 1u);
}

TEST(PackedEagerAttention, RowOfOtherLengthIsAnError) {
  const auto spec = softcapped(0.5, 2.0);
  const auto plan = plan_packed_attention({3, 4}, 2, spec, at::kCPU);
  const auto q = at::randn({8, 2, 4});
  const auto kv = at::randn({8, 1, 4});
  EXPECT_THROW(packed_eager_attention(q, kv, kv, plan, spec), Error);
  EXPECT_THROW(group_packed_samples({3, -1}, 2, {}), Error);
}

// Longest first; a sample joins the chunk while the padded area and the byte budget allow.
TEST(PackedEagerAttention, GroupsLongestFirstWithinTheBounds) {
  // 100, 95, 90, 50: 4 x 100^2 = 40000 <= 1.5 x 29625; 12 would make 50000 > 1.5 x 29769.
  const auto groups = group_packed_samples({100, 10, 90, 12, 50, 0, 95}, 8, {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].samples, (std::vector<int64_t>{0, 6, 2, 4}));
  EXPECT_EQ(groups[0].longest, 100);
  EXPECT_EQ(groups[1].samples, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(groups[1].longest, 12);
  // 2 heads x 8^2 x 4 bytes = 512 bytes a sample: a 1024-byte budget takes two.
  PackedAttentionLimits limits;
  limits.chunk_bytes = 1024;
  EXPECT_EQ(group_packed_samples({8, 8, 8, 8, 8}, 2, limits).size(), 3u);
}

TEST(PackedEagerAttention, RandomRowsKeepEveryBound) {
  at::manual_seed(3);
  const PackedAttentionLimits limits{1.5, int64_t{16} << 20};
  const int64_t heads = 16;
  for (int trial = 0; trial < 50; ++trial) {
    const auto drawn = at::exp(at::randn({12}) * 0.8 + std::log(200.0)).round().clamp(0, 2048).to(at::kLong);
    const std::vector<int64_t> lengths(drawn.data_ptr<int64_t>(), drawn.data_ptr<int64_t>() + 12);
    std::vector<int> seen(lengths.size(), 0);
    for (const auto& group : group_packed_samples(lengths, heads, limits)) {
      double own_area = 0;
      int64_t previous = group.longest;
      for (int64_t sample : group.samples) {
        ++seen[sample];
        EXPECT_LE(lengths[sample], previous);
        previous = lengths[sample];
        own_area += static_cast<double>(lengths[sample]) * lengths[sample];
      }
      EXPECT_EQ(lengths[group.samples.front()], group.longest);
      const double padded_area = static_cast<double>(group.samples.size()) * group.longest * group.longest;
      if (group.samples.size() > 1) {
        EXPECT_LE(padded_area, limits.max_padded_area * own_area);
        EXPECT_LE(padded_area * heads * 4, static_cast<double>(limits.chunk_bytes));
      }
    }
    for (size_t i = 0; i < lengths.size(); ++i) EXPECT_EQ(seen[i], lengths[i] > 0 ? 1 : 0) << "sample " << i;
  }
}

// A packed row at Gemma-2-9B's attention shapes (16 heads, 8 kv heads, head_dim 256, cap 50), ten
// samples of the benchmark's lengths (bench/shapes.py make_rows: log-normal around 200), and a
// sliding window shorter than two of them.
PackedCase gemma2_row(std::optional<int64_t> window) {
  return {window ? "gemma-2-9b, window 200" : "gemma-2-9b", {352, 87, 133, 250, 109, 192, 223, 121, 91, 225},
          16, 8, 256, softcapped(1.0 / 16.0, 50.0, window), {}};
}

// Squared L2 norms in double, summed over rows: the batched (ours) and per-sample (theirs) bf16
// results against an fp32 reference, and against each other.
struct Bf16Errors {
  double ours = 0, theirs = 0, apart = 0, reference = 0;
  void add(const at::Tensor& ours_bf16, const at::Tensor& theirs_bf16, const at::Tensor& reference_fp32) {
    const auto a = ours_bf16.to(at::kCPU, at::kDouble), b = theirs_bf16.to(at::kCPU, at::kDouble);
    const auto r = reference_fp32.to(at::kCPU, at::kDouble);
    ours += (a - r).square().sum().item<double>();
    theirs += (b - r).square().sum().item<double>();
    apart += (a - b).square().sum().item<double>();
    reference += r.square().sum().item<double>();
  }
};

TEST(PackedEagerAttentionCuda, Bf16WithinThePerSamplePathsRounding) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  // The reference: the per-sample path in fp32 on the same bf16 values. Over both rows, the batched
  // path is no less accurate than the per-sample one (5% for luck), and the two are no further
  // apart than twice the per-sample path's own error (two independent roundings of that size).
  std::vector<Bf16Errors> errors(4);
  for (const auto& c : {gemma2_row(std::nullopt), gemma2_row(200)}) {
    const auto in = random_inputs(c, at::kBFloat16, cuda, 11);
    const PackedInputs in32{in.q.to(at::kFloat), in.k.to(at::kFloat), in.v.to(at::kFloat), in.grad_out.to(at::kFloat)};
    const auto ours = batched(c, in), theirs = per_sample(c, in), reference = per_sample(c, in32);
    errors[0].add(ours.out, theirs.out, reference.out);
    errors[1].add(ours.dq, theirs.dq, reference.dq);
    errors[2].add(ours.dk, theirs.dk, reference.dk);
    errors[3].add(ours.dv, theirs.dv, reference.dv);
  }
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < errors.size(); ++i) {
    const auto& e = errors[i];
    const double ours = std::sqrt(e.ours / e.reference), theirs = std::sqrt(e.theirs / e.reference);
    const double apart = std::sqrt(e.apart / e.reference);
    std::printf("%s: relative L2 against fp32: batched %.3g, per-sample %.3g; batched - per-sample %.3g\n", names[i],
                ours, theirs, apart);
    EXPECT_GT(theirs, 0.0) << names[i];
    EXPECT_LE(ours, 1.05 * theirs) << names[i];
    EXPECT_LE(apart, 2.0 * theirs) << names[i];
  }
}

// Milliseconds per forward + backward of one layer's attention, the batched path (its plan built
// once, as a forward does for all layers of a kind) and the per-sample one.
template <typename Attention>
double milliseconds_per_step(const PackedInputs& in, const Attention& attention, int steps) {
  for (int i = 0; i < 2; ++i) run_attention(in, attention);  // warm-up
  in.q.sum().item<double>();                                  // drains the device's queue
  const auto start = std::chrono::steady_clock::now();
  Results last;
  for (int i = 0; i < steps; ++i) last = run_attention(in, attention);
  last.dq.sum().item<double>();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

// Milliseconds per plan_packed_attention (a forward builds one per kind of layer).
double milliseconds_per_plan(const PackedCase& c, const at::Device& device, int builds) {
  plan_packed_attention(c.lengths, c.heads, c.spec, device, c.limits).output_rows.sum().item<double>();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < builds; ++i)
    plan_packed_attention(c.lengths, c.heads, c.spec, device, c.limits).output_rows.sum().item<double>();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / builds;
}

TEST(PackedEagerAttentionTiming, DISABLED_Gemma2Row) {
  // bf16 on the GPU where there is one, else fp32 on the CPU (a rough indication only).
  const at::Device device = at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const at::ScalarType dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  const int steps = device.is_cuda() ? 50 : 3;
  for (const auto& c : {gemma2_row(std::nullopt), gemma2_row(200)}) {
    const auto in = random_inputs(c, dtype, device, 5);
    const auto plan = plan_packed_attention(c.lengths, c.heads, c.spec, device, c.limits);
    const double ours = milliseconds_per_step(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return packed_eager_attention(q, k, v, plan, c.spec);
    }, steps);
    const double theirs = milliseconds_per_step(in, [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return per_sample_attention(q, k, v, c.lengths, c.spec);
    }, steps);
    std::printf("%s %s %s: %zu samples, %zu chunks; forward+backward per layer: per-sample %.3f ms, batched %.3f ms "
                "(%.2fx); plan %.3f ms per forward and kind of layer\n",
                c.name.c_str(), device.str().c_str(), c10::toString(dtype), c.lengths.size(), plan.chunks.size(), theirs,
                ours, theirs / ours, milliseconds_per_plan(c, device, 10));
  }
}

}  // namespace
}  // namespace finetune
