// pipeprop/op_cost_probe.hpp: the one direct cost probe of both engines: how long each op the engines
// run takes on the layers of a cut, timed on layer_stack itself (no executor, no thread, no channel).
//
//   const auto c = pipeprop::measure_op_costs<net>(ranges, /*b=*/4);   // one op_costs per range, seconds
//   c[s].forward + c[s].backward_fused + c[s].update                    // a PB tick of stage s (pb/lane_plan.hpp)
//   c[i].forward, c[i].backward_input, c[i].backward_weight             // T_F, T_B, T_W (sync/cost_measurement.hpp)
//
// The ops are those of op.hpp: F (forward, with the boundary copies of its input and output message), B
// (backward-p1, the input gradient, with the copies of its gradient messages), W (backward-p2, the weight gradient),
// BW (p1 and p2 fused per layer, as PB's backward and 2BP-off schedules run it) and U (the parameter-sized work of an
// update: the momentum update, and one parameter-sized copy, the unit of a weight stash or a predicted-weights
// write, which a mitigation policy adds as many of as it needs). pb::measure_tick_costs and
// sync::measure_layer_costs are thin functions over it; what an executor adds (scheduling, threads, the loss,
// channel buffers) is measured from the executor's own spans (sync::measure_stage_costs), not here.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/seed.hpp"

