#include <gtest/gtest.h>

#include <algorithm>

#include "../ddp_test_helpers.h"
#include "finetune/ddp/backends.h"
#include "finetune/ddp/grad_reducer.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using testing::describe;
using testing::run_ranks;
using testing::run_ranks_collecting;

const auto kFloat = at::TensorOptions().dtype(at::kFloat);

// Tiny "adapter": four parameters, rank-independent values.
std::vector<std::pair<std::string, at::Tensor>> make_parameters() {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"layers.0.lora_A", {3, 4}}, {"layers.0.lora_B", {5}}, {"layers.1.lora_A", {2, 3}}, {"layers.1.lora_B", {7}}};
  std::vector<std::pair<std::string, at::Tensor>> parameters;
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor value = at::arange(0, 1, 1.0 / 64, kFloat).narrow(0, 0, c10::multiply_integers(shapes[i].second));
    parameters.emplace_back(shapes[i].first, value.reshape(shapes[i].second).clone().requires_grad_(true));
  }
  return parameters;
}

// d loss / d parameter i = coefficient(i): small integers, so every sum is exact in float32.
at::Tensor coefficient(size_t i, const at::Tensor& parameter) {
  return (at::arange(parameter.numel(), kFloat) + static_cast<double>(i + 1)).reshape(parameter.sizes());
}

// loss = sum_i sum(p_i * scale * c_i); the terms are built in a rank-dependent order so that
// gradients land (and buckets become ready) in a different order on every rank.
void backward(const std::vector<std::pair<std::string, at::Tensor>>& parameters, double scale, int rank,
              const std::vector<size_t>& skip = {}) {
  std::vector<size_t> order(parameters.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = rank % 2 == 0 ? k : order.size() - 1 - k;
  at::Tensor loss = at::zeros({}, kFloat);
  for (size_t i : order) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    loss = loss + (parameters[i].second * coefficient(i, parameters[i].second) * scale).sum();
  }
  loss.backward();
}

GradReducerOptions small_buckets() {
  GradReducerOptions options;
  options.first_bucket_bytes = 32;  // 8 floats, then 10: one bucket per parameter here
  options.bucket_cap_bytes = 40;
  return options;
}

TEST(GradReducer, AccumulatesWithNoSyncThenReducesTheGlobalSum) {
  const int world = 3;
  run_ranks(world, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    GradReducer reducer(parameters, communicator, small_buckets());
    ASSERT_EQ(reducer.buckets(), (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));

    std::vector<void*> grad_pointers;
    for (auto& [name, p] : parameters) {
      ASSERT_TRUE(p.grad().defined()) << name;
      grad_pointers.push_back(p.grad().data_ptr());
    }
    const double local = rank + 1;
    // Two no_sync micro-steps: purely local accumulation.
    reducer.prepare_for_backward(false);
    backward(parameters, local * 1, rank);
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * local)) << i;
    }
    reducer.prepare_for_backward(false);
    backward(parameters, local * 2, rank);
    reducer.prepare_for_backward(true);
    backward(parameters, local * 3, rank);
    reducer.finalize();
    // sum over ranks of (r+1) * (1+2+3) = 6 * 6
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& grad = parameters[i].second.grad();
      EXPECT_TRUE(grad.equal(coefficient(i, parameters[i].second) * 36.0)) << parameters[i].first;
      EXPECT_EQ(grad.data_ptr(), grad_pointers[i]) << "autograd replaced the bucket view of " << parameters[i].first;
    }

    // Next optimizer step: zero_grad keeps the views, one synchronised micro-step.
    reducer.zero_grad();
    for (size_t i = 0; i < parameters.size(); ++i) EXPECT_EQ(parameters[i].second.grad().sum().item<float>(), 0.f);
    reducer.prepare_for_backward(true);
    backward(parameters, local, rank);
    reducer.finalize();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * 6.0)) << i;
      EXPECT_EQ(parameters[i].second.grad().data_ptr(), grad_pointers[i]);
    }
  });
}

TEST(GradReducer, GradientsOfOneBucketShareItsFlatBuffer) {
  auto communicator = make_local_communicator();
  auto parameters = make_parameters();
  GradReducerOptions options;  // default caps: all four in one bucket
  GradReducer reducer(parameters, *communicator, options);
  ASSERT_EQ(reducer.buckets(), (std::vector<std::vector<size_t>>{{3, 2, 1, 0}}));
  const at::Tensor& last = parameters[3].second.grad();
  for (auto& [name, p] : parameters) {
    EXPECT_TRUE(p.grad().storage().is_alias_of(last.storage())) << name;
  }
  // Reverse order in the buffer: parameter 3 first, then 2 (7 elements later).
  EXPECT_EQ(static_cast<char*>(parameters[2].second.grad().data_ptr()) - static_cast<char*>(last.data_ptr()),
            7 * static_cast<int64_t>(sizeof(float)));
  reducer.prepare_for_backward(true);
  backward(parameters, 2.0, 0);
  reducer.finalize();
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * 2.0));
    EXPECT_TRUE(parameters[i].second.grad().storage().is_alias_of(last.storage()));
  }
}

