#include "finetune/train/loss.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/data/sample.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// Each chunk's fp32 (rows x vocab) logits stay within this budget (with the model-dtype copies,
// about 1.5x it is live at once). 256 MiB is ~440 rows of a 152k vocabulary: it keeps Qwen3-8B
// QLoRA at 2048 tokens under 8 GiB, and the chunk's GEMM (rows x hidden x vocab) still runs at
// full speed (bench/RESULTS.md, issue 12).
constexpr int64_t kLogitChunkBytes = int64_t{256} << 20;

// Note [Fused LM head + cross-entropy]
// Training never keeps (tokens x vocab) logits alive for the backward pass. The forward pass
// walks chunks of trained positions: logits = h W^T in the model dtype, upcast to fp32 (as
// transformers' loss does), token loss = logsumexp - target logit, and at once the gradient of the
// loss SUM with respect to h: (softmax - onehot) cast to the model dtype, times W. Only that
// (tokens x hidden) gradient is saved; backward scales it by the incoming gradient (1 / global
// token count). The LM head weight is frozen under LoRA, so it needs no gradient.
// Row weights travel as a plain struct: autograd ignores them (they take no gradient), and they
// may be undefined, which a tensor argument of a custom Function may not.
struct RowWeights {
  at::Tensor weights;  // undefined, or (N) fp32
};

// The output transform of the head (OutputHead::final_logit_softcapping), applied as transformers
// does (in the model dtype, before the fp32 upcast): z -> cap * tanh(z / cap).
struct Softcap {
  std::optional<double> cap;
};

// The logits of `rows` through the head, upcast to fp32, and (with a soft-cap) the tanh values the
// gradient needs: d(cap * tanh(z / cap)) / dz = 1 - tanh(z / cap)^2.
std::pair<at::Tensor, at::Tensor> head_logits(const at::Tensor& rows, const at::Tensor& weight, const Softcap& softcap) {
  auto logits = at::linear(rows, weight);  // (n, V), model dtype
  if (!softcap.cap) return {logits.to(at::kFloat), at::Tensor()};
  auto tanh = at::tanh(logits / *softcap.cap);
  return {(tanh * *softcap.cap).to(at::kFloat), tanh.to(at::kFloat)};
}

struct FusedLinearCrossEntropy : public torch::autograd::Function<FusedLinearCrossEntropy> {
  // target_weights: undefined, or (N) fp32: each row's loss and gradient times its weight (a 0 row
  // adds nothing: Note [Graphed micro-steps], the filler rows that pad a graph's target count).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, const RowWeights& row_weights_of_targets,
                            const Softcap& softcap) {
    const at::Tensor& target_weights = row_weights_of_targets.weights;
    auto total = at::zeros({}, hidden.options().dtype(at::kFloat));
    auto grad_hidden = at::empty_like(hidden);  // (N, C)
    const int64_t count = hidden.size(0);
    const int64_t chunk = logit_chunk_rows(weight.size(0));
    for (int64_t start = 0; start < count; start += chunk) {
      const int64_t n = std::min(chunk, count - start);
      auto [logits, tanh] = head_logits(hidden.narrow(0, start, n), weight, softcap);  // (n, V) fp32
      auto target = targets.narrow(0, start, n).unsqueeze(1);                        // (n, 1)
      auto lse = logits.logsumexp(-1, /*keepdim=*/true);                             // (n, 1)
      auto token_losses = lse - logits.gather(1, target);                             // (n, 1)
      auto grad_logits = logits.sub_(lse).exp_();                                    // softmax, in place
      grad_logits.scatter_add_(1, target, at::full({n, 1}, -1.0, grad_logits.options()));
      if (tanh.defined()) grad_logits.mul_(1 - tanh.square_());  // through the soft-cap
      if (target_weights.defined()) {
        auto row_weights = target_weights.narrow(0, start, n).unsqueeze(1);          // (n, 1)
        token_losses = token_losses * row_weights;
        grad_logits.mul_(row_weights);
      }
      total += token_losses.sum();
      grad_hidden.narrow(0, start, n).copy_(at::matmul(grad_logits.to(hidden.scalar_type()), weight));
    }
    ctx->save_for_backward({grad_hidden});
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto grad_hidden = ctx->get_saved_variables()[0];
    return {grad_hidden * grad_outputs[0].to(grad_hidden.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

void backward_normalised_loss(const at::Tensor& loss_sum, const at::Tensor& global_tokens,
                              const at::Tensor& loss_scale) {
  auto objective = loss_sum / global_tokens;
  if (loss_scale.defined()) objective = objective * loss_scale;
  objective.backward();
}

int64_t logit_chunk_rows(int64_t vocab_size) {
  return std::clamp<int64_t>(kLogitChunkBytes / (vocab_size * static_cast<int64_t>(sizeof(float))), 64, 4096);
}

at::Tensor shift_labels(const at::Tensor& labels) {
  auto padded = at::constant_pad_nd(labels, {0, kTargetShift}, kIgnoreIndex);
  return padded.narrow(1, kTargetShift, labels.size(1));
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels) {
  auto targets = shift_labels(labels).reshape(-1);                       // (B*T)
  auto positions = targets.ne(kIgnoreIndex).nonzero().squeeze(1);        // (N)
  return causal_lm_loss_sum(model, hidden, positions, targets.index_select(0, positions));
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets) {
  return causal_lm_loss_sum(model, hidden, targets.positions, targets.ids, targets.weights);
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& target_positions,
                              const at::Tensor& target_ids, const at::Tensor& target_weights) {
  return output_head_loss_sum(model.output_head(), hidden, {target_positions, target_ids, target_weights});
}

at::Tensor output_head_loss_sum(const OutputHead& head, const at::Tensor& hidden, const TokenTargets& targets) {
  // Masked positions cost nothing here: only the N trained rows are gathered (N x C copies; the
  // gather's backward scatters into a (B*T, C) gradient), and only they go through the head.
  auto selected = hidden.reshape({-1, hidden.size(-1)}).index_select(0, targets.positions);  // (N, C)
  const Softcap softcap{head.final_logit_softcapping};
  if (selected.requires_grad() && at::GradMode::is_enabled()) {
    return FusedLinearCrossEntropy::apply(selected, head.weight, targets.ids, RowWeights{targets.weights}, softcap);
  }
  if (targets.weights.defined()) throw Error("causal_lm_loss_sum: target weights are for training (the fused loss)");
  // Evaluation: transformers' arithmetic exactly (cross_entropy over upcast logits).
  auto total = at::zeros({}, hidden.options().dtype(at::kFloat));
  const int64_t count = targets.positions.size(0);
  const int64_t chunk = logit_chunk_rows(head.weight.size(0));
  for (int64_t start = 0; start < count; start += chunk) {
    const int64_t n = std::min(chunk, count - start);
    const auto logits = head_logits(selected.narrow(0, start, n), head.weight, softcap).first;  // (n, V)
    total = total + at::cross_entropy_loss(logits, targets.ids.narrow(0, start, n), std::nullopt, at::Reduction::Sum,
                                           kIgnoreIndex);
  }
  return total;
}

}  // namespace finetune
