// DoRA against PEFT 0.21 (LoraConfig(use_dora=True)) on CPU, an fp32 Llama with every projection
// adapted and a bf16 Qwen2 (q/k/v biases) with rsLoRA: the fresh magnitude, one projection's
// output and gradients (eval, and train with dropout drawn from the same seed), the model's
// logits, the adapter as saved, and the merged weights. Gradient checkpointing with DoRA dropout
// recomputes the same gradients. Every comparison with PEFT is bit for bit (fixtures generated
// under the tests' MKL_CBWR, as scripts/test.sh does). Fixtures: tests/reference/make_dora_fixtures.py.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "adapter_step_gradients.h"
#include "../model/tiny_config.h"
#include "../reference/tensor_fixtures.h"
#include "../test_support.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/checkpoint/merged_export.h"
#include "finetune/weights/model_weights.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/dora_adapter.h"
#include "finetune/model/device_selection.h"
#include "finetune/model/kernel_policy.h"
#include "finetune/train/loss.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

constexpr uint64_t kDropoutSeed = 1234;  // make_dora_fixtures.py's DROPOUT_SEED

struct DoraCase {
  std::string name;
  at::ScalarType dtype;
  std::vector<std::string> projections;
  std::string dir(const std::string& leaf) const { return reference::fixture_path("dora", name + "/" + leaf); }
};

std::vector<DoraCase> dora_cases() {
  std::vector<DoraCase> cases;
  const auto json = reference::load_json_fixture("dora", "cases.json");
  for (const auto& [name, c] : json.items()) {
    cases.push_back({name, select_dtype(c.at("dtype").get<std::string>(), at::kCPU),
                     c.at("projections").get<std::vector<std::string>>()});
  }
  return cases;
}

std::unique_ptr<CausalLM> base_model(const DoraCase& c) {
  auto model = std::make_unique<CausalLM>(load_model_config(c.dir("base")), c.dtype, at::kCPU);
  load_weights(*model, c.dir("base"));
  return model;
}

// The base model with PEFT's saved DoRA adapter attached and loaded, as --init_adapter does.
std::unique_ptr<CausalLM> model_with_peft_adapter(const DoraCase& c) {
  auto model = base_model(c);
  const LoraConfig config = read_adapter_config(c.dir("adapter"));
  EXPECT_TRUE(config.use_dora);
  attach_lora(*model, config, /*random_state=*/0);
  load_adapter_weights(*model, c.dir("adapter"));
  return model;
}

const Linear& linear_named(const CausalLM& model, const std::string& name) {
  for (const auto& [linear_name, linear] : model.named_linears()) {
    if (linear_name == name) return *linear;
  }
  throw std::runtime_error("no projection " + name);
}

TEST(DoraAdapter, FreshMagnitudeIsPeftsRowNormOfTheBaseWeight) {
  for (const auto& c : dora_cases()) {
    SCOPED_TRACE("case " + c.name);
    auto model = base_model(c);
    const auto trainable = attach_lora(*model, read_adapter_config(c.dir("adapter")), /*random_state=*/7);
    const TensorFixture peft(c.dir("init_magnitude.safetensors"));
    size_t compared = 0;
    for (const auto& [name, tensor] : trainable) {
      if (!ends_with(name, ".lora_magnitude_vector")) continue;
      ++compared;
      EXPECT_TRUE(tensor.requires_grad()) << name;
      EXPECT_TRUE(same_bits(tensor.detach(), peft[name])) << name;
    }
    EXPECT_EQ(compared, peft.tensors().size());
  }
}