// Gradient checkpointing: the parameter's gradient is produced by a backward nested inside the
// outer backward (recomputation). The post-accumulate hook must still fire.
// Hidden from Function::apply, so the outer graph gets no edge to the weight (like reentrant
// checkpointing, whose only inputs are activations).
struct HiddenWeight {
  at::Tensor tensor;
};

struct RecomputeInBackward : public torch::autograd::Function<RecomputeInBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input, HiddenWeight weight) {
    ctx->saved_data["weight"] = weight.tensor;
    ctx->save_for_backward({input});
    at::NoGradGuard no_grad;
    return (input * weight.tensor).sum();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    at::Tensor weight = ctx->saved_data["weight"].toTensor();
    at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor recomputed;
    {
      at::AutoGradMode enable(true);
      recomputed = (input * weight).sum();
    }
    torch::autograd::backward({recomputed}, {grad_outputs[0]});
    return {input.grad(), torch::autograd::Variable()};
  }
};

TEST(GradReducer, HooksFireInNestedBackwardOfCheckpointing) {
  run_ranks(2, [&](int rank, Communicator& communicator) {
    at::Tensor weight = at::full({4}, 1.0, kFloat).requires_grad_(true);
    at::Tensor other = at::full({2}, 1.0, kFloat).requires_grad_(true);
    GradReducer reducer({{"checkpointed.weight", weight}, {"plain.weight", other}}, communicator, small_buckets());
    reducer.prepare_for_backward(true);
    at::Tensor input = at::arange(4, kFloat).requires_grad_(true) * static_cast<double>(rank + 1);
    at::Tensor loss = RecomputeInBackward::apply(input, HiddenWeight{weight}) + (other * 3.0).sum();
    loss.backward();
    reducer.finalize();
    // d/dweight = input = arange(4) * (rank+1), summed over ranks: arange(4) * 3
    EXPECT_TRUE(weight.grad().equal(at::arange(4, kFloat) * 3.0)) << weight.grad();
    EXPECT_TRUE(other.grad().equal(at::full({2}, 6.0, kFloat)));
  });
}

// Note [Every rank decides the same]: the verdict comes from the all-reduced bitmap, so every rank
// throws the same error itself (none relays another's abort), naming the parameter and the ranks
// that missed it, also when only one rank missed it.
TEST(GradReducer, UnusedParameterIsNamed) {
  for (const bool both_ranks_skip : {true, false}) {
    SCOPED_TRACE(both_ranks_skip ? "both ranks skip it" : "only rank 1 skips it");
    const auto errors = run_ranks_collecting(2, 20, [&](int rank, Communicator& communicator) {
      auto parameters = make_parameters();
      GradReducer reducer(parameters, communicator, small_buckets());
      reducer.prepare_for_backward(true);
      std::vector<size_t> skip;
      if (both_ranks_skip || rank == 1) skip.push_back(1);
      backward(parameters, 1.0, rank, skip);
      reducer.finalize();
    });
    const std::string missed_on = both_ranks_skip ? "rank 0, 1" : "rank 1";
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(errors[rank]) << rank;
      const std::string message = describe(errors[rank]);
      EXPECT_EQ(message, "rank " + std::to_string(rank) +
                             ": gradient reduction found 1 parameter(s) that received no gradient: layers.0.lora_B (on " +
                             missed_on + ") (not part of the loss? enable find_unused_parameters to reduce zeros for them)");
      try {
        std::rethrow_exception(errors[rank]);
      } catch (const DistributedError&) {
      } catch (...) {
        ADD_FAILURE() << "not a DistributedError: " << message;
      }
    }
  }
}

