// pipeprop/pb/pipeline.hpp: the static Pipelined Backpropagation pipeline type, and its runtime-partition variant.
//
// PB-paper (Kosson et al., arXiv 2003.11666) §3-4; docs/pb-semantics.md §1, §3. A pipeline is a network cut
// into stages (pipeline_layout: split_at<...> or fine_grained<...>), a mitigation policy and a value type:
//
//   using net = pipeprop::network<pipeprop::shape<1, 28, 28>, pipeprop::conv2d<8, 3, 1, 1>, pipeprop::relu, ...>;
//   using pipe = pipeprop::pb::pipeline<net, pipeprop::fine_grained<>, pipeprop::pb::policy::sc_lwp<>>;
//   static_assert(pipe::stage_count == 4 && pipe::delays[0] == 6);
//   pipe p({.max_batch = 1, .executor = pipeprop::pb::executor_kind::concurrent});
//
// Stage count, boundaries, delays D_s = 2 (S - 1 - s), LWP horizons and (for a policy with a compile-time momentum)
// the spike-compensation coefficients are constexpr members. pipeline<Net, runtime_partition, Policy, T> takes the
// split points at run time (e.g. the CLI's --stages 2,5,8) and runs exactly the same code (pb::engine). The last two
// template arguments are the loss and optimizer policies (pb/engine.hpp; defaults: softmax cross-entropy, momentum
// SGD), e.g. pipeline<lm, fine_grained<>, policy::weight_stashing, float, token_cross_entropy<float, 64, 256>,
// optim::adamw<float>>.
#pragma once

#include <boost/mp11/algorithm.hpp>

#include <array>
#include <cstddef>
#include <vector>

#include "pipeprop/pb/engine.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pipeline_layout.hpp"

namespace pipeprop::pb {

/// Partition tag: stage boundaries chosen at run time (split points or layer ranges given to the constructor).
struct runtime_partition {};

/// Static PB pipeline: network Net cut by Partition (split_at<...> or fine_grained<...>), mitigation Policy, value
/// type T, loss policy Loss, optimizer Optimizer. Static-asserts (through pipeline_layout) that split points are
/// increasing and inside the network, and (pb::engine) that loss, optimizer and policy fit.
template <network_type Net, class Partition, mitigation_policy Policy, class T = float,
          class Loss = pipeprop::detail::default_loss_t<Net, T>, class Optimizer = optim::sgd<T>>
class pipeline : public engine<Net, Policy, T, Loss, Optimizer> {
    using base = engine<Net, Policy, T, Loss, Optimizer>;

public:
    /// The compile-time layout (pipeline_layout<Net, Partition, T>).
    using layout = pipeline_layout<Net, Partition, T>;
    /// S, the number of stages.
    static constexpr std::size_t stage_count = layout::stage_count;
    /// Stage s is layers [boundaries[s], boundaries[s + 1]).
    static constexpr auto boundaries = layout::boundaries;
    /// D_s = 2 (S - 1 - s): updates between a micro-batch's forward and its backward at stage s.
    static constexpr std::array<std::size_t, stage_count> delays = layout::delays;
    /// Micro-batches stage s holds in flight: D_s + 1.
    static constexpr std::array<std::size_t, stage_count> in_flight_bound = [] {
        std::array<std::size_t, stage_count> a{};
        for (std::size_t s = 0; s < stage_count; ++s) a[s] = delays[s] + 1;
        return a;
    }();
    /// LWP horizon T_s per stage (0 where the policy does not predict).
    static constexpr std::array<T, stage_count> horizons = [] {
        std::array<T, stage_count> a{};
        for (std::size_t s = 0; s < stage_count; ++s) a[s] = lwp_horizon<Policy, T>(delays[s]);
        return a;
    }();

    /// Stage S as a type: pipeprop::stage_type (layers, range, delay D_S) plus its LWP horizon and, for a policy
    /// whose momentum is a compile-time constant, its spike-compensation coefficients a_S = m^D_S and
    /// b_S = (1 - m^D_S) / (1 - m) (PB-paper §4).
    template <std::size_t S>
    struct stage : pipeprop::stage_type<layout, S> {
        /// The LWP horizon T of the stage (0 when the policy does not predict).
        static constexpr T horizon = lwp_horizon<Policy, T>(layout::delays[S]);
        /// The SC coefficients a_S, b_S (defaults a = 1, b = 0 unless the policy spike-compensates with a compile-time
        /// momentum).
        static constexpr sc_coefficients<T> spike_compensation = [] {
            if constexpr (Policy::spike_compensated && Policy::fixed_momentum)
                return Policy::template coefficients<T>(layout::delays[S]);
            else
                return sc_coefficients<T>{T(1), T(1)};
        }();
    };
    /// The stage types of this pipeline, in order (boost::mp11::mp_list<stage<0>, ...>; stages() is the engine's runtime state).
    struct stage_at {
        template <class I>
        using fn = stage<I::value>;  ///< stage<I::value>
    };
    /// The stage types, boost::mp11::mp_list<stage<0>, ..., stage<S - 1>>.
    using stage_list = boost::mp11::mp_transform_q<stage_at, boost::mp11::mp_iota_c<stage_count>>;

    /// The stages' code is instantiated from the stage types (static_stage_programs<layout>: each stage's passes
    /// over exactly its layers).
    /// The stage count bounds the lane plan at compile time: a pipeline of at most 2 stages does not compile the
    /// lane-placement cost probe (pb/make_executor.hpp, lane_plan_for).
    explicit pipeline(const options<Policy>& opt = {})
        : base(static_stage_programs<layout>(), opt, {}, typename base::template stage_bound<stage_count>{}) {}
    /// On parameter storage the caller owns [parameter_count] (see pb::engine's embedding constructor).
    pipeline(const options<Policy>& opt, std::span<T> storage)
        : base(static_stage_programs<layout>(), opt, storage, typename base::template stage_bound<stage_count>{}) {}
};

/// Spike-compensation coefficients a_s = m^D_s, b_s = (1 - m^D_s)/(1 - m) of every stage of a static pipeline
/// whose policy has a compile-time momentum (constant expressions; PB-paper §4).
template <class Pipeline>
requires(Pipeline::policy_type::spike_compensated&& Pipeline::policy_type::fixed_momentum) inline constexpr std::array<
    sc_coefficients<typename Pipeline::value_type>, Pipeline::stage_count> spike_coefficients_of = [] {
    std::array<sc_coefficients<typename Pipeline::value_type>, Pipeline::stage_count> a{};
    for (std::size_t s = 0; s < Pipeline::stage_count; ++s)
        a[s] = Pipeline::policy_type::template coefficients<typename Pipeline::value_type>(Pipeline::delays[s]);
    return a;
}();

/// PB pipeline whose stages are chosen at run time; same executors and state as the static pipeline.
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
class pipeline<Net, runtime_partition, Policy, T, Loss, Optimizer> : public engine<Net, Policy, T, Loss, Optimizer> {
    using base = engine<Net, Policy, T, Loss, Optimizer>;

public:
    /// Stages cut at `split_points` (strictly increasing, inside (0, layer count); empty: one stage). Throws
    /// std::invalid_argument naming the offending point (pipeprop::partition_at).
    pipeline(const std::vector<std::size_t>& split_points, const options<Policy>& opt)
        : base(partition_at(layer_stack<Net, T>::layer_count, split_points), opt) {}
    /// Stages given as layer ranges (checked by check_partition).
    pipeline(std::vector<layer_range> stages, const options<Policy>& opt) : base(std::move(stages), opt) {}
};

}  // namespace pipeprop::pb
