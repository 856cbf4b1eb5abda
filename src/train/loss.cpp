#include "finetune/train/loss.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <torch/csrc/autograd/custom_function.h>

#include "finetune/data/sample.h"
#include "finetune/model/half_gemm.h"
#include "finetune/util/errors.h"

#ifdef FINETUNE_WITH_CUDA
#include "cuda/vocab_tile_softmax_kernel.h"
#include "finetune/kernels/kernel_launch.h"
#endif

namespace finetune {
namespace {

// Each chunk's fp32 (rows x vocab) logits stay within this budget (with the model-dtype copies,
// about 1.5x it is live at once). 256 MiB is ~440 rows of a 152k vocabulary: it keeps Qwen3-8B
// QLoRA at 2048 tokens under 8 GiB, and the chunk's GEMM (rows x hidden x vocab) still runs at
// full speed (bench/RESULTS.md, issue 12).
constexpr int64_t kLogitChunkBytes = int64_t{256} << 20;
// A vocabulary tile's fp32 logits (Note [Vocabulary-tiled LM head loss]): with its model-dtype
// logits and probabilities and the row tile's two (rows x hidden) fp32 sums, ~64 MiB is live at once.
constexpr int64_t kLogitTileBytes = int64_t{32} << 20;

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

// The backward of both fused losses below: the hidden-state gradient their forward saved, times
// the loss's incoming gradient; none for the forward's other `inputs` - 1 inputs.
torch::autograd::variable_list saved_hidden_gradient(torch::autograd::AutogradContext* ctx,
                                                     const torch::autograd::variable_list& grad_outputs,
                                                     size_t inputs) {
  const auto grad_hidden = ctx->get_saved_variables()[0];
  torch::autograd::variable_list grads(inputs);
  grads[0] = grad_hidden * grad_outputs[0].to(grad_hidden.scalar_type());
  return grads;
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
    return saved_hidden_gradient(ctx, grad_outputs, /*inputs=*/5);
  }
};

// Note [Vocabulary-tiled LM head loss]
// The same loss and hidden-state gradient as Note [Fused LM head + cross-entropy], with the logits
// walked in tiles of (at most kLogitTileRows rows) x (logit_tile_vocab columns, ~32 MiB of fp32)
// instead of row chunks of the whole vocabulary (~256 MiB). For each row tile the vocabulary is
// swept once, keeping per row a running maximum m, the sum S = sum exp(z - m) and an fp32
// accumulator G = sum exp(z - m) z' W_v (z' the soft-cap's slope, 1 without one); when a tile
// raises m, S and G are rescaled by exp(m_old - m_new) first (the online softmax of flash
// attention). At the end logsumexp = m + log S, the token loss is logsumexp - z_target and
// d loss / d h = G / S - z'_target W_target: (softmax - onehot) W without a (rows x vocab) tensor.
// Each tile runs the two GEMMs of the row-chunk path (logits, and probabilities times W), so the
// arithmetic is the same; the weight is read twice per row tile of at most 512 rows, as the row
// chunks (441 rows at Qwen3's vocabulary) read it twice per chunk. The extra work is the rescale:
// each tile's product written in fp32 and added to G (rows x hidden fp32) rescaled, ~24 MiB of
// traffic per 512-row tile (~1 GB, ~0.3 ms per 2,048 rows at Qwen3-8B's 152k x 4,096 head), and
// about 15 small kernels per tile (40 tiles per 2,048 rows there) where a row chunk launches 10.
// The logits are those of the row-chunk path (the head GEMM in the model dtype, upcast); the
// probabilities are rounded to the model dtype for their GEMM as there, but relative to m rather
// than to logsumexp, and the products are summed in fp32 over the tiles and rounded once at the end.
// On a CUDA head in bf16 or fp16 without a soft-cap (fused_vocab_tile_kernel), the steps between
// the two GEMMs run in one kernel per tile (train/cuda/vocab_tile_softmax_kernel.cu), which reads
// the model-dtype logits straight from the head GEMM: no fp32 copy of the tile, and 4 launches per
// tile instead of ~15 (head GEMM, kernel, fp32-output product GEMM, G's rescale). Per row it takes
// the tile's maximum and m_new, writes exp(z - m_new) rounded to the model dtype for the product
// GEMM, adds their fp32 sum into S after S's rescale, and picks the target's logit out of its tile,
// each value by the composition's formula (z upcast, expf of the fp32 difference); only the order
// of the row sum's additions differs. The tiles keep their size (kLogitTileBytes of fp32), so their
// working set shrinks to the model-dtype logits and probabilities. The soft-capped head (Gemma-2),
// the CPU and fp32 keep the composition.
struct RowTileState {
  int64_t tile_vocab = 0;    // columns of every tile but the last
  at::Tensor target_tile;    // (n) int64: the vocabulary tile each row's target lies in (composition only)
  at::Tensor target_column;  // (n, 1) int64: its column there (composition only)
  at::Tensor running_max;    // (n) fp32: m
  at::Tensor exp_sum;        // (n) fp32: S
  at::Tensor target_logit;   // (n) fp32
  at::Tensor target_slope;   // (n) fp32: the soft-cap's slope at the target; undefined without one
  at::Tensor grad_sum;       // (n, C) fp32: G
};

// A row sweep's state before its first tile: where each target lies among tiles of tile_vocab
// columns (the fused kernel finds the target's tile itself: not for it).
RowTileState row_sweep_start(const at::Tensor& targets, int64_t tile_vocab, bool fused_kernel) {
  RowTileState state;
  state.tile_vocab = tile_vocab;
  if (fused_kernel) return state;
  state.target_tile = targets.div(tile_vocab, "floor");                          // (n)
  state.target_column = (targets - state.target_tile * tile_vocab).unsqueeze(1);  // (n, 1)
  return state;
}

// One (rows x vocabulary tile) step of Note [Vocabulary-tiled LM head loss]: weight_tile holds the
// vocabulary rows of tile `tile` (tile_vocab columns each, the last one possibly fewer). The first
// tile of a row sweep starts the running sums.
void sweep_vocab_tile(RowTileState& state, const at::Tensor& rows, const at::Tensor& weight_tile, int64_t tile,
                      const Softcap& softcap, bool fp32_output_gemm) {
  const bool first = !state.running_max.defined();
  auto [logits, slope] = head_logits(rows, weight_tile, softcap);  // (n, v) fp32; slope holds tanh
  if (slope.defined()) slope.square_().neg_().add_(1);             // 1 - tanh^2
  // The target's logit (and slope) from the tile it lies in: each target lies in exactly one. Rows
  // whose target lies elsewhere gather a column of this tile (their own column can be past its
  // end only in the last, shorter tile) and keep their value.
  const int64_t v = logits.size(1);
  const auto inside = state.target_tile.eq(tile);  // (n)
  const auto column = v < state.tile_vocab ? state.target_column.clamp_max(v - 1) : state.target_column;  // (n, 1)
  const auto zero = first ? at::zeros({}, logits.options()) : at::Tensor();
  state.target_logit = at::where(inside, logits.gather(1, column).squeeze(1), first ? zero : state.target_logit);
  if (slope.defined()) {
    state.target_slope = at::where(inside, slope.gather(1, column).squeeze(1), first ? zero : state.target_slope);
  }
  const auto tile_max = logits.amax(1);  // (n)
  at::Tensor rescale;                    // (n): exp(m_old - m_new)
  if (first) {
    state.running_max = tile_max;
  } else {
    auto raised = at::maximum(state.running_max, tile_max);
    rescale = (state.running_max - raised).exp_();
    state.running_max = raised;
  }
  auto probs = logits.sub_(state.running_max.unsqueeze(1)).exp_();  // (n, v), in place
  auto tile_sum = probs.sum(1);                                     // (n)
  if (slope.defined()) probs.mul_(slope);
  auto product = matmul_to_float(probs.to(weight_tile.scalar_type()), weight_tile, fp32_output_gemm);  // (n, C)
  if (first) {
    state.exp_sum = tile_sum;
    state.grad_sum = product;
    return;
  }
  state.exp_sum = tile_sum.addcmul_(state.exp_sum, rescale);
  state.grad_sum = product.addcmul_(state.grad_sum, rescale.unsqueeze(1));
}

#ifdef FINETUNE_WITH_CUDA

// The steps of sweep_vocab_tile between its two GEMMs in one CUDA kernel (the GPU path of Note
// [Vocabulary-tiled LM head loss]): rows (n, C) and weight_tile (v, C) in bf16 or fp16, without a
// soft-cap; row_targets (n) int64. The state's per-row tensors are made by the first tile and
// updated in place by the kernel from then on.
void sweep_vocab_tile_fused(RowTileState& state, const at::Tensor& rows, const at::Tensor& weight_tile, int64_t tile,
                            const at::Tensor& row_targets, bool fp32_output_gemm) {
  const bool first = !state.running_max.defined();
  const auto logits = at::linear(rows, weight_tile).contiguous();  // (n, v), model dtype
  const int64_t n = logits.size(0), v = logits.size(1);
  const auto row_options = logits.options().dtype(at::kFloat);
  if (first) {
    state.running_max = at::empty({n}, row_options);
    state.exp_sum = at::empty({n}, row_options);
    state.target_logit = at::empty({n}, row_options);
  }
  auto probs = at::empty_like(logits);                                      // (n, v)
  const auto rescale = first ? at::Tensor() : at::empty({n}, row_options);  // (n): exp(m_old - m_new)
  const cuda_kernels::VocabTileRowState row_state{state.running_max.data_ptr<float>(),
                                                  state.exp_sum.data_ptr<float>(),
                                                  state.target_logit.data_ptr<float>()};
  cuda_kernels::check_launch(
      cuda_kernels::vocab_tile_softmax(cuda_kernels::half_kind(logits), logits.data_ptr(), probs.data_ptr(), n, v,
                                       row_targets.data_ptr<int64_t>(), tile * state.tile_vocab, row_state,
                                       first ? nullptr : rescale.data_ptr<float>(), first,
                                       cuda_kernels::current_stream(logits)),
      "vocab_tile_softmax");
  auto product = matmul_to_float(probs, weight_tile, fp32_output_gemm);  // (n, C)
  state.grad_sum = first ? product : product.addcmul_(state.grad_sum, rescale.unsqueeze(1));
}

#else

void sweep_vocab_tile_fused(RowTileState&, const at::Tensor&, const at::Tensor&, int64_t, const at::Tensor&, bool) {
  throw Error("the fused vocabulary-tile loss kernel needs a build with the CUDA kernels");
}

#endif

struct VocabTiledCrossEntropy : public torch::autograd::Function<VocabTiledCrossEntropy> {
  // As FusedLinearCrossEntropy::forward (the same arguments and result), in vocabulary tiles; with
  // `fused_kernel` (fused_vocab_tile_kernel's choice) each tile runs sweep_vocab_tile_fused.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, const RowWeights& row_weights_of_targets,
                            const Softcap& softcap, bool fp32_output_gemm, bool fused_kernel) {
    const at::Tensor& target_weights = row_weights_of_targets.weights;
    auto total = at::zeros({}, hidden.options().dtype(at::kFloat));
    auto grad_hidden = at::empty_like(hidden);  // (N, C)
    const int64_t count = hidden.size(0), vocab_size = weight.size(0);
    for (int64_t start = 0; start < count; start += kLogitTileRows) {
      const int64_t n = std::min(kLogitTileRows, count - start);
      const auto rows = hidden.narrow(0, start, n);                       // (n, C)
      const auto row_targets = targets.narrow(0, start, n).contiguous();  // (n)
      const int64_t tile_vocab = logit_tile_vocab(n, vocab_size);
      RowTileState state = row_sweep_start(row_targets, tile_vocab, fused_kernel);
      for (int64_t tile = 0; tile * tile_vocab < vocab_size; ++tile) {
        const int64_t vocab_start = tile * tile_vocab, v = std::min(tile_vocab, vocab_size - vocab_start);
        const auto weight_tile = weight.narrow(0, vocab_start, v);  // (v, C)
        if (fused_kernel) {
          sweep_vocab_tile_fused(state, rows, weight_tile, tile, row_targets, fp32_output_gemm);
        } else {
          sweep_vocab_tile(state, rows, weight_tile, tile, softcap, fp32_output_gemm);
        }
      }
      auto token_losses = state.exp_sum.log().add_(state.running_max).sub_(state.target_logit);  // (n)
      auto grad = state.grad_sum.div_(state.exp_sum.unsqueeze(1));                               // (n, C) fp32
      const auto target_rows = weight.index_select(0, row_targets);                               // (n, C)
      if (state.target_slope.defined()) {
        grad.addcmul_(target_rows, state.target_slope.neg().unsqueeze(1));
      } else {
        grad.sub_(target_rows);
      }
      if (target_weights.defined()) {
        const auto row_weights = target_weights.narrow(0, start, n);  // (n)
        token_losses.mul_(row_weights);
        grad.mul_(row_weights.unsqueeze(1));
      }
      total += token_losses.sum();
      grad_hidden.narrow(0, start, n).copy_(grad);
    }
    ctx->save_for_backward({grad_hidden});
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    return saved_hidden_gradient(ctx, grad_outputs, /*inputs=*/7);
  }
};

}  // namespace