// Note [Deferred verdict]: the bitmap of a step is read at the next finalize() (or settle()), so
// the step itself completes on every rank, its gradients reduced, and every rank throws the same
// error one step later.
TEST(GradReducer, DeferredVerdictThrowsTheSameErrorOneStepLater) {
  for (const bool settle_instead_of_a_step : {false, true}) {
    SCOPED_TRACE(settle_instead_of_a_step ? "settle()" : "the next finalize()");
    const auto errors = run_ranks_collecting(2, 20, [&](int rank, Communicator& communicator) {
      auto parameters = make_parameters();
      GradReducerOptions options = small_buckets();
      options.defer_verdict = true;
      GradReducer reducer(parameters, communicator, options);
      reducer.prepare_for_backward(true);
      backward(parameters, 1.0, rank);
      reducer.finalize();
      reducer.settle();  // nothing was missed: no error
      reducer.zero_grad();
      reducer.prepare_for_backward(true);
      backward(parameters, 1.0, rank, rank == 1 ? std::vector<size_t>{1} : std::vector<size_t>{});
      reducer.finalize();  // the step completes: its verdict is still on its way
      EXPECT_TRUE(parameters[0].second.grad().equal(coefficient(0, parameters[0].second) * 2.0));
      EXPECT_TRUE(parameters[1].second.grad().equal(coefficient(1, parameters[1].second)));  // rank 0's only
      if (settle_instead_of_a_step) {
        reducer.settle();
      } else {
        reducer.zero_grad();
        reducer.prepare_for_backward(true);
        backward(parameters, 1.0, rank);  // launches this step's bucket all-reduces
        // A rank that throws reports its failure to its peers (Communicator::abort), and a peer
        // whose monitor reads it refuses its next collective with "rank R exited with an error:
        // ...". Without this barrier a peer still in the backward above (under load) would report
        // that instead of its own, identical verdict.
        communicator.barrier("every rank launched the step's collectives");
        reducer.finalize();
      }
      ADD_FAILURE() << "rank " << rank << ": the deferred verdict did not throw";
    });
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(errors[rank]) << rank;
      EXPECT_EQ(describe(errors[rank]),
                "rank " + std::to_string(rank) +
                    ": gradient reduction found 1 parameter(s) that received no gradient: layers.0.lora_B (on rank 1) "
                    "(not part of the loss? enable find_unused_parameters to reduce zeros for them)");
    }
  }
}

// Note [Graphed micro-steps]: hooks run while a graph is captured, not when it is replayed. The
// recorded backward feeds the parameters it names and counts nothing; a replay (here: the same
// in-place additions a replayed AccumulateGrad makes) is announced with those flags, and
// finalize() reduces the global sum.
TEST(GradReducer, RecordedGradientsAreReducedAfterReplays) {
  run_ranks(3, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    GradReducer reducer(parameters, communicator, small_buckets());
    const double local = rank + 1;
    reducer.prepare_for_backward(false);
    reducer.begin_recording();
    backward(parameters, local, rank, /*skip=*/{2});  // the "capture" (an eager backward: it adds once)
    const std::vector<bool> fed = reducer.end_recording();
    EXPECT_EQ(fed, (std::vector<bool>{true, true, false, true}));
    for (int replay = 0; replay < 2; ++replay) {
      reducer.prepare_for_backward(/*sync=*/replay == 1);
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (fed[i]) parameters[i].second.grad().add_(coefficient(i, parameters[i].second) * local);
      }
      reducer.add_replayed_gradients(fed);
    }
    // Parameter 2 never had a gradient: without find_unused_parameters finalize names it.
    EXPECT_THROW(reducer.finalize(), DistributedError);
  });
  run_ranks(3, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    GradReducer reducer(parameters, communicator, small_buckets());
    const double local = rank + 1;
    reducer.prepare_for_backward(false);
    reducer.begin_recording();
    backward(parameters, local, rank);
    const std::vector<bool> fed = reducer.end_recording();
    EXPECT_EQ(fed, std::vector<bool>(4, true));
    reducer.prepare_for_backward(true);
    for (size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].second.grad().add_(coefficient(i, parameters[i].second) * local);
    }
    reducer.add_replayed_gradients(fed);
    reducer.finalize();
    // Two additions of (r + 1) * c_i on every rank, summed over ranks 0..2: 2 * 6 * c_i.
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * 12.0))
          << parameters[i].first;
    }
  });
}

