// Merged export against PEFT: a PEFT adapter with non-zero lora_A and lora_B is attached to its
// base model (read_adapter_config + attach_lora + load_adapter_weights), export_merged writes the
// model, and every written tensor equals what PEFT's merge_and_unload() + save_pretrained wrote,
// bit for bit: an fp32 Llama with every projection adapted, and a bf16 Qwen3 with tied
// embeddings and rsLoRA (fp32 adapters on a bf16 base, the merge rounding once to bf16).
// Fixtures: tests/reference/make_checkpoint_fixtures.py.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "../test_support.h"
#include "../reference/tensor_fixtures.h"
#include "finetune/checkpoint/merged_export.h"
#include "finetune/checkpoint/adapter_io.h"
#include "finetune/lora/attach_lora.h"
#include "finetune/lora/lora_adapter.h"
#include "finetune/model/device_selection.h"
#include "finetune/weights/model_weights.h"

namespace finetune {
namespace {

using reference::max_abs_difference;
using reference::same_bits;
using reference::TensorFixture;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return nlohmann::json::parse(in);
}

TEST(MergedExport, EqualsPeftMergeAndUnload) {
  const auto cases = reference::load_json_fixture("checkpoint", "cases.json");
  ASSERT_EQ(cases.size(), 2u);
  double worst = 0.0;
  for (const auto& [name, c] : cases.items()) {
    SCOPED_TRACE("case " + name);
    const std::string base_dir = reference::fixture_path("checkpoint", name + "/base");
    const std::string adapter_dir = reference::fixture_path("checkpoint", name + "/adapter");
    const at::ScalarType dtype = select_dtype(c.at("dtype").get<std::string>(), at::kCPU);
    CausalLM model(load_model_config(base_dir), dtype, at::kCPU);
    load_weights(model, base_dir);
    attach_lora(model, read_adapter_config(adapter_dir), /*random_state=*/0);
    load_adapter_weights(model, adapter_dir);
    int adapted = 0;
    for (auto& [linear_name, linear] : model.named_linears()) {
      const auto* lora = dynamic_cast<const LoraAdapter*>(linear->adapter.get());
      if (lora == nullptr) continue;
      ++adapted;
      ASSERT_GT(lora->lora_A.abs().min().item<double>(), 0.0) << linear_name;
      ASSERT_GT(lora->lora_B.abs().min().item<double>(), 0.0) << linear_name;
    }
    ASSERT_GT(adapted, 0);

    testing::TempDir out;
    const std::string merged_dir = out.file("merged");
    export_merged(model, base_dir, merged_dir, /*quantize_4bit=*/false);
    const TensorFixture ours(merged_dir + "/model.safetensors");
    const TensorFixture peft("checkpoint", name + "/peft_merged/model.safetensors");
    const TensorFixture base("checkpoint", name + "/base/model.safetensors");
    std::set<std::string> our_names, peft_names;
    int changed = 0;
    for (const auto& [tensor_name, tensor] : ours.tensors()) {
      our_names.insert(tensor_name);
      EXPECT_TRUE(same_bits(tensor, peft[tensor_name])) << tensor_name;
      worst = std::max(worst, max_abs_difference(tensor, peft[tensor_name]));
      changed += !at::equal(tensor, base[tensor_name]);
    }
    for (const auto& [tensor_name, tensor] : peft.tensors()) peft_names.insert(tensor_name);
    EXPECT_EQ(our_names, peft_names);
    EXPECT_EQ(changed, adapted) << "exactly the adapted weights differ from the base";
    EXPECT_EQ(read_json(merged_dir + "/config.json").at("dtype"),
              read_json(reference::fixture_path("checkpoint", name + "/peft_merged/config.json")).at("dtype"));
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

}  // namespace
}  // namespace finetune
