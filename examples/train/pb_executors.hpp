// examples/train/pb_executors.hpp: the PB engines --mode pb builds per network, and where their code is compiled:
// --stages parsing and the stages' code (static for the compile-time cuts, dynamic for split points), the loss per
// network, the ten mitigation policies, and the executors (pipeprop/pb/make_executor.hpp). The executors do not
// depend on the network, only on the policy and the loss: the unit of --mode pb on a network compiles its stage
// code and declares the executors of its ten momentum-SGD engines extern; one unit per loss type compiles them
// (examples/train/pb_executors.cpp.in: one for every image network, one for the text networks).
#pragma once

#include <pipeprop/layer_stack.hpp>
#include <pipeprop/pipeline_layout.hpp>
#include <pipeprop/stage_program.hpp>
#include <pipeprop/loss/default_loss.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/optim/sgd.hpp>
#include <pipeprop/pb/make_executor.hpp>
#include <pipeprop/pb/policies.hpp>
#include <pipeprop/pb/policy_nesterov.hpp>
#include <pipeprop/pb/policy_optimizer_prediction.hpp>
#include <pipeprop/pb/policy_pipedream_2bw.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/networks.hpp"

namespace train {

/// Parses --stages for network Net: "layer" (every weight layer starts a stage, normalization and parameter-free
/// layers attach: pipeprop::weight_layer_stages), "fine" (every parametric layer starts a stage, parameter-free
/// layers attach), "fine-own" (every layer its own stage) or split points "2,5,8". Throws std::invalid_argument
/// naming the offending text or point.
template <class Net>
std::vector<pipeprop::layer_range> parse_stages(const std::string& text) {
    using pipeprop::fine_grained;
    using pipeprop::parameter_free;
    if (text == "layer") return pipeprop::stage_ranges<pipeprop::pipeline_layout<Net, pipeprop::weight_layer_stages>>();
    if (text == "fine") return pipeprop::stage_ranges<pipeprop::pipeline_layout<Net, fine_grained<>>>();
    if (text == "fine-own")
        return pipeprop::stage_ranges<pipeprop::pipeline_layout<Net, fine_grained<parameter_free::own_stage>>>();
    std::vector<std::size_t> points;
    std::size_t start = 0;  // every comma-separated item, also an empty one ("", "2,", "2,,5")
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        start = comma + 1;
        std::size_t used = 0;
        unsigned long long v = 0;
        try {
            v = std::stoull(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size() || item[0] < '0' || item[0] > '9')  // stoull takes "-1" as 2^64 - 1
            throw std::invalid_argument("--stages: '" + item +
                                        "' is not a split point (expected layer, fine, fine-own or "
                                        "comma-separated layer indices such as 2,5,8, each between 1 and the "
                                        "layer count - 1)");
        points.push_back(static_cast<std::size_t>(v));
    }
    auto ranges = pipeprop::partition_at(pipeprop::layer_stack<Net, float>::layer_count, points);
    pipeprop::check_cuts_allowed<pipeprop::layer_stack<Net, float>>(ranges);
    return ranges;
}

/// The stages' code of a compile-time layout: static_stage_programs (stage_program.hpp; a stage type adds no code of
/// its own, since the layer code is generated per layer type).
template <class Layout>
std::vector<pipeprop::stage_program<typename Layout::stack_type>> layout_stage_programs() {
    return pipeprop::static_stage_programs<Layout>();
}

/// The stages' code for --stages `text` on network Net: "layer", "fine" and "fine-own" are compile-time layouts
/// (layout_stage_programs); split points ("2,5,8", chosen at run time) are the dynamic variant
/// (dynamic_stage_programs). Throws std::invalid_argument as parse_stages. Not inline: the main program compiles
/// it in the network's --mode pb unit (PIPEPROP_TRAIN_PB_STAGE_PROGRAMS).
template <class Net>
std::vector<pipeprop::stage_program<pipeprop::layer_stack<Net, float>>> pb_stage_programs(const std::string& text) {
    using pipeprop::fine_grained;
    using pipeprop::parameter_free;
    using pipeprop::pipeline_layout;
    if (text == "layer") return layout_stage_programs<pipeline_layout<Net, pipeprop::weight_layer_stages, float>>();
    if (text == "fine") return layout_stage_programs<pipeline_layout<Net, fine_grained<>, float>>();
    if (text == "fine-own")
        return layout_stage_programs<pipeline_layout<Net, fine_grained<parameter_free::own_stage>, float>>();
    return pipeprop::dynamic_stage_programs<pipeprop::layer_stack<Net, float>>(parse_stages<Net>(text));
}

/// The loss of --mode pb on network Net: softmax cross-entropy on an image dataset, or per-token cross-entropy on
/// next-token sequences of a text corpus (a sequence model).
template <class Net, bool = is_sequence_model<Net>>
struct pb_loss_of {
    using type = pipeprop::detail::default_loss_t<Net, float>;
};
template <class Net>
struct pb_loss_of<Net, true> {
    using out = typename pipeprop::layer_stack<Net, float>::output_shape;
    using type = pipeprop::token_cross_entropy<float, out::dims[0], out::dims[1]>;
};
template <class Net>
using pb_loss_t = typename pb_loss_of<Net>::type;

/// The policy types of --mitigation none, sc, lwp, lwp_wd (LWP's weight-difference form), sc_lwp, stash,
/// pipemare, lwp_opt (optimizer-aware LWP), nesterov (Nesterov / NAdam look-ahead) and 2bw (PipeDream-2BW).
namespace pb_policies {
using none = pipeprop::pb::policy::none;
using sc = pipeprop::pb::policy::spike_compensation<>;
using lwp = pipeprop::pb::policy::linear_weight_prediction<>;
using lwp_wd = pipeprop::pb::policy::linear_weight_prediction<pipeprop::pb::lwp_form::weight_difference>;
using sc_lwp = pipeprop::pb::policy::sc_lwp<>;
using stash = pipeprop::pb::policy::weight_stashing;
using pipemare = pipeprop::pb::policy::pipemare;
using lwp_opt = pipeprop::pb::policy::optimizer_weight_prediction<>;
using nesterov = pipeprop::pb::policy::nesterov;
using two_bw = pipeprop::pb::policy::pipedream_2bw;
using sgd = pipeprop::optim::sgd<float>;
using adamw = pipeprop::optim::adamw<float>;
}  // namespace pb_policies

}  // namespace train