LmHeadLoss lm_head_loss_from_name(const std::string& name) {
  const auto& names = lm_head_loss_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<LmHeadLoss>(i);
  }
  throw Error("lm_head_loss: unknown tiling \"" + name + "\" (vocab_tiles or row_chunks)");
}

const std::string& lm_head_loss_name(LmHeadLoss tiling) { return lm_head_loss_names().at(static_cast<size_t>(tiling)); }

HeadLossOptions head_loss_options(const CausalLM& model, LmHeadLoss tiling) {
  return {tiling, model.kernel_policy().half_gemm_fp32_output};
}

bool fused_vocab_tile_kernel(const at::Device& device, at::ScalarType dtype, bool softcapped) {
#ifdef FINETUNE_WITH_CUDA
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && !softcapped;
#else
  return false;
#endif
}

int64_t logit_tile_vocab(int64_t rows, int64_t vocab_size) {
  constexpr int64_t kAlign = 128;
  const int64_t columns = kLogitTileBytes / (std::max<int64_t>(rows, 1) * static_cast<int64_t>(sizeof(float)));
  return std::min(vocab_size, std::max(kAlign, columns / kAlign * kAlign));
}

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

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const TokenTargets& targets,
                              LmHeadLoss tiling) {
  return output_head_loss_sum(model.output_head(), hidden, targets, head_loss_options(model, tiling));
}

