// pipeprop/loss/token_cross_entropy.hpp: per-token softmax cross-entropy of a sequence model (next-token
// prediction) with a padding id that is ignored, as torch.nn.functional.cross_entropy(ignore_index=...).
//
// Logits [b, Length, Vocab] (row-major: token (n, l) has its Vocab logits at (n * Length + l) * Vocab), targets
// [b, Length] int32. For a token with target y != IgnoreIndex:
//     loss(n, l)    = log sum_c exp(z_c) - z_y                (nats; evaluated as log sum_c exp(z_c - max z) + max z)
//     dloss/dz_c    = softmax(z)_c - [c == y]
// A token whose target is IgnoreIndex contributes no loss, no gradient (its dlogits row is set to 0) and is not
// counted. IgnoreIndex defaults to -100, PyTorch's ignore_index default; it may also be a vocabulary id (e.g. a
// padding token 0), which is then ignored wherever it is the target.
//
// Gradient scale (docs/pitfalls.md item 1, like softmax_cross_entropy's gradient_scale): loss_and_gradient
// writes dlogits = gradient_scale * (softmax - onehot) for every non-ignored token.
//   * One micro-batch on its own: gradient_scale <= 0 (default) means 1 / tokens, tokens = non-ignored targets of
//     the micro-batch, so dlogits is the gradient of the micro-batch's MEAN token loss (PB: one update per
//     micro-batch, Kosson et al. arXiv 2003.11666 §3).
//   * A synchronous step over m micro-batches (GPipe / 1F1B / zero-bubble, Rae et al. arXiv 2405.18047 §3): count
//     N = count_tokens(targets, B) over the whole batch's targets [B, Length] (= the sum of count_tokens over the m
//     micro-batches) before the step and pass gradient_scale = 1 / N to every micro-batch. The parameter gradients
//     accumulated over the m micro-batches are then the gradient of (sum of all non-ignored token losses) / N, the
//     mean over all non-ignored tokens of the batch, whatever m is and however the padding is spread; the batch loss
//     is (sum_j result_j.loss_sum) / N. (Averaging the m micro-batch means instead would weight a token by 1 / its
//     micro-batch's token count.)
// All-ignored micro-batch (tokens = 0): loss_sum 0, mean() 0, correct 0 and an all-zero gradient, whatever
// gradient_scale is (PyTorch's reduction='mean' gives 0 / 0 = NaN there). An all-ignored batch (N = 0) therefore
// has loss 0 and a zero gradient; pass any gradient_scale.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "pipeprop/kernels/exp_kernels.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Result of one micro-batch of token_cross_entropy: summed loss, token and hit counts (see the file comment).
struct token_loss {
    double loss_sum = 0;      ///< sum over the non-ignored tokens of their loss (nats), accumulated in double
    std::size_t tokens = 0;   ///< non-ignored tokens (targets != IgnoreIndex)
    std::size_t correct = 0;  ///< non-ignored tokens whose arg-max logit equals the target
    /// Mean loss per non-ignored token (nats); 0 when tokens == 0.
    [[nodiscard]] double mean() const noexcept { return tokens ? loss_sum / static_cast<double>(tokens) : 0.0; }
};

/// Per-token softmax cross-entropy over logits [b, Length, Vocab] with int32 targets [b, Length] in [0, Vocab) or
/// equal to IgnoreIndex (see the file comment for the loss, the gradient scale and the all-ignored case).
/// static_asserts Length >= 1 and 2 <= Vocab <= INT32_MAX. Every function validates all targets first and throws
/// std::out_of_range (naming the sample n and position l) for a target outside [0, Vocab) that is not IgnoreIndex;
/// nothing is written then.
/// A loss policy (loss/loss_policy.hpp): logits_shape [Length, Vocab], Length targets per sample, the counted targets
/// are the non-ignored tokens (count_targets = count_tokens), so a trainer's batch loss is the mean over the batch's
/// non-ignored tokens; totals / totals_and_gradient are loss / loss_and_gradient as loss_totals.
template <class T, std::size_t Length, std::size_t Vocab, std::int32_t IgnoreIndex = -100>
struct token_cross_entropy {
    static_assert(std::is_floating_point_v<T>, "pipeprop::token_cross_entropy: T must be float or double.");
    static_assert(Length >= 1, "pipeprop::token_cross_entropy: the sequence length must be at least 1.");
    static_assert(Vocab >= 2, "pipeprop::token_cross_entropy: needs a vocabulary of at least two tokens.");
    static_assert(Vocab <= std::size_t(std::numeric_limits<std::int32_t>::max()),
                  "pipeprop::token_cross_entropy: the vocabulary must fit int32 token ids.");
    static constexpr std::size_t length = Length;         ///< L, tokens per sample
    static constexpr std::size_t vocabulary = Vocab;      ///< V, logits per token
    static constexpr std::int32_t ignore_index = IgnoreIndex;  ///< target id that counts neither in the loss nor in N
    static constexpr std::size_t logits_per_sample = Length * Vocab;  ///< L V logits per sample
    using value_type = T;  ///< The logits' type T.
    using logits_shape = shape<Length, Vocab>;  ///< Per-sample logits [L, V].
    static constexpr std::size_t targets_per_sample = Length;  ///< One int32 target token per position: L per sample.