TEST(DoraAdapter, ProjectionOutputAndGradientsEqualPeft) {
  double worst = 0.0;
  int compared = 0;
  for (const auto& c : dora_cases()) {
    auto model = model_with_peft_adapter(c);
    const TensorFixture peft(c.dir("projections.safetensors"));
    for (const auto& projection : c.projections) {
      const Linear& linear = linear_named(*model, projection);
      const auto* dora = dynamic_cast<const DoraAdapter*>(linear.adapter.get());
      ASSERT_NE(dora, nullptr) << projection;
      const std::vector<std::pair<std::string, at::Tensor>> parameters = {
          {"lora_A", dora->low_rank.lora_A}, {"lora_B", dora->low_rank.lora_B},
          {"lora_magnitude_vector", dora->lora_magnitude_vector}};
      for (const bool training : {false, true}) {
        const std::string key = projection + (training ? ".train" : ".eval");
        SCOPED_TRACE("case " + c.name + ", " + key);
        for (auto [name, tensor] : parameters) tensor.mutable_grad() = at::Tensor();
        // PEFT's x requires grad, which decides how at::matmul folds the batch dimensions.
        const auto x = peft[projection + ".x"].clone().requires_grad_(true);
        seed_default_generator(kDropoutSeed);
        const auto y = linear_forward(linear, x, training);
        y.backward(peft[projection + ".grad_output"]);
        std::vector<std::pair<std::string, at::Tensor>> results = {{"y", y.detach()}, {"grad_x", x.grad()}};
        for (const auto& [name, tensor] : parameters) results.emplace_back("grad." + name, tensor.grad());
        for (const auto& [name, ours] : results) {
          EXPECT_TRUE(same_bits(ours, peft[key + "." + name])) << name;
          worst = std::max(worst, max_abs_difference(ours, peft[key + "." + name]));
          ++compared;
        }
      }
      // Dropout really drew a mask: the train output differs from the eval one.
      EXPECT_FALSE(at::equal(peft[projection + ".train.y"], peft[projection + ".eval.y"]));
    }
  }
  EXPECT_EQ(compared, 2 * 2 * 2 * 5);  // cases x projections x modes x tensors
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(DoraAdapter, ModelLogitsEqualPeft) {
  for (const auto& c : dora_cases()) {
    SCOPED_TRACE("case " + c.name);
    at::NoGradGuard no_grad;
    const TensorFixture peft(c.dir("logits.safetensors"));
    const auto& ids = peft["input_ids"];
    const auto positions = at::arange(ids.size(1), at::kLong).repeat({ids.size(0), 1});
    const auto logits_of = [&](const CausalLM& model) {
      return model.lm_head(model.forward_hidden(ids, positions, AttentionMask{}, ForwardOptions{}));
    };
    // The base model alone equals transformers bit for bit too, so the adapter is held to that.
    const auto base_logits = logits_of(*base_model(c));
    const auto logits = logits_of(*model_with_peft_adapter(c));
    EXPECT_TRUE(same_bits(base_logits, peft["base_logits"])) << "base model";
    EXPECT_TRUE(same_bits(logits, peft["logits"])) << "with the DoRA adapter";
    EXPECT_FALSE(at::equal(peft["logits"], peft["base_logits"]));
    const double base_error = max_abs_difference(base_logits, peft["base_logits"]);
    const double error = max_abs_difference(logits, peft["logits"]);
    RecordProperty(c.name + "_max_abs_error", std::to_string(error));
    RecordProperty(c.name + "_base_max_abs_error", std::to_string(base_error));
  }
}

TEST(DoraAdapter, SavedAdapterIsPeftsFile) {
  for (const auto& c : dora_cases()) {
    SCOPED_TRACE("case " + c.name);
    auto model = model_with_peft_adapter(c);
    const LoraConfig config = read_adapter_config(c.dir("adapter"));
    testing::TempDir out;
    save_adapter(*model, config, c.dir("base"), out.str());
    const TensorFixture ours(out.file("adapter_model.safetensors"));
    const TensorFixture peft(c.dir("adapter/adapter_model.safetensors"));
    std::set<std::string> our_names, peft_names;
    for (const auto& [name, tensor] : ours.tensors()) {
      our_names.insert(name);
      EXPECT_TRUE(same_bits(tensor, peft[name])) << name;
    }
    for (const auto& [name, tensor] : peft.tensors()) peft_names.insert(name);
    EXPECT_EQ(our_names, peft_names);
    EXPECT_TRUE(peft_names.count("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"));
    std::ifstream in(out.file("adapter_config.json"));
    const auto json = nlohmann::json::parse(in);
    EXPECT_EQ(json.at("use_dora"), true);
    EXPECT_EQ(json.at("peft_type"), "LORA");
  }
}

TEST(DoraAdapter, MergedExportEqualsPeftMergeAndUnload) {
  double worst = 0.0;
  for (const auto& c : dora_cases()) {
    SCOPED_TRACE("case " + c.name);
    auto model = model_with_peft_adapter(c);
    testing::TempDir out;
    export_merged(*model, c.dir("base"), out.file("merged"), /*quantize_4bit=*/false);
    const TensorFixture ours(out.file("merged") + "/model.safetensors");
    const TensorFixture peft(c.dir("peft_merged/model.safetensors"));
    const TensorFixture base(c.dir("base/model.safetensors"));
    std::set<std::string> our_names, peft_names;
    int changed = 0;
    for (const auto& [name, tensor] : ours.tensors()) {
      our_names.insert(name);
      EXPECT_TRUE(same_bits(tensor, peft[name])) << name;
      worst = std::max(worst, max_abs_difference(tensor, peft[name]));
      changed += !at::equal(tensor, base[name]);
    }
    for (const auto& [name, tensor] : peft.tensors()) peft_names.insert(name);
    EXPECT_EQ(our_names, peft_names);
    EXPECT_EQ(changed, static_cast<int>(lora_parameters(*model).size() / 3)) << "exactly the adapted weights change";
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(DoraAdapter, GradientCheckpointingWithDropoutRecomputesTheSameGradients) {
  CausalLM model(tiny_llama_config({16, 32, 48, 3, 4, 2, 8}), at::kFloat, at::kCPU);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(2);
  randomize_base(model, generator);
  LoraConfig lora = small_lora(0.3, {"q_proj", "v_proj", "up_proj", "down_proj"});
  lora.use_dora = true;
  const auto trainable = attach_lora(model, lora, 1);
  ASSERT_EQ(trainable.size(), 3u * 4u * 3u);  // layers x targets x (A, B, magnitude)
  for (auto& [name, tensor] : trainable) {
    if (!ends_with(name, "lora_magnitude_vector")) tensor.detach().normal_(0.0, 0.2, generator);
  }
  const auto plain = adapter_step_gradients(model, false);
  const auto recomputed = adapter_step_gradients(model, true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::equal(plain[i], recomputed[i])) << trainable[i].first;
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << trainable[i].first;
  }
  EXPECT_FALSE(at::equal(plain[0], adapter_step_gradients(model, false, /*seed=*/12)[0]));  // dropout is on
}

// One DoRA projection (with a bias and dropout off) on `device`: its output and gradients for x.
std::vector<at::Tensor> projection_on(const at::Device& device, at::ScalarType dtype, const KernelPolicy& kernels) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto cpu = at::TensorOptions().dtype(at::kFloat);
  Linear linear;
  linear.weight = (at::randn({96, 64}, generator, cpu) * 0.1).to(device, dtype);  // (out, in)
  linear.bias = (at::randn({96}, generator, cpu) * 0.1).to(device, dtype);
  LoraAdapter lora;
  lora.lora_A = (at::randn({8, 64}, generator, cpu) * 0.2).to(device).requires_grad_(true);
  lora.lora_B = (at::randn({96, 8}, generator, cpu) * 0.2).to(device).requires_grad_(true);
  lora.scaling = 2.0;
  lora.kernels = kernels;
  auto dora = std::make_unique<DoraAdapter>(std::move(lora), linear);
  const auto magnitude = dora->lora_magnitude_vector;
  linear.adapter = std::move(dora);
  const auto x = at::randn({3, 7, 64}, generator, cpu).to(device, dtype).requires_grad_(true);
  const auto y = linear_forward(linear, x, /*training=*/true);
  y.backward(at::randn({3, 7, 96}, generator, cpu).to(device, dtype));
  const auto* adapter = static_cast<const DoraAdapter*>(linear.adapter.get());
  return {y.detach().cpu(), x.grad().cpu(), adapter->low_rank.lora_A.grad().cpu(),
          adapter->low_rank.lora_B.grad().cpu(), magnitude.grad().cpu()};
}

// On the GPU DoRA runs the same expression (the kernel policy's half-precision LoRA path is not
// taken): its results equal the CPU's up to the two devices' GEMM roundings.
TEST(DoraAdapter, CudaRunsTheSameExpressionAsTheCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    KernelPolicy half_precision_lora;
    half_precision_lora.half_precision_lora = true;  // as on CUDA in bf16: DoRA must ignore it
    const auto cpu = projection_on(at::kCPU, dtype, KernelPolicy{});
    const auto cuda = projection_on(at::Device(at::kCUDA, 0), dtype, half_precision_lora);
    const double bound = dtype == at::kFloat ? 1e-5 : 1e-2;  // relative, norm-wise
    for (size_t i = 0; i < cpu.size(); ++i) {
      const auto expected = cpu[i].to(at::kDouble);
      const double error = ((cuda[i].to(at::kDouble) - expected).norm() / expected.norm()).item<double>();
      EXPECT_LE(error, bound) << "result " << i;
    }
  }
}

}  // namespace
}  // namespace finetune