at::Tensor causal_lm_loss_sum(const CausalLM& model, const at::Tensor& hidden, const at::Tensor& target_positions,
                              const at::Tensor& target_ids, const at::Tensor& target_weights) {
  return causal_lm_loss_sum(model, hidden, TokenTargets{target_positions, target_ids, target_weights});
}

at::Tensor output_head_loss_sum(const OutputHead& head, const at::Tensor& hidden, const TokenTargets& targets,
                                const HeadLossOptions& options) {
  // Masked positions cost nothing here: only the N trained rows are gathered (N x C copies; the
  // gather's backward scatters into a (B*T, C) gradient), and only they go through the head.
  auto selected = hidden.reshape({-1, hidden.size(-1)}).index_select(0, targets.positions);  // (N, C)
  const Softcap softcap{head.final_logit_softcapping};
  if (selected.requires_grad() && at::GradMode::is_enabled()) {
    if (options.tiling == LmHeadLoss::vocab_tiles) {
      const bool fused_kernel =
          options.vocab_tile_kernel && fused_vocab_tile_kernel(head.weight.device(), head.weight.scalar_type(),
                                                               softcap.cap.has_value());
      return VocabTiledCrossEntropy::apply(selected, head.weight, targets.ids, RowWeights{targets.weights}, softcap,
                                           options.fp32_output_gemm, fused_kernel);
    }
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
