// examples/train/pb_executors.hpp: which PB engines --mode pb builds per network, and where their executors are
// compiled (pipeprop/pb/make_executor.hpp). The unit of --mode pb on a network declares the executors of its six
// momentum-SGD engines (one per --mitigation) extern; a unit of their own compiles them
// (examples/train/pb_executors.cpp.in), so that neither unit takes much over a minute to compile.
#pragma once

#include <pipeprop/layer_stack.hpp>
#include <pipeprop/loss/default_loss.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/optim/sgd.hpp>
#include <pipeprop/pb/make_executor.hpp>
#include <pipeprop/pb/policies.hpp>

#include "train/networks.hpp"

namespace train {

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

/// The policy types of --mitigation none, sc, lwp, sc_lwp, stash and pipemare.
namespace pb_policies {
using none = pipeprop::pb::policy::none;
using sc = pipeprop::pb::policy::spike_compensation<>;
using lwp = pipeprop::pb::policy::linear_weight_prediction<>;
using sc_lwp = pipeprop::pb::policy::sc_lwp<>;
using stash = pipeprop::pb::policy::weight_stashing;
using pipemare = pipeprop::pb::policy::pipemare;
using sgd = pipeprop::optim::sgd<float>;
using adamw = pipeprop::optim::adamw<float>;
}  // namespace pb_policies

}  // namespace train

/// The executors of the six momentum-SGD PB engines of --mode pb on network NET (a type of train/networks.hpp,
/// spelled without commas): EXTERN = extern declares them, empty compiles them in this unit.
#define PIPEPROP_TRAIN_PB_EXECUTORS(EXTERN, NET)                                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::none, float, train::pb_loss_t<NET>,         \
                                       train::pb_policies::sgd);                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::sc, float, train::pb_loss_t<NET>,           \
                                       train::pb_policies::sgd);                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::lwp, float, train::pb_loss_t<NET>,          \
                                       train::pb_policies::sgd);                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::sc_lwp, float, train::pb_loss_t<NET>,       \
                                       train::pb_policies::sgd);                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::stash, float, train::pb_loss_t<NET>,        \
                                       train::pb_policies::sgd);                                                    \
    PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, NET, train::pb_policies::pipemare, float, train::pb_loss_t<NET>,     \
                                       train::pb_policies::sgd)
