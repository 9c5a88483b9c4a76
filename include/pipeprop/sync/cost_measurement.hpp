// pipeprop/sync/cost_measurement.hpp: the simulator's inputs measured from the real layers and executors.
//
//   measure_layer_costs:  T_F, T_B, T_W of every layer alone: the shared direct probe (op_cost_probe.hpp,
//                         measure_op_costs) over one-layer ranges; what balanced_partition cuts by.
//   measure_stage_costs:  T_F, T_B, T_W, T_BW and T_opt of every stage of a cut, as the executor runs them: a
//                         single-threaded (sequential) pipeline_executor runs GPipe with and without 2BP and the
//                         medians of its op spans are taken, so the costs include what the executor adds to the
//                         layer work (boundary copies into and out of channel buffers, the loss on the last stage,
//                         span recording) but no cross-thread effects. It measures an executor, not layers, so it
//                         stays apart from the direct probe (the simulator is calibrated against executor runs).
//   costs_from_spans:     the same medians from any executor's spans (e.g. a concurrent run).
//   message_latency_from_spans: the delay the dependency model omits between a message's send and the start of
//                         the op that waited for it (copy-out, queueing, thread wake-up), from one step's spans.
// Times in seconds. The medians are pipeprop::detail::median (op_cost_probe.hpp), the one median of the probes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/op_cost_probe.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/sync/executor.hpp"
#include "pipeprop/sync/op_span.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"
#include "pipeprop/sync/simulator.hpp"

