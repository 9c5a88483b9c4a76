// pipeprop/sync/step_results.hpp: the synchronous executor's whole-network reductions, each in a fixed order so that
// a run is bit-reproducible (docs/pitfalls.md item 7): the L2 norm of the whole gradient over all stages (gradient
// clipping) and the step_result of each step just run (loss, correct and counted targets over its micro-batches,
// gradient norm over the stages).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/sync/executor_options.hpp"

namespace pipeprop::sync::detail {

/// L2 norm over the gradient blocks of `stages` (pointers to stages with gradient()), in double: each stage's share
/// squared_norm(gradient) (elements in order), added in stage order (the same sum the steps' results report).
template <class Stages, class SquaredNorm>
[[nodiscard]] double global_gradient_norm(const Stages& stages, SquaredNorm squared_norm) {
    double sum = 0;
    for (const auto& st : stages) sum += squared_norm(st->gradient());
    return std::sqrt(sum);
}

/// The results of the k = in.size() steps just run into results [k], each of `batch` samples in m micro-batches,
/// `seconds` the wall time of all of them: step n's loss is the sum of totals_of(n m + j).loss_sum over j in order,
/// divided by its counted targets N (in[n].counted where the last stage runs here, the totals' counts otherwise; 0
/// when N == 0), its correct the sum of theirs, its gradient norm the square root of the stages' squared norms
/// (runtimes[s].squared_gradient[n]) added in stage order.
template <class Input, class TotalsOf, class Runtimes>
void reduce_step_results(std::vector<step_result>& results, std::span<const Input> in, std::size_t batch,
                         std::size_t m, double seconds, bool last_here, TotalsOf totals_of, const Runtimes& runtimes) {
    const std::size_t k = in.size();
    results.assign(k, step_result{});
    for (std::size_t n = 0; n < k; ++n) {
        step_result& r = results[n];
        r.batch = batch;
        r.micro_batches = m;
        r.seconds = seconds / static_cast<double>(k);
        std::size_t noted = 0;
        for (std::size_t j = 0; j < m; ++j) {  // fixed order: bit-reproducible
            const loss_totals& t = totals_of(n * m + j);
            r.loss += t.loss_sum;
            r.correct += t.correct;
            noted += t.count;
        }
        r.targets = last_here ? in[n].counted : noted;
        r.loss = r.targets > 0 ? r.loss / static_cast<double>(r.targets) : 0.0;
        double sq = 0;  // the stages' shares in stage order (global_gradient_norm)
        for (const auto& rt : runtimes) sq += rt.squared_gradient[n];
        r.gradient_norm = std::sqrt(sq);
    }
}

}  // namespace pipeprop::sync::detail