// Forwards to the rank's communicator and notes, in launch order, each bucket all-reduce launched
// after a device event (which bucket, which event); on the CPU the work is already done, so
// forwarding it as an ordinary all-reduce is what waiting for the event would give.
class EventLaunchLog : public Communicator {
 public:
  explicit EventLaunchLog(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::unique_ptr<CollectiveWork> all_reduce_async(at::Tensor& tensor, const std::string& what) override {
    launches.push_back({what, nullptr});
    return inner_.all_reduce_async(tensor, what);
  }
  std::unique_ptr<CollectiveWork> all_reduce_after(at::Tensor& tensor, const std::string& what,
                                                   const ReadyEvent& ready) override {
    launches.push_back({what, ready.cuda_event});
    return inner_.all_reduce_async(tensor, what);
  }
  void broadcast(at::Tensor& tensor, int root, const std::string& what) override { inner_.broadcast(tensor, root, what); }
  void barrier(const std::string& what) override { inner_.barrier(what); }
  void finish() override { inner_.finish(); }
  void publish(const std::string& key, const std::string& value) override { inner_.publish(key, value); }
  std::string wait_for(const std::string& key, const std::string& what) override { return inner_.wait_for(key, what); }
  void abort(const std::string& reason) override { inner_.abort(reason); }

  std::vector<std::pair<std::string, void*>> launches;  // (what, the event waited for or null)

 private:
  Communicator& inner_;
};

// Note [Bucket all-reduces during a replay]: the recording names each bucket as its last gradient
// lands; a synchronised replay launches, in bucket order, the buckets it fed completely after
// their events, up to the first it did not feed; finalize() launches the rest (those fed still
// after their events), and the sums are the same. A no_sync replay launches nothing.
TEST(GradReducer, ReplayLaunchesTheBucketsItFedAfterTheirEvents) {
  run_ranks(3, [&](int rank, Communicator& communicator) {
    EventLaunchLog log(communicator);
    auto parameters = make_parameters();
    GradReducerOptions options = small_buckets();  // buckets {3} {2} {1} {0}
    options.find_unused_parameters = true;
    GradReducer reducer(parameters, log, options);
    const double local = rank + 1;
    std::vector<size_t> fed_buckets;
    reducer.prepare_for_backward(false);
    reducer.begin_recording([&](size_t bucket) { fed_buckets.push_back(bucket); });
    backward(parameters, local, rank, /*skip=*/{2});  // the "capture": bucket 1 stays incomplete
    const std::vector<bool> fed = reducer.end_recording();
    std::sort(fed_buckets.begin(), fed_buckets.end());
    EXPECT_EQ(fed_buckets, (std::vector<size_t>{0, 2, 3}));
    std::vector<int> events(4);
    std::vector<ReadyEvent> ready(4);
    for (size_t b : fed_buckets) ready[b].cuda_event = &events[b];

    auto replay = [&](bool sync) {
      reducer.prepare_for_backward(sync);
      for (size_t i = 0; i < parameters.size(); ++i) {
        if (fed[i]) parameters[i].second.grad().add_(coefficient(i, parameters[i].second) * local);
      }
      reducer.add_replayed_gradients(fed, ready);
    };
    replay(/*sync=*/false);
    EXPECT_TRUE(log.launches.empty());
    replay(/*sync=*/true);
    ASSERT_EQ(log.launches.size(), 1u);  // bucket 0 only: bucket 1 was not fed
    EXPECT_NE(log.launches[0].first.find("bucket 0 "), std::string::npos) << log.launches[0].first;
    EXPECT_EQ(log.launches[0].second, &events[0]);
    reducer.finalize();
    // Then bucket 1 after the caller's stream, buckets 2 and 3 (fed) still after their events, then
    // the used-parameter bitmap.
    ASSERT_EQ(log.launches.size(), 5u);
    for (size_t b = 1; b < 4; ++b) {
      EXPECT_NE(log.launches[b].first.find("bucket " + std::to_string(b) + " "), std::string::npos);
      EXPECT_EQ(log.launches[b].second, b == 1 ? nullptr : &events[b]) << b;
    }
    EXPECT_NE(log.launches[4].first.find("bitmap"), std::string::npos) << log.launches[4].first;
    // The capture and the synchronised replay added; the no_sync replay too: 3 (r + 1) c_i, summed
    // over ranks 0..2: 18 c_i; parameter 2 got nothing anywhere.
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor expected = i == 2 ? at::zeros({2, 3}, kFloat) : coefficient(i, parameters[i].second) * 18.0;
      EXPECT_TRUE(parameters[i].second.grad().equal(expected)) << parameters[i].first;
    }

    // A graph that feeds every bucket: all four after their events, in bucket order.
    reducer.zero_grad();
    log.launches.clear();
    reducer.prepare_for_backward(false);
    reducer.begin_recording([&](size_t bucket) { ready[bucket].cuda_event = &events[bucket]; });
    backward(parameters, local, rank);
    const std::vector<bool> all = reducer.end_recording();
    reducer.prepare_for_backward(true);
    for (size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].second.grad().add_(coefficient(i, parameters[i].second) * local);
    }
    reducer.add_replayed_gradients(all, ready);
    ASSERT_EQ(log.launches.size(), 4u);
    for (size_t b = 0; b < 4; ++b) {
      EXPECT_NE(log.launches[b].first.find("bucket " + std::to_string(b) + " "), std::string::npos);
      EXPECT_EQ(log.launches[b].second, &events[b]);
    }
    reducer.finalize();
    for (size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * 12.0))
          << parameters[i].first;
    }
  });
}

