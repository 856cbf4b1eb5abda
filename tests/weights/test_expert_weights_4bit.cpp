// 4-bit expert stacks at load (weights/expert_weights_4bit.h) against bitsandbytes: every
// per-expert checkpoint tensor of a tiny Qwen3-MoE and Mixtral (tests/reference/make_moe_fixtures.py)
// quantized as bitsandbytes' quantize_4bit(W, blocksize=64, compress_statistics=True, "nf4") makes
// it on the CPU, byte for byte (packed codes, absmax codes, nested absmax, offset, the saved quant
// state); the 16-bit stacks are never materialised, and the stacks' dense_weight() is the pieces
// dequantized into their rows.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "../reference/tensor_fixtures.h"
#include "finetune/model/moe_names.h"
#include "finetune/quant/nf4_stack.h"
#include "finetune/quant/nf4_state_dict.h"
#include "finetune/weights/model_weights.h"

namespace finetune {
namespace {

using reference::same_bits;
using reference::TensorFixture;

const char* const kCases[] = {"qwen3_moe_top2", "qwen3_moe_top1_step2", "mixtral_top2", "mixtral_top1_window"};

std::unique_ptr<CausalLM> load_4bit(const std::string& dir) {
  auto model = std::make_unique<CausalLM>(load_model_config(dir), at::kFloat, at::kCPU, /*projections_4bit=*/true);
  load_weights(*model, dir);
  return model;
}

TEST(ExpertWeights4bit, EveryExpertTensorIsQuantizedAsBitsandbytesQuantizesIt) {
  for (const std::string name : kCases) {
    SCOPED_TRACE(name);
    const auto model = load_4bit(reference::fixture_path("moe", name));
    const TensorFixture expected("moe", name + "_expert_nf4.safetensors");
    std::set<std::string> compared;
    for (const auto& [stack_name, stack] : model->named_expert_stacks()) {
      ASSERT_TRUE(stack->is_4bit()) << stack_name;
      EXPECT_TRUE(stack->weight.is_meta()) << stack_name;  // no 16-bit copy is kept
      const auto pieces = checkpoint_pieces(model->architecture(), model->config(), stack_name);
      ASSERT_EQ(stack->weight_4bit->pieces.size(), pieces.size()) << stack_name;
      for (size_t i = 0; i < pieces.size(); ++i) {
        const auto& piece = stack->weight_4bit->pieces[i];
        EXPECT_EQ(piece.expert, pieces[i].expert);
        EXPECT_EQ(piece.row_begin, pieces[i].row_begin);
        for (const auto& [suffix, tensor] : nf4_state_dict(piece.weight)) {
          EXPECT_TRUE(same_bits(tensor, expected[pieces[i].name + suffix])) << pieces[i].name + suffix;
          compared.insert(pieces[i].name + suffix);
        }
      }
    }
    std::set<std::string> all;
    for (const auto& [tensor_name, tensor] : expected.tensors()) all.insert(tensor_name);
    EXPECT_EQ(compared, all);  // every expert tensor bitsandbytes quantized, every statistic of it
  }
}

TEST(ExpertWeights4bit, DenseWeightIsThePiecesDequantizedIntoTheirRows) {
  const std::string name = "mixtral_top2";
  const auto model = load_4bit(reference::fixture_path("moe", name));
  for (const auto& [stack_name, stack] : model->named_expert_stacks()) {
    const auto dense = stack->dense_weight();  // (E, out, in)
    ASSERT_EQ(dense.sizes(), stack->weight.sizes());
    EXPECT_EQ(dense.scalar_type(), at::kFloat);
    for (const auto& piece : stack->weight_4bit->pieces) {
      EXPECT_TRUE(same_bits(dense[piece.expert].narrow(0, piece.row_begin, piece.weight.shape[0]),
                            dequantize_nf4(piece.weight, at::kFloat)));
    }
  }
}

}  // namespace
}  // namespace finetune