/// The stage code (pb_stage_programs) of --mode pb on network NET (a type of train/networks.hpp, spelled without
/// commas): EXTERN = extern declares it, empty compiles it in this unit.
#define PIPEPROP_TRAIN_PB_STAGE_PROGRAMS(EXTERN, NET)                                                               \
    EXTERN template std::vector<pipeprop::stage_program<pipeprop::layer_stack<NET, float>>>                         \
    train::pb_stage_programs<NET>(const std::string&)

/// The executors of the ten momentum-SGD PB engines of --mode pb with loss LOSS (train::pb_loss_t of a network,
/// spelled without commas), for every network with that loss (the executors are network-free: make_executor.hpp):
/// EXTERN = extern declares them, empty compiles them in this unit.
#define PIPEPROP_TRAIN_PB_EXECUTORS(EXTERN, LOSS)                                                                   \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::none, float, LOSS, train::pb_policies::sgd);     \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::sc, float, LOSS, train::pb_policies::sgd);       \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::lwp, float, LOSS, train::pb_policies::sgd);      \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::lwp_wd, float, LOSS, train::pb_policies::sgd);   \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::sc_lwp, float, LOSS, train::pb_policies::sgd);   \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::stash, float, LOSS, train::pb_policies::sgd);    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::pipemare, float, LOSS, train::pb_policies::sgd); \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::lwp_opt, float, LOSS, train::pb_policies::sgd);  \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::nesterov, float, LOSS, train::pb_policies::sgd); \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, train::pb_policies::two_bw, float, LOSS, train::pb_policies::sgd)
