// pipeprop/pb/micro_batch.hpp: what the PB engine knows about one micro-batch, and what it reports back.
//
// A micro-batch is b >= 1 samples, x [b, input...] and int32 targets [b, targets_per_sample] (class labels, or a
// sequence's next tokens for a token loss), pushed by the caller; its gradient is the gradient of its MEAN loss over
// its N counted targets (N = b for a classifier; docs/pb-semantics.md §1; docs/pitfalls.md item 1). Its index n
// (0-based, counted over the whole run, across drains) determines its delay behaviour (docs/pb-semantics.md §1).
#pragma once

#include "pipeprop/evaluation.hpp"

#include <cstddef>

#include "pipeprop/optim/hyperparameters.hpp"

namespace pipeprop::pb {

/// Header data that travels with a micro-batch through the pipeline (forward messages carry it to the last stage,
/// backward messages carry it, with the loss, back to stage 0).
template <class T>
struct micro_batch_info {
    std::size_t id = 0;            ///< n: 0-based index over the whole run
    std::size_t batch = 0;         ///< b: samples in it (1 <= b <= max_batch)
    std::size_t first_sample = 0;  ///< samples pushed before it (PipeMare warm-up clock, schedules)
    optim::hyperparameters<T> hyper{};  ///< hyperparameters of its update at every stage
    T loss = T(0);                 ///< mean loss over its N counted targets (nats); set by the last stage
    std::size_t correct = 0;       ///< counted targets whose arg-max logit equals the target; set by the last stage
    std::size_t targets = 0;       ///< N, its counted targets (b for a classifier); set by the last stage
};

/// A micro-batch whose backward has completed at every stage (its update is applied everywhere).
template <class T>
struct completed_micro_batch {
    std::size_t id = 0;       ///< n
    std::size_t batch = 0;    ///< b
    T loss = T(0);            ///< mean training loss of its forward per counted target (nats), computed with the
                              ///< PB forward weights
    std::size_t correct = 0;  ///< counted targets its forward predicted right (arg-max)
    std::size_t targets = 0;  ///< N, its counted targets (b for a classifier; the tokens for a token loss)
};

/// Result of pb::engine::evaluate (pipeprop/evaluation.hpp).
using pipeprop::evaluation;

}  // namespace pipeprop::pb
