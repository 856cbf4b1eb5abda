// 8-bit AdamW's reference path against bitsandbytes 0.50.2 on the CPU (bnb.optim.AdamW with
// optim_bits=8, as HF's Trainer builds it for optim="adamw_8bit"): the fixture's gradients are fed
// step by step with its learning rates, and after every step every parameter, and after the first
// and the last step every state tensor (uint8 codes and fp32 absmax of the 8-bit parameters, fp32
// moments of the small ones), must equal bnb's bit for bit. Exact, because the reference path is
// bnb's CPU backend op for op in the same ATen (adamw_8bit.cpp) and the blockwise quantizer is
// byte-identical to bnb's CPU kernel (quant/blockwise_8bit.h). Also: the state layout around
// min_8bit_size, a save/load round trip through safetensors that continues bit for bit, and
// state of another optimizer or shape refused. Fixtures: tests/reference/make_adamw8bit_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../reference/tensor_fixtures.h"
#include "adamw_case.h"
#include "../test_support.h"
#include "finetune/weights/tensor_io.h"
#include "finetune/kernels/dynamic_map_search.h"
#include "finetune/quant/blockwise_8bit.h"
#include "finetune/train/adamw.h"
#include "finetune/train/adamw_8bit.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

// The fixture's state tensors of parameter i after the first or the last step, in our layout.
ParameterState fixture_state(const TensorFixture& tensors, size_t i, const std::string& when) {
  ParameterState state;
  for (const char* field : {"state1", "absmax1", "state2", "absmax2"}) {
    const std::string name = std::string(field) + "." + std::to_string(i) + "." + when;
    if (tensors.tensors().count(name)) state.emplace_back(field, tensors[name]);
  }
  return state;
}

TEST(AdamW8bit, CpuStepsMatchBitsandbytesBitForBit) {
  const auto fixture = reference::load_json_fixture("adamw8bit", "adamw8bit.json");
  ASSERT_EQ(fixture.at("bitsandbytes"), "0.50.2");
  ASSERT_EQ(fixture.at("cases").size(), 2u);
  double worst_parameter = 0.0;
  int64_t identical_parameters = 0, compared_parameters = 0, identical_states = 0, compared_states = 0;
  for (const auto& c : fixture.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE("case " + name);
    const TensorFixture tensors("adamw8bit", "adamw8bit_" + name + ".safetensors");
    const auto& infos = c.at("parameters");
    std::vector<at::Tensor> parameters;
    int64_t eight_bit = 0;
    for (size_t i = 0; i < infos.size(); ++i) {
      parameters.push_back(tensors["param." + std::to_string(i) + ".initial"].clone().set_requires_grad(true));
      const bool blockwise = adamw_8bit_state_layout(parameters.back()).size() == 4;
      EXPECT_EQ(blockwise, infos[i].at("eight_bit").get<bool>()) << infos[i].at("name");  // bnb's min_8bit_size
      eight_bit += blockwise;
    }
    ASSERT_GE(eight_bit, 4);
    ASSERT_LE(eight_bit, static_cast<int64_t>(parameters.size()) - 2);
    const AdamWOptions options = testing::adamw_options_of(c);
    ASSERT_GT(options.weight_decay, 0.0);
    AdamW8bit optimizer(parameters, options, /*cuda_kernel=*/false);

    const auto lrs = c.at("lrs").get<std::vector<double>>();
    ASSERT_EQ(lrs.size(), 20u);
    auto compare_state = [&](const std::string& when) {
      const auto state = optimizer.state();
      for (size_t i = 0; i < parameters.size(); ++i) {
        const auto expected = fixture_state(tensors, i, when);
        ASSERT_EQ(state.parameters[i].size(), expected.size()) << "parameter " << i;
        for (size_t k = 0; k < expected.size(); ++k) {
          ASSERT_EQ(state.parameters[i][k].first, expected[k].first);
          const auto match = same_bits(state.parameters[i][k].second, expected[k].second);
          EXPECT_TRUE(match) << expected[k].first << " of parameter " << i << " after the " << when << " step";
          identical_states += static_cast<bool>(match);
          ++compared_states;
        }
      }
    };
    for (size_t step = 0; step < lrs.size(); ++step) {
      const std::string suffix = "." + std::to_string(step);
      for (size_t i = 0; i < parameters.size(); ++i) {
        parameters[i].mutable_grad() = tensors["grad." + std::to_string(i) + suffix].clone();
      }
      optimizer.step(lrs[step]);
      EXPECT_EQ(optimizer.steps_taken(), static_cast<int64_t>(step + 1));
      for (size_t i = 0; i < parameters.size(); ++i) {
        const auto& expected = tensors["param." + std::to_string(i) + suffix];
        const auto match = same_bits(parameters[i].detach(), expected);
        EXPECT_TRUE(match) << "parameter " << i << " " << expected.sizes() << " after step " << step;
        identical_parameters += static_cast<bool>(match);
        ++compared_parameters;
        worst_parameter = std::max(worst_parameter, max_abs_difference(parameters[i].detach(), expected));
      }
      if (step == 0) compare_state("first");
    }
    compare_state("final");
  }
  RecordProperty("parameters_identical", std::to_string(identical_parameters) + "/" + std::to_string(compared_parameters));
  RecordProperty("states_identical", std::to_string(identical_states) + "/" + std::to_string(compared_states));
  RecordProperty("max_abs_error", std::to_string(worst_parameter));
}