TEST(GradReducer, FindUnusedParametersReducesZeros) {
  run_ranks(2, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    GradReducerOptions options = small_buckets();
    options.find_unused_parameters = true;
    GradReducer reducer(parameters, communicator, options);
    parameters[1].second.grad().fill_(100.0);  // stale values must not leak into the reduction
    reducer.prepare_for_backward(true);
    backward(parameters, rank + 1.0, rank, /*skip=*/{1});
    reducer.finalize();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor expected = i == 1 ? at::zeros({5}, kFloat) : coefficient(i, parameters[i].second) * 3.0;
      EXPECT_TRUE(parameters[i].second.grad().equal(expected)) << parameters[i].first;
    }
  });
}

// A mixture-of-experts expert that no token of this rank reached: the rank contributes zeros (its
// stale values never leak) and the sum is the other rank's gradient.
TEST(GradReducer, FindUnusedParametersReducesZerosFromTheRankThatMissedIt) {
  run_ranks(2, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    GradReducerOptions options = small_buckets();
    options.find_unused_parameters = true;
    GradReducer reducer(parameters, communicator, options);
    if (rank == 0) parameters[1].second.grad().fill_(100.0);  // stale on the rank that misses it
    reducer.prepare_for_backward(true);
    backward(parameters, rank + 1.0, rank, /*skip=*/rank == 0 ? std::vector<size_t>{1} : std::vector<size_t>{});
    reducer.finalize();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const double ranks_sum = i == 1 ? 2.0 : 3.0;  // rank 1's scale only, or 1 + 2
      EXPECT_TRUE(parameters[i].second.grad().equal(coefficient(i, parameters[i].second) * ranks_sum))
          << parameters[i].first;
    }
  });
}

TEST(GradReducer, BroadcastThenConsistencyCheckDetectsAPerturbedParameter) {
  run_ranks(3, [&](int rank, Communicator& communicator) {
    auto parameters = make_parameters();
    {
      at::NoGradGuard no_grad;
      for (auto& [name, p] : parameters) p.add_(rank);  // ranks disagree
    }
    GradReducer reducer(parameters, communicator, small_buckets());
    EXPECT_THROW(reducer.check_parameters_consistent("before broadcast"), DistributedError);
    reducer.broadcast_parameters();
    const auto reference = make_parameters();
    for (size_t i = 0; i < parameters.size(); ++i) EXPECT_TRUE(parameters[i].second.equal(reference[i].second));
    EXPECT_NO_THROW(reducer.check_parameters_consistent("after broadcast"));

    if (rank == 2) {
      at::NoGradGuard no_grad;
      parameters[2].second.view(-1)[1].add_(1e-3);
    }
    try {
      reducer.check_parameters_consistent("step 10");
      ADD_FAILURE() << "rank " << rank << ": perturbation not detected";
    } catch (const DistributedError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("rank " + std::to_string(rank) + ": parameter consistency check (step 10) failed: "
                             "layers.1.lora_A differs from rank 0 on rank(s) 2"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("1 parameter(s) differ in total"), std::string::npos) << message;
    }
  });
}

TEST(GradReducer, MisuseIsReported) {
  auto communicator = make_local_communicator();
  auto parameters = make_parameters();
  GradReducer reducer(parameters, *communicator, small_buckets());
  EXPECT_THROW(reducer.finalize(), Error);  // no prepare_for_backward
  reducer.prepare_for_backward(false);
  backward(parameters, 1.0, 0);
  EXPECT_THROW(reducer.finalize(), Error);  // after a no_sync micro-step
  reducer.prepare_for_backward(true);
  parameters[0].second.mutable_grad() = at::Tensor();  // zero_grad(set_to_none) would do this
  backward(parameters, 1.0, 0);
  try {
    reducer.finalize();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.lora_A is no longer a view"), std::string::npos) << e.what();
  }
  at::Tensor frozen = at::ones({2});
  EXPECT_THROW(GradReducer({{"frozen", frozen}}, *communicator, small_buckets()), Error);
}

}  // namespace
}  // namespace finetune