    /// Throws std::out_of_range when target y of sample n, position l is neither in [0, Vocab) nor IgnoreIndex.
    static void check_target(std::int32_t y, std::size_t n, std::size_t l) {
        if (y != IgnoreIndex && (y < 0 || static_cast<std::size_t>(y) >= Vocab))
            throw std::out_of_range("pipeprop::token_cross_entropy: target " + std::to_string(y) + " of sample " +
                                    std::to_string(n) + ", position " + std::to_string(l) + " is outside [0, " +
                                    std::to_string(Vocab) + ") and is not the ignore index " +
                                    std::to_string(IgnoreIndex));
    }

    /// Number of non-ignored targets in targets [b, Length] (the N of a synchronous step's gradient_scale = 1 / N).
    /// Throws std::out_of_range as check_target.
    [[nodiscard]] static std::size_t count_tokens(const std::int32_t* targets, std::size_t b) {
        std::size_t tokens = 0;
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t l = 0; l < Length; ++l) {
                const std::int32_t y = targets[n * Length + l];
                check_target(y, n, l);
                tokens += y != IgnoreIndex ? 1 : 0;
            }
        return tokens;
    }

    /// Loss, token and hit counts of the micro-batch: logits [b, Length, Vocab], targets [b, Length]. Writes nothing.
    /// Throws std::out_of_range as check_target.
    [[nodiscard]] static token_loss loss(const T* logits, const std::int32_t* targets, std::size_t b) {
        (void)count_tokens(targets, b);
        token_loss r;
        for (std::size_t i = 0; i < b * Length; ++i) {
            const std::int32_t y = targets[i];
            if (y == IgnoreIndex) continue;
            const T* z = logits + i * Vocab;
            const T mx = kernels::row_max(z, Vocab);
            const T s = kernels::exp_sum(z, mx, Vocab, static_cast<T*>(nullptr));
            r.loss_sum += static_cast<double>(std::log(s) + mx - z[y]);
            ++r.tokens;
            r.correct += first_max(z, mx) == y ? 1 : 0;
        }
        return r;
    }

    /// Assigns dlogits [b, Length, Vocab] = gradient_scale * (softmax(z) - onehot(y)) for every non-ignored token and
    /// 0 for every ignored one, and returns the loss, token and hit counts as loss(). gradient_scale <= 0 means
    /// 1 / tokens (the micro-batch mean); pass 1 / N for a synchronous step over several micro-batches (file
    /// comment). dlogits may not alias logits. No allocation. Throws std::out_of_range as check_target.
    static token_loss loss_and_gradient(const T* logits, const std::int32_t* targets, std::size_t b, T* dlogits,
                                        T gradient_scale = T(0)) {
        const std::size_t tokens = count_tokens(targets, b);
        const T scale = gradient_scale > T(0) ? gradient_scale
                        : tokens > 0          ? T(1) / static_cast<T>(tokens)
                                              : T(0);
        token_loss r;
        for (std::size_t i = 0; i < b * Length; ++i) {
            const std::int32_t y = targets[i];
            T* d = dlogits + i * Vocab;
            if (y == IgnoreIndex) {
                for (std::size_t c = 0; c < Vocab; ++c) d[c] = T(0);
                continue;
            }
            const T* z = logits + i * Vocab;
            const T mx = kernels::row_max(z, Vocab);
            const T s = kernels::exp_sum(z, mx, Vocab, d);
            r.loss_sum += static_cast<double>(std::log(s) + mx - z[y]);
            ++r.tokens;
            r.correct += first_max(z, mx) == y ? 1 : 0;
            kernels::scale_row(d, Vocab, scale / s);
            d[y] -= scale;
        }
        return r;
    }

    /// Number of non-ignored tokens whose arg-max logit equals the target (ties: the lowest token id wins; a row
    /// with a NaN maximum counts as wrong). Throws std::out_of_range as check_target.
    [[nodiscard]] static std::size_t correct(const T* logits, const std::int32_t* targets, std::size_t b) {
        (void)count_tokens(targets, b);
        std::size_t hits = 0;
        for (std::size_t i = 0; i < b * Length; ++i) {
            const std::int32_t y = targets[i];
            if (y == IgnoreIndex) continue;
            const T* z = logits + i * Vocab;
            hits += first_max(z, kernels::row_max(z, Vocab)) == y ? 1 : 0;
        }
        return hits;
    }

    /// Loss policy: count_tokens (the target check; N of the gradient scale 1 / N).
    static std::size_t count_targets(const std::int32_t* targets, std::size_t b) { return count_tokens(targets, b); }
    /// Loss policy: loss() as loss_totals {loss_sum, tokens, correct}.
    [[nodiscard]] static loss_totals totals(const T* logits, const std::int32_t* targets, std::size_t b) {
        const token_loss r = loss(logits, targets, b);
        return {r.loss_sum, r.tokens, r.correct};
    }
    /// Loss policy: loss_and_gradient() as loss_totals {loss_sum, tokens, correct}.
    static loss_totals totals_and_gradient(const T* logits, const std::int32_t* targets, std::size_t b, T* dlogits,
                                           T gradient_scale) {
        const token_loss r = loss_and_gradient(logits, targets, b, dlogits, gradient_scale);
        return {r.loss_sum, r.tokens, r.correct};
    }

private:
    /// Lowest c with z[c] == mx (-1 when there is none, e.g. a NaN row).
    static std::int32_t first_max(const T* z, T mx) noexcept {
        for (std::size_t c = 0; c < Vocab; ++c)
            if (z[c] == mx) return static_cast<std::int32_t>(c);
        return -1;
    }
};

}  // namespace pipeprop