TEST(AdamW8bit, StateIsEightBitFromMin8bitSizeOn) {
  const auto small = adamw_8bit_state_layout(at::zeros({63, 65}));  // 4095 elements
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[0].field, "state1");
  EXPECT_EQ(small[0].dtype, at::kFloat);
  EXPECT_EQ(small[1].shape, (std::vector<int64_t>{63, 65}));
  const auto large = adamw_8bit_state_layout(at::zeros({8, 600}));  // 4800 = 18 blocks + 192
  ASSERT_EQ(large.size(), 4u);
  EXPECT_EQ(large[0].field, "state1");
  EXPECT_EQ(large[0].dtype, at::kByte);
  EXPECT_EQ(large[0].shape, (std::vector<int64_t>{8, 600}));
  EXPECT_EQ(large[1].field, "absmax1");
  EXPECT_EQ(large[1].dtype, at::kFloat);
  EXPECT_EQ(large[1].shape, std::vector<int64_t>{19});
  EXPECT_EQ(large[2].field, "state2");
  EXPECT_EQ(large[3].field, "absmax2");
  EXPECT_EQ(adamw_8bit_state_layout(at::zeros({16, 256})).size(), 4u);  // exactly 4096
}

// bitsandbytes' quantize_2D as csrc/kernels.cu writes it (first level from its quadrant
// registers), on the map itself: the reference for the CUDA kernel's search.
template <bool kSigned>
unsigned char bnb_quantize_2d(const std::vector<float>& code, float x) {
  const float quadrants[3] = {code[63], code[127], code[191]};
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = kSigned ? -1.0f : 0.0f;
  float upper = 1.0f;
  float val = quadrants[1];
  int local_pivot = 1, offset = 1;
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
      local_pivot += offset;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
      local_pivot -= offset;
    }
    val = i >= 64 ? quadrants[local_pivot] : code[pivot];
    offset -= 1;
  }
  if (x > val) return x > (upper + val) * 0.5f ? upper_pivot : pivot;
  return x < (lower + val) * 0.5f ? lower_pivot : pivot;
}

template <bool kSigned>
int64_t search_mismatches(const std::vector<float>& map, const std::vector<float>& xs) {
  std::vector<float> tree(cuda_kernels::kDynamicMapSize - 1);
  for (size_t node = 0; node < tree.size(); ++node) tree[node] = cuda_kernels::search_tree_entry(map.data(), node);
  int64_t mismatches = 0;
  for (const float x : xs) {
    mismatches += cuda_kernels::quantize_in_map<kSigned>(map.data(), tree.data(), x) != bnb_quantize_2d<kSigned>(map, x);
  }
  return mismatches;
}

// The CUDA kernel's code search (kernels/dynamic_map_search.h: the map as a search tree, only the
// path kept) gives bnb's code for every map entry, every midpoint between neighbours, their float
// neighbours, random values, the ends, beyond them, +-0, +-inf and NaN.
TEST(AdamW8bit, KernelCodeSearchIsBnbsQuantize2d) {
  at::manual_seed(5);
  for (const bool is_signed : {true, false}) {
    const auto map_tensor = dynamic_map(is_signed).contiguous();
    const std::vector<float> map(map_tensor.data_ptr<float>(), map_tensor.data_ptr<float>() + 256);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> xs = {std::nanf(""), 0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, inf, -inf};
    auto with_neighbours = [&xs](float x) {
      xs.push_back(x);
      xs.push_back(std::nextafter(x, 2.0f));
      xs.push_back(std::nextafter(x, -2.0f));
    };
    for (size_t i = 0; i < map.size(); ++i) {
      with_neighbours(map[i]);
      if (i + 1 < map.size()) with_neighbours((map[i] + map[i + 1]) * 0.5f);
    }
    const auto random = (at::rand({20000}) * 2 - 1).contiguous();
    xs.insert(xs.end(), random.data_ptr<float>(), random.data_ptr<float>() + random.numel());
    const int64_t mismatches = is_signed ? search_mismatches<true>(map, xs) : search_mismatches<false>(map, xs);
    EXPECT_EQ(mismatches, 0) << (is_signed ? "signed" : "unsigned") << " map, " << xs.size() << " values";
  }
}

