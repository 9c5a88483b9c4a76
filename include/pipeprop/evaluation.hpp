// pipeprop/evaluation.hpp: the one evaluation of every engine (sequential_trainer, pb::engine,
// sync::schedule_executor): a forward pass in inference mode (Layer::infer: running state read, never updated) over
// n samples in chunks, the loss policy's totals summed in double in chunk order, then divided by the counted
// targets. The result does not depend on the chunk size up to float rounding of the logits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "pipeprop/loss/loss_policy.hpp"

namespace pipeprop {

/// Result of an evaluation: accuracy in [0, 1] and mean loss (nats) per counted target (per sample for a
/// classifier, per non-ignored token for a token loss), number of samples, of counted targets and of hits.
struct evaluation {
    double accuracy = 0.0;  ///< Fraction of counted targets whose arg-max logit is the target, in [0, 1].
    double loss = 0.0;  ///< Mean loss per counted target, in nats.
    std::size_t samples = 0;  ///< Samples evaluated.
    std::size_t targets = 0;  ///< counted targets N over the samples (= samples for a classifier)
    std::size_t correct = 0;  ///< counted targets whose arg-max logit equals the target
};

/// Evaluates n samples with targets [n, Loss::targets_per_sample] in chunks of at most `chunk` samples:
/// `forward(first, b)` runs the network on samples [first, first + b) and returns their logits
/// [b, Loss::logits_shape...], valid until the next call. Checks every target first (Loss::count_targets: throws
/// std::out_of_range naming the sample); throws std::invalid_argument (message starting with `who`) for n == 0 or
/// chunk == 0.
template <loss_policy Loss, class Forward>
[[nodiscard]] evaluation evaluate_in_chunks(const std::int32_t* targets, std::size_t n, std::size_t chunk,
                                            Forward&& forward, const char* who = "pipeprop::evaluate") {
    if (n == 0) throw std::invalid_argument(std::string(who) + ": no samples");
    if (chunk == 0) throw std::invalid_argument(std::string(who) + ": chunk size 0");
    (void)Loss::count_targets(targets, n);
    evaluation r;
    double loss_sum = 0.0;
    for (std::size_t first = 0; first < n; first += chunk) {
        const std::size_t b = std::min(chunk, n - first);
        const auto* logits = forward(first, b);
        const loss_totals t = Loss::totals(logits, targets + first * Loss::targets_per_sample, b);
        loss_sum += t.loss_sum;
        r.correct += t.correct;
        r.targets += t.count;
    }
    r.samples = n;
    const double d = r.targets > 0 ? static_cast<double>(r.targets) : 1.0;
    r.accuracy = static_cast<double>(r.correct) / d;
    r.loss = loss_sum / d;
    return r;
}

}  // namespace pipeprop
