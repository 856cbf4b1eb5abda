// verify_params_across_processes: ranks with identical adapters pass; a rank whose parameter
// shape, name or count differs makes every rank throw (nobody is left waiting in a collective),
// and the differing rank names its first differing parameter.
#include <gtest/gtest.h>

#include "../ddp_test_helpers.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/ddp/param_verification.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::describe;
using testing::run_ranks;
using testing::run_ranks_collecting;

using Named = std::vector<std::pair<std::string, at::Tensor>>;

Named adapter(int64_t r) {
  return {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", at::zeros({r, 8})},
          {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", at::zeros({8, r})}};
}

TEST(ParameterSignature, RowsHoldNameHashDtypeAndShape) {
  const auto signature = parameter_signature(adapter(4));
  ASSERT_EQ(signature.size(), 2 * static_cast<size_t>(kSignatureColumns));
  EXPECT_NE(signature[0], signature[kSignatureColumns]);  // different names
  EXPECT_EQ(signature[1], static_cast<int64_t>(at::kFloat));
  EXPECT_EQ(std::vector<int64_t>(signature.begin() + 2, signature.begin() + kSignatureColumns),
            (std::vector<int64_t>{2, 4, 8, 0, 0}));
  EXPECT_EQ(parameter_signature(adapter(4)), signature);  // stable
  EXPECT_NE(parameter_signature(adapter(5)), signature);
}

TEST(VerifyParams, IdenticalAdaptersPass) {
  run_ranks(3, [](int, Communicator& communicator) { verify_params_across_processes(adapter(4), communicator); });
}

void expect_every_rank_fails(const std::function<Named(int)>& parameters_of_rank, int bad_rank,
                             const std::string& detail) {
  const int world = 3;
  const auto errors = run_ranks_collecting(world, 20, [&](int rank, Communicator& communicator) {
    verify_params_across_processes(parameters_of_rank(rank), communicator);
  });
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_TRUE(errors[rank]) << "rank " << rank << " did not fail";
    const auto message = describe(errors[rank]);
    EXPECT_NE(message.find("ranks " + std::to_string(bad_rank) + " differ from rank 0"), std::string::npos) << message;
    if (rank == bad_rank) {
      EXPECT_NE(message.find(detail), std::string::npos) << message;
    }
  }
}

TEST(VerifyParams, ARankWithAnotherRankFailsEverywhereNamingTheParameter) {
  expect_every_rank_fails([](int rank) { return adapter(rank == 2 ? 8 : 4); }, 2,
                          "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape [8, 8]");
}

TEST(VerifyParams, ARankWithAnotherCountFailsEverywhere) {
  expect_every_rank_fails(
      [](int rank) {
        auto parameters = adapter(4);
        if (rank == 1) parameters.emplace_back("extra.lora_A.weight", at::zeros({4, 8}));
        return parameters;
      },
      1, "holds 3 trainable parameters, rank 0 holds 2 (first extra: 'extra.lora_A.weight')");
}

TEST(VerifyParams, ARankWithAnotherNameFailsEverywhere) {
  expect_every_rank_fails(
      [](int rank) {
        auto parameters = adapter(4);
        if (rank == 1) parameters[1].first = "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight";
        return parameters;
      },
      1, "(and another name)");
}

TEST(VerifyParams, GradReducerChecksBeforeItsBroadcast) {
  const auto errors = run_ranks_collecting(2, 20, [](int rank, Communicator& communicator) {
    auto parameters = adapter(rank == 0 ? 4 : 6);
    for (auto& [name, tensor] : parameters) tensor.requires_grad_(true);
    GradReducer reducer(parameters, communicator, GradReducerOptions{});
    reducer.broadcast_parameters();
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(errors[rank]) << rank;
    EXPECT_NE(describe(errors[rank]).find("trainable parameter check"), std::string::npos) << describe(errors[rank]);
  }
}

}  // namespace
}  // namespace finetune