// Gradients for `steps` steps of a parameter set with an 8-bit and an fp32-state parameter.
struct Steps {
  std::vector<at::Tensor> initial;
  std::vector<std::vector<at::Tensor>> grads;
  Steps() {
    at::manual_seed(8);
    initial = {at::randn({40, 130}), at::randn({9, 11})};
    for (int step = 0; step < 6; ++step) grads.push_back({at::randn({40, 130}), at::randn({9, 11})});
  }
  std::vector<at::Tensor> fresh() const {
    std::vector<at::Tensor> out;
    for (const auto& t : initial) out.push_back(t.clone().set_requires_grad(true));
    return out;
  }
  void steps(std::vector<at::Tensor>& parameters, Optimizer& optimizer, int from, int to) const {
    for (int step = from; step < to; ++step) {
      for (size_t i = 0; i < parameters.size(); ++i) parameters[i].mutable_grad() = grads[step][i].clone();
      optimizer.step(1e-2 * (step + 1));
    }
  }
};

// Resuming: the state written to a safetensors file and read back into a new optimizer continues
// bit for bit.
TEST(AdamW8bit, SavedAndLoadedStateContinuesBitForBit) {
  const Steps run;
  auto straight = run.fresh();
  AdamW8bit uninterrupted(straight, AdamWOptions{}, false);
  run.steps(straight, uninterrupted, 0, 6);

  auto first = run.fresh();
  AdamW8bit before(first, AdamWOptions{}, false);
  run.steps(first, before, 0, 3);
  testing::TempDir dir;
  const auto saved = before.state();
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (size_t i = 0; i < saved.parameters.size(); ++i) {
    for (const auto& [field, tensor] : saved.parameters[i]) named.emplace_back(field + "/" + std::to_string(i), tensor);
  }
  save_tensors(dir.file("optimizer.safetensors"), named);
  const auto loaded = load_tensors(dir.file("optimizer.safetensors"));
  OptimizerState read;
  read.optimizer = kAdamW8bitName;
  read.steps = before.steps_taken();
  for (size_t i = 0; i < saved.parameters.size(); ++i) {
    ParameterState state;
    for (const auto& spec : adamw_8bit_state_layout(first[i])) {
      state.emplace_back(spec.field, loaded.at(spec.field + "/" + std::to_string(i)));
    }
    read.parameters.push_back(state);
  }

  std::vector<at::Tensor> continued;
  for (const auto& p : first) continued.push_back(p.detach().clone().set_requires_grad(true));
  AdamW8bit after(continued, AdamWOptions{}, false);
  after.load_state(read);
  EXPECT_EQ(after.steps_taken(), 3);
  run.steps(continued, after, 3, 6);
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_TRUE(same_bits(continued[i].detach(), straight[i].detach())) << i;
  const auto a = after.state(), b = uninterrupted.state();
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    for (size_t k = 0; k < a.parameters[i].size(); ++k) {
      EXPECT_TRUE(same_bits(a.parameters[i][k].second, b.parameters[i][k].second)) << a.parameters[i][k].first << " " << i;
    }
  }
}

TEST(AdamW8bit, StateOfAnotherOptimizerOrShapeIsRefused) {
  const Steps run;
  auto parameters = run.fresh();
  AdamW8bit optimizer(parameters, AdamWOptions{}, false);
  AdamW torch_adamw(run.fresh(), AdamWOptions{}, false);
  const auto other = testing::error_message([&] { optimizer.load_state(torch_adamw.state()); });
  EXPECT_NE(other.find("adamw_torch"), std::string::npos) << other;
  EXPECT_NE(other.find("adamw_8bit"), std::string::npos) << other;
  const auto reverse = testing::error_message([&] { torch_adamw.load_state(optimizer.state()); });
  EXPECT_NE(reverse.find("adamw_8bit"), std::string::npos) << reverse;

  auto wrong_absmax = optimizer.state();
  wrong_absmax.parameters[0][1].second = at::zeros({3});
  const auto absmax = testing::error_message([&] { optimizer.load_state(wrong_absmax); });
  EXPECT_NE(absmax.find("absmax1"), std::string::npos) << absmax;
  auto float_codes = optimizer.state();
  float_codes.parameters[0][0].second = at::zeros({40, 130});
  const auto codes = testing::error_message([&] { optimizer.load_state(float_codes); });
  EXPECT_NE(codes.find("state1"), std::string::npos) << codes;
  auto missing = optimizer.state();
  missing.parameters.pop_back();
  EXPECT_THROW(optimizer.load_state(missing), Error);
}

}  // namespace
}  // namespace finetune
