// pipeprop/loss/loss_policy.hpp: the loss-policy contract of the trainers: what a loss type must
// provide so that a trainer can compute the loss, its gradient w.r.t. the network output and the hit count of a batch,
// whatever the shape of the network output and of the targets.
//
// A loss policy L (all members static; softmax_cross_entropy<T, Classes> and token_cross_entropy<T, Length, Vocab>
// satisfy it) provides:
//
//   using value_type   = T;                      // float or double, the network's value type
//   using logits_shape = shape<...>;             // per-sample network output it reads: [Classes] or [Length, Vocab]
//   static constexpr std::size_t targets_per_sample;  // int32 targets per sample: 1 (a class label) or Length
//
//   static std::size_t count_targets(const std::int32_t* targets, std::size_t b);
//     targets [b, targets_per_sample]. The TARGET CHECK: throws std::out_of_range naming the sample (and position)
//     of the first invalid target; otherwise returns N, the number of targets that count towards the loss (b for a
//     classifier; the non-ignored tokens for a token loss). The trainer's batch loss is the mean over these N.
//
//   static loss_totals totals(const T* logits, const std::int32_t* targets, std::size_t b);
//     logits [b, logits_shape...]. Loss SUM over the counted targets (nats), their number N and the CORRECT COUNT
//     (arg-max hits among them). Writes nothing. Throws as count_targets.
//
//   static loss_totals totals_and_gradient(const T* logits, const std::int32_t* targets, std::size_t b, T* dlogits,
//                                          T gradient_scale);
//     As totals, and ASSIGNS dlogits [b, logits_shape...] = gradient_scale * d(loss sum)/d(logits) (0 where a target
//     does not count). GRADIENT SCALE (docs/pitfalls.md item 1): the trainer passes 1 / N for the N of the
//     WHOLE batch (count_targets), so that the accumulated gradient is that of the batch's mean loss however the
//     batch is split into micro-batches; gradient_scale <= 0 means 1 / (N of this call). No allocation.
//
// loss_fits_output<L, OutputShape> is the compile-time check a trainer makes: the network's per-sample output must
// be the loss's logits_shape (see check_loss_fits_output for the sentences it static_asserts).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Loss sum, counted targets and arg-max hits of one batch or micro-batch (the result of a loss policy's totals).
struct loss_totals {
    double loss_sum = 0;      ///< sum of the per-target losses over the counted targets (nats)
    std::size_t count = 0;    ///< counted targets N (samples of a classifier, non-ignored tokens of a token loss)
    std::size_t correct = 0;  ///< counted targets whose arg-max logit equals the target
    /// Mean loss per counted target (nats); 0 when count == 0.
    [[nodiscard]] double mean() const noexcept { return count ? loss_sum / static_cast<double>(count) : 0.0; }
};

/// The loss-policy concept (see the file comment for the meaning of every member).
template <class L>
concept loss_policy =
    requires {
        typename L::value_type;
        typename L::logits_shape;
        { L::targets_per_sample } -> std::convertible_to<std::size_t>;
        std::integral_constant<std::size_t, L::targets_per_sample>{};
    } && std::is_floating_point_v<typename L::value_type> && shape_type<typename L::logits_shape> &&
    (L::targets_per_sample >= 1) &&
    requires(const typename L::value_type* z, const std::int32_t* y, std::size_t b, typename L::value_type* dz,
             typename L::value_type scale) {
        { L::count_targets(y, b) } -> std::same_as<std::size_t>;
        { L::totals(z, y, b) } -> std::same_as<loss_totals>;
        { L::totals_and_gradient(z, y, b, dz, scale) } -> std::same_as<loss_totals>;
    };

/// True when loss policy L reads exactly the per-sample network output OutputShape.
template <class L, class OutputShape>
inline constexpr bool loss_fits_output = std::is_same_v<typename L::logits_shape, OutputShape>;

/// Compile-time check of a trainer (Who names the trainer in the messages): L is a loss policy and the network's
/// per-sample output OutputShape is L's logits_shape. Each failure is a sentence.
template <class L, class OutputShape>
constexpr bool check_loss_fits_output() {
    static_assert(loss_policy<L>,
                  "pipeprop: the Loss template argument is not a loss policy (loss/loss_policy.hpp: value_type, "
                  "logits_shape, targets_per_sample, count_targets, totals, totals_and_gradient).");
    if constexpr (loss_policy<L>) {
        static_assert(L::logits_shape::rank == OutputShape::rank,
                      "pipeprop: the loss does not fit the network's output: their ranks differ (softmax cross-entropy "
                      "needs a rank-1 output [classes]; a token loss such as token_cross_entropy<T, L, V> needs a "
                      "rank-2 output [L, V], e.g. a token_linear LM head).");
        if constexpr (L::logits_shape::rank == OutputShape::rank)
            static_assert(loss_fits_output<L, OutputShape>,
                          "pipeprop: the loss does not fit the network's output: the loss's logits_shape (classes, or "
                          "sequence length and vocabulary) differs from the network's per-sample output shape.");
    }
    return true;
}

}  // namespace pipeprop