namespace pipeprop::sync {

/// Costs of one layer for one micro-batch, seconds. backward_weight is 0 for parameter-free layers.
struct layer_costs {
    double forward = 0;  ///< Forward, seconds.
    double backward_input = 0;  ///< Backward-p1 (input gradient), seconds.
    double backward_weight = 0;  ///< Backward-p2 (weight gradient), seconds.
    /// The three added, seconds.
    [[nodiscard]] double total() const noexcept { return forward + backward_input + backward_weight; }
};

/// True when the first layer of Stack reads token ids (op_cost_probe.hpp).
using pipeprop::first_layer_reads_token_ids;

/// T_F, T_B, T_W of each layer of Net (value type T) for micro-batches of b samples (2BP paper, Rae et al., arXiv
/// 2405.18047, the per-layer costs of its schedules): measure_op_costs (op_cost_probe.hpp) over the one-layer
/// ranges {i, i + 1}, `reps` rounds; forward and backward_input of layer i include the copies of its input and
/// output messages [b, in] / [b, out], as if the layer were a stage of its own. The first layer's p1 skips its
/// input gradient, as on a first stage; its input is token id 0 where it reads token ids, random values in
/// [-1, 1] otherwise. backward_weight is 0 for parameter-free layers. Seconds; the costs do not depend on the
/// parameter values (those of layer_stack::init_parameters(seed)). Throws std::invalid_argument, naming
/// pipeprop::sync::measure_layer_costs, when b == 0 or reps == 0.
template <network_type Net, class T = float>
[[nodiscard]] std::vector<layer_costs> measure_layer_costs(std::size_t b, std::size_t reps = 7,
                                                           std::uint64_t seed = 1) {
    using stack_t = layer_stack<Net, T>;
    std::vector<layer_range> layers;
    for (std::size_t i = 0; i < stack_t::layer_count; ++i) layers.push_back({i, i + 1});
    pipeprop::detail::check_probe_arguments(layers, stack_t::layer_count, b, reps,
                                            "pipeprop::sync::measure_layer_costs");
    std::vector<layer_costs> out;
    for (const op_costs& c : measure_op_costs<Net, T>(layers, b, {.rounds = reps, .seed = seed, .slots = {}}))
        out.push_back({c.forward, c.backward_input, c.backward_weight});
    return out;
}

/// Per-stage costs from executor spans: medians of the durations of each stage's F, p1, p2, fused p1+p2 and
/// optimizer spans (kinds absent from the spans keep stage_costs' defaults: 1 for F/B/W, -1 for BW (= B + W),
/// 0 for the optimizer). stages: the number of stages p.
[[nodiscard]] inline std::vector<stage_costs> costs_from_spans(const std::vector<op_span>& spans, std::size_t stages) {
    std::vector<stage_costs> c(stages);
    for (std::size_t s = 0; s < stages; ++s) {
        std::vector<double> d[5];
        for (const auto& sp : spans)
            if (sp.stage == s) d[static_cast<std::size_t>(sp.kind)].push_back(sp.end - sp.start);
        if (!d[0].empty()) c[s].forward = pipeprop::detail::median(d[0]);
        if (!d[1].empty()) c[s].backward_input = pipeprop::detail::median(d[1]);
        if (!d[2].empty()) c[s].backward_weight = pipeprop::detail::median(d[2]);
        if (!d[3].empty()) c[s].backward_fused = pipeprop::detail::median(d[3]);
        if (!d[4].empty()) c[s].optimizer = pipeprop::detail::median(d[4]);
    }
    return c;
}

/// Median delay (seconds) between the end of an op and the start of the op on the neighbouring stage that was
/// waiting for its message (F(j) on s waiting for F(j) of s - 1; B/BW(j) on s waiting for B/BW(j) of s + 1),
/// over the ops of one step of schedule sc whose stage was idle when the message was sent (its previous op had
/// ended). spans: that step's spans as pipeline_executor::spans() returns them (per stage in op-list order; the
/// optimizer spans are ignored). Returns 0 when no op waited. Throws std::invalid_argument when the spans do not
/// match the schedule's op lists.
[[nodiscard]] inline double message_latency_from_spans(const schedule& sc, const std::vector<op_span>& spans) {
    const std::size_t p = sc.stages, m = sc.micro_batches;
    std::vector<std::vector<const op_span*>> per(p);
    for (const auto& sp : spans)
        if (sp.kind != span_kind::optimizer && sp.stage < p) per[sp.stage].push_back(&sp);
    for (std::size_t s = 0; s < p; ++s)
        if (per[s].size() != sc.ops[s].size())
            throw std::invalid_argument("pipeprop::sync::message_latency_from_spans: stage " + std::to_string(s) +
                                        " has " + std::to_string(per[s].size()) + " spans for " +
                                        std::to_string(sc.ops[s].size()) + " ops");
    // end of F(j) and of p1(j) per stage
    std::vector<double> f_end(p * m, 0), p1_end(p * m, 0);
    for (std::size_t s = 0; s < p; ++s)
        for (std::size_t k = 0; k < sc.ops[s].size(); ++k) {
            const op o = sc.ops[s][k];
            if (o.kind == op_kind::forward) f_end[s * m + o.micro_batch] = per[s][k]->end;
            if (is_backward_p1(o)) p1_end[s * m + o.micro_batch] = per[s][k]->end;
        }
    std::vector<double> gaps;
    for (std::size_t s = 0; s < p; ++s)
        for (std::size_t k = 0; k < sc.ops[s].size(); ++k) {
            const op o = sc.ops[s][k];
            double dep = -1;
            if (o.kind == op_kind::forward && s > 0) dep = f_end[(s - 1) * m + o.micro_batch];
            if (is_backward_p1(o) && s + 1 < p) dep = p1_end[(s + 1) * m + o.micro_batch];
            const double prev_end = k > 0 ? per[s][k - 1]->end : 0.0;
            if (dep >= 0 && dep >= prev_end) gaps.push_back(std::max(0.0, per[s][k]->start - dep));
        }
    return pipeprop::detail::median(std::move(gaps));
}

/// Per-stage costs of the cut `stages` of Net for micro-batches of b samples, measured as the sequential executor
/// runs the ops (see the file comment): GPipe with m = `micro_batches` micro-batches, 2BP on (T_F, T_B, T_W) and
/// off (T_BW), `steps` steps of which the first is a warm-up; medians over the remaining spans. Learning rate 0
/// (momentum SGD's default momentum, no weight decay), so the weights do not move. Throws as pipeline_executor's constructor, and std::invalid_argument when b == 0 or
/// steps < 2.
template <network_type Net, class T = float>
[[nodiscard]] std::vector<stage_costs> measure_stage_costs(const std::vector<layer_range>& stages, std::size_t b,
                                                           std::size_t micro_batches = 4, std::size_t steps = 3,
                                                           std::uint64_t seed = 1) {
    if (b == 0 || steps < 2)
        throw std::invalid_argument("pipeprop::sync::measure_stage_costs: b must be >= 1 and steps >= 2");
    using stack_t = layer_stack<Net, T>;
    const std::size_t batch = b * micro_batches;
    std::mt19937_64 rng(derive_seed(seed, 2000));
    std::vector<T> x(batch * stack_t::input_shape::size);
    for (auto& v : x) v = first_layer_reads_token_ids<stack_t>() ? T(0) : uniform<T>(rng, T(-1), T(1));
    std::vector<std::int32_t> y(batch);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % stack_t::output_shape::size);
    const executor_options opt{.micro_batches = micro_batches, .max_batch = batch, .seed = seed,
                               .executor = executor_kind::sequential};
    std::vector<op_span> spans;
    auto run = [&](auto& ex) {
        for (std::size_t k = 0; k < steps; ++k) {
            ex.step(x, y, {.learning_rate = 0.0, .momentum = optim::sgd_config::default_momentum, .weight_decay = 0.0});
            if (k > 0) {
                const auto sp = ex.spans();
                spans.insert(spans.end(), sp.begin(), sp.end());
            }
        }
    };
    {
        pipeline_executor<Net, T, schedule_kind::gpipe, true> ex(stages, opt);
        run(ex);
    }
    {
        pipeline_executor<Net, T, schedule_kind::gpipe, false> ex(stages, opt);
        run(ex);
    }
    return costs_from_spans(spans, stages.size());
}

}  // namespace pipeprop::sync
