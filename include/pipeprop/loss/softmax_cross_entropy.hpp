// pipeprop/loss/softmax_cross_entropy.hpp: softmax followed by cross-entropy against integer class labels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Softmax cross-entropy over Classes logits. Logits [b, Classes], labels [b] (int32 in [0, Classes)).
/// The loss of a micro-batch is the MEAN over its b samples. For a batch split into micro-batches, the executor
/// passes gradient_scale = 1 / (whole batch size) so that the gradient is that of the mean over the whole batch
/// (docs/schedules.md §3, docs/pitfalls.md item 1); the default 1 / b is the micro-batch mean.
/// Throws std::out_of_range when a label is outside [0, Classes).
/// A loss policy (loss/loss_policy.hpp): logits_shape [Classes], one target (the label) per sample, every sample
/// counts (count_targets = b); totals / totals_and_gradient give the loss sum accumulated in T in sample order (the
/// same float sum as loss(), so totals().mean() rounded to T equals loss()) and the arg-max hits.
template <class T, std::size_t Classes>
struct softmax_cross_entropy {
    static_assert(Classes >= 2, "pipeprop::softmax_cross_entropy: needs at least two classes.");
    static constexpr std::size_t classes = Classes;  ///< Number of classes (logits per sample).
    using value_type = T;  ///< The logits' type T.
    using logits_shape = shape<Classes>;  ///< Per-sample logits [Classes].
    static constexpr std::size_t targets_per_sample = 1;  ///< One int32 class label per sample.

    /// Throws std::out_of_range, naming sample n, unless label lies in [0, Classes).
    static void check_label(std::int32_t label, std::size_t n) {
        if (label < 0 || static_cast<std::size_t>(label) >= Classes)
            throw std::out_of_range("pipeprop::softmax_cross_entropy: label " + std::to_string(label) +
                                    " of sample " + std::to_string(n) + " is outside [0, " +
                                    std::to_string(Classes) + ")");
    }

    /// Loss of one sample from its logits [Classes]; numerically stable (log-sum-exp with the max subtracted).
    static T sample_loss(const T* z, std::int32_t label) {
        const T mx = *std::max_element(z, z + Classes);
        T s = 0;
        for (std::size_t c = 0; c < Classes; ++c) s += std::exp(z[c] - mx);
        return std::log(s) + mx - z[label];
    }

    /// Mean loss over the micro-batch (nats). Does not write anything.
    [[nodiscard]] static T loss(const T* logits, const std::int32_t* labels, std::size_t b) {
        T total = 0;
        for (std::size_t n = 0; n < b; ++n) {
            check_label(labels[n], n);
            total += sample_loss(logits + n * Classes, labels[n]);
        }
        return total / static_cast<T>(b);
    }

    /// Assigns dlogits = gradient_scale * (softmax(z) - onehot(label)) per sample and returns the mean loss over
    /// the micro-batch. gradient_scale <= 0 means 1 / b.
    static T loss_and_gradient(const T* logits, const std::int32_t* labels, std::size_t b, T* dlogits,
                               T gradient_scale = T(0)) {
        return sum_and_gradient(logits, labels, b, dlogits, gradient_scale) / static_cast<T>(b);
    }

    /// Number of samples whose arg-max logit equals the label (ties: the lowest class index wins).
    [[nodiscard]] static std::size_t correct(const T* logits, const std::int32_t* labels, std::size_t b) {
        std::size_t hits = 0;
        for (std::size_t n = 0; n < b; ++n) {
            const T* z = logits + n * Classes;
            const auto arg = static_cast<std::int32_t>(std::max_element(z, z + Classes) - z);
            hits += arg == labels[n] ? 1 : 0;
        }
        return hits;
    }

    /// Loss policy: checks labels [b] (throws std::out_of_range as check_label) and returns b.
    static std::size_t count_targets(const std::int32_t* labels, std::size_t b) {
        for (std::size_t n = 0; n < b; ++n) check_label(labels[n], n);
        return b;
    }

    /// Loss policy: loss sum (nats, accumulated in T as loss()), count b and hits of the micro-batch. Writes nothing.
    [[nodiscard]] static loss_totals totals(const T* logits, const std::int32_t* labels, std::size_t b) {
        T total = 0;
        for (std::size_t n = 0; n < b; ++n) {
            check_label(labels[n], n);
            total += sample_loss(logits + n * Classes, labels[n]);
        }
        return {static_cast<double>(total), b, correct(logits, labels, b)};
    }

    /// Loss policy: loss_and_gradient's dlogits (gradient_scale <= 0: 1 / b) with the loss sum, count b and hits.
    static loss_totals totals_and_gradient(const T* logits, const std::int32_t* labels, std::size_t b, T* dlogits,
                                           T gradient_scale) {
        const T total = sum_and_gradient(logits, labels, b, dlogits, gradient_scale);
        return {static_cast<double>(total), b, correct(logits, labels, b)};
    }

private:
    /// dlogits as loss_and_gradient; returns the loss SUM over the b samples (accumulated in T, sample order).
    static T sum_and_gradient(const T* logits, const std::int32_t* labels, std::size_t b, T* dlogits,
                              T gradient_scale) {
        const T scale = gradient_scale > T(0) ? gradient_scale : T(1) / static_cast<T>(b);
        T total = 0;
        for (std::size_t n = 0; n < b; ++n) {
            check_label(labels[n], n);
            const T* z = logits + n * Classes;
            T* d = dlogits + n * Classes;
            const T mx = *std::max_element(z, z + Classes);
            T s = 0;
            for (std::size_t c = 0; c < Classes; ++c) {
                d[c] = std::exp(z[c] - mx);
                s += d[c];
            }
            total += std::log(s) + mx - z[labels[n]];
            const T inv = scale / s;
            for (std::size_t c = 0; c < Classes; ++c) d[c] *= inv;
            d[labels[n]] -= scale;
        }
        return total;
    }
};

}  // namespace pipeprop