namespace pipeprop {

namespace detail {
/// Median of v: the middle value, the mean of the two middle ones for an even count, 0 for an empty v. The one
/// median of the cost probes (this header, pb/lane_plan.hpp, sync/cost_measurement.hpp).
[[nodiscard]] inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The argument checks of the cost probes, the message starting with `who`: throws std::invalid_argument for
/// b == 0, rounds == 0 or `ranges` not a partition of the layer_count layers (check_partition).
inline void check_probe_arguments(const std::vector<layer_range>& ranges, std::size_t layer_count, std::size_t b,
                                  std::size_t rounds, std::string_view who) {
    if (b == 0 || rounds == 0)
        throw std::invalid_argument(std::string(who) + ": the micro-batch size b and the number of rounds must be " +
                                    ">= 1, got b = " + std::to_string(b) + " and " + std::to_string(rounds) +
                                    " rounds");
    check_partition(ranges, layer_count, who);
}
}  // namespace detail

/// True when the first layer of Stack (a layer_stack) reads token ids (declares integer_input, layer_concept.hpp):
/// its network input must then hold valid ids.
template <class Stack>
[[nodiscard]] constexpr bool first_layer_reads_token_ids() {
    using first = typename Stack::template layer_type<0>;
    if constexpr (requires { first::integer_input; })
        return static_cast<bool>(first::integer_input);
    else
        return false;
}

/// Seconds one op of a layer range takes on one micro-batch of b samples (measure_op_costs); in, out and P are the
/// range's per-sample input and output sizes and its parameter count.
struct op_costs {
    double forward = 0;          ///< F: copy the input message [b, in] in, forward, copy the output [b, out] out
    double backward_input = 0;   ///< backward-p1: copy the output gradient [b, out] in, p1, copy the input gradient
                                 ///< [b, in] out (neither computed nor copied on the first range: nobody reads it)
    double backward_weight = 0;  ///< backward-p2: the weight gradient [P] added up; 0 for a parameter-free range
    double backward_fused = 0;   ///< BW: p1 and p2 fused per layer, with p1's copies (PB's backward, 2BP off)
    double update = 0;           ///< optim::momentum_update of the range's P parameters; 0 when P == 0
    double parameter_copy = 0;   ///< one copy of P parameters (a weight stash, a predicted-weights write); 0 when P == 0
};

/// Options of measure_op_costs.
struct op_cost_probe_options {
    std::size_t rounds = 9;  ///< timed rounds (every op of every range once each); the costs are their medians
    std::uint64_t seed = 1;  ///< initial weights (layer_stack::init_parameters) and the random inputs
    /// Activation slots of each range (empty: one per range; otherwise one entry >= 1 per range). Round r forwards
    /// into slot r mod n and runs the backward ops on slot (r + 1) mod n, which a forward wrote n - 1 rounds before,
    /// as in a pipeline holding n micro-batches in flight (PB's stage s: n = D_s + 1).
    std::vector<std::size_t> slots;
};

/// Per-range op costs (seconds, medians over opt.rounds rounds) of the cut `ranges` of Net (value type T) for
/// micro-batches of b samples: one op_costs per range, in order. Timed on layer_stack directly, on the weights of
/// layer_stack::init_parameters(opt.seed) and scratch copies of the initial running state (the costs do not
/// depend on the parameter values). Each round visits the ranges in turn, so that every range finds the caches as
/// the others left them, and runs per range: F (reading the previous range's output message; the first range
/// reads random values in [-1, 1], or token id 0 where the first layer reads token ids), then B and W on one slot
/// and BW on the same slot (order alternating between rounds, so that neither always finds the other's data in
/// cache; output gradients are random values in [-1, 1]), then U: optim::momentum_update and one copy over
/// min(P, 2^16) scratch elements, scaled by P / min(P, 2^16). One untimed round warms up first (caches, BLAS's
/// lazy allocations). Every buffer is allocated before the first round.
/// Throws std::invalid_argument (the message naming pipeprop::measure_op_costs) for b == 0, opt.rounds == 0,
/// `ranges` not a partition of the network's layers (non-empty, contiguous, in order, covering all:
/// check_partition) or opt.slots neither empty nor one entry >= 1 per range.
template <network_type Net, class T = float>
[[nodiscard]] std::vector<op_costs> measure_op_costs(const std::vector<layer_range>& ranges, std::size_t b,
                                                     const op_cost_probe_options& opt = {}) {
    using stack_t = layer_stack<Net, T>;
    constexpr std::string_view who = "pipeprop::measure_op_costs";
    detail::check_probe_arguments(ranges, stack_t::layer_count, b, opt.rounds, who);
    const std::size_t count = ranges.size();
    if (!opt.slots.empty() && opt.slots.size() != count)
        throw std::invalid_argument(std::string(who) + ": " + std::to_string(opt.slots.size()) +
                                    " slot counts for " + std::to_string(count) + " ranges");
    for (std::size_t s = 0; s < opt.slots.size(); ++s)
        if (opt.slots[s] == 0)
            throw std::invalid_argument(std::string(who) + ": range " + std::to_string(s) +
                                        " needs >= 1 activation slot");
    constexpr std::size_t update_probe = std::size_t{1} << 16;
    using clock = std::chrono::steady_clock;
    const auto seconds = [](clock::time_point t0, clock::time_point t1) {
        return std::chrono::duration<double>(t1 - t0).count();
    };

    stack_t stack;
    aligned_vector<T> weights(stack_t::parameter_count);
    stack.init_parameters(weights, opt.seed);
    std::vector<T> all_state(stack_t::state_count);
    stack.init_state(all_state);
    struct probed_range {
        std::vector<typename stack_t::activations> slots;
        typename stack_t::workspaces ws;
        std::vector<T> state;
        std::span<const T> w;
        bool input_gradient_needed = true;
    };
    std::vector<probed_range> probe(count);
    std::size_t max_p = 0, max_io = 0;
    for (std::size_t s = 0; s < count; ++s) {
        const layer_range r = ranges[s];
        probed_range& p = probe[s];
        const std::size_t n = opt.slots.empty() ? 1 : opt.slots[s];
        for (std::size_t k = 0; k < n; ++k) p.slots.push_back(stack.make_activations(r, b));
        p.ws = stack.make_workspaces(r, b);
        p.state.assign(all_state.begin() + static_cast<std::ptrdiff_t>(stack_t::state_offset[r.begin]),
                       all_state.begin() + static_cast<std::ptrdiff_t>(stack_t::state_offset[r.end]));
        p.w = {weights.data() + stack_t::parameter_offset[r.begin], stack_t::parameter_count_of(r)};
        p.input_gradient_needed = r.begin > 0;
        max_p = std::max(max_p, p.w.size());
        max_io = std::max({max_io, b * stack_t::activation_size[r.begin], b * stack_t::activation_size[r.end]});
    }
    // x0: the network input [b, activation_size[0]]; message: the forward message between ranges; grad_in: the
    // output gradients read, grad_out: where the input gradients go; dw: the weight gradients [P] (added up).
    std::mt19937_64 rng(derive_seed(opt.seed, 3000));
    aligned_vector<T> x0(b * stack_t::activation_size[0]), message(max_io), grad_in(max_io), grad_out(max_io),
        dw(max_p);
    for (auto& v : x0) v = first_layer_reads_token_ids<stack_t>() ? T(0) : uniform<T>(rng, T(-1), T(1));
    for (auto& v : grad_in) v = uniform<T>(rng, T(-1), T(1));
    // The update's scratch: w [n], v [n], g [n] and the copy's target, n = min(max P, 2^16). lr = 0: nothing moves.
    const std::size_t un = std::min(max_p, update_probe);
    aligned_vector<T> uw(un), uv(un), ug(un), ucopy(un);
    const optim::update_coefficients<T> coeffs = optim::heavy_ball(T(0), T(0), T(0));

    const auto forward = [&](std::size_t s, typename stack_t::activations& act) {
        std::copy_n(s == 0 ? x0.data() : message.data(), b * act.input_size(), act.input());
        stack.forward(probe[s].w, act, b, probe[s].ws, probe[s].state);
        std::copy_n(act.output(), b * act.output_size(), message.data());
    };
    for (std::size_t s = 0; s < count; ++s)  // every slot holds a forward's stashes before any backward reads it
        for (auto& act : probe[s].slots) forward(s, act);

    std::vector<std::vector<double>> f(count), p1(count), p2(count), bw(count), upd(count), cpy(count);
    for (std::size_t round = 0; round <= opt.rounds; ++round) {
        const bool timed = round > 0;  // round 0 warms up
        for (std::size_t s = 0; s < count; ++s) {
            probed_range& p = probe[s];
            auto& fwd = p.slots[round % p.slots.size()];
            auto& bwd = p.slots[(round + 1) % p.slots.size()];
            const std::span<T> g(dw.data(), p.w.size());
            auto t0 = clock::now();
            forward(s, fwd);
            auto t1 = clock::now();
            if (timed) f[s].push_back(seconds(t0, t1));

            const auto split = [&] {
                auto u0 = clock::now();
                std::copy_n(grad_in.data(), b * bwd.output_size(), bwd.output_gradient());
                stack.backward_input(p.w, bwd, b, p.ws, p.input_gradient_needed, p.state);
                if (p.input_gradient_needed) std::copy_n(bwd.input_gradient(), b * bwd.input_size(), grad_out.data());
                auto u1 = clock::now();
                if (!p.w.empty()) stack.backward_weight(p.w, g, bwd, b, p.ws);
                auto u2 = clock::now();
                if (timed) {
                    p1[s].push_back(seconds(u0, u1));
                    p2[s].push_back(p.w.empty() ? 0.0 : seconds(u1, u2));
                }
            };
            const auto fused = [&] {
                auto u0 = clock::now();
                std::copy_n(grad_in.data(), b * bwd.output_size(), bwd.output_gradient());
                stack.backward(p.w, g, bwd, b, p.ws, p.input_gradient_needed, p.state);
                if (p.input_gradient_needed) std::copy_n(bwd.input_gradient(), b * bwd.input_size(), grad_out.data());
                auto u1 = clock::now();
                if (timed) bw[s].push_back(seconds(u0, u1));
            };
            if (round % 2 == 0) {
                split();
                fused();
            } else {
                fused();
                split();
            }

            const std::size_t n = std::min(p.w.size(), un);
            const double scale = n == 0 ? 0.0 : static_cast<double>(p.w.size()) / static_cast<double>(n);
            t0 = clock::now();
            optim::momentum_update(n, uw.data(), uv.data(), ug.data(), coeffs);
            t1 = clock::now();
            std::copy_n(uw.data(), n, ucopy.data());
            const auto t2 = clock::now();
            if (timed) {
                upd[s].push_back(seconds(t0, t1) * scale);
                cpy[s].push_back(seconds(t1, t2) * scale);
            }
        }
    }
    std::vector<op_costs> costs(count);
    for (std::size_t s = 0; s < count; ++s)
        costs[s] = {detail::median(f[s]),  detail::median(p1[s]),  detail::median(p2[s]),
                    detail::median(bw[s]), detail::median(upd[s]), detail::median(cpy[s])};
    return costs;
}

}  // namespace pipeprop
