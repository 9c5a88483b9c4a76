// pipeprop/pb/optimizer.hpp: the optimizers a PB stage can apply its updates with, which mitigation policies each
// admits, and which hyperparameters an engine accepts for them (check_pb_hyperparameters).
//
// PB-paper (Kosson et al., arXiv 2003.11666) §4 and docs/pb-semantics.md §2-3 define PB's mitigations for
// momentum SGD. A PB engine's Optimizer template argument is
//   optim::sgd<T>    heavy-ball momentum SGD with L2 weight decay (the default): every mitigation policy. The
//                    momentum and weight decay come per micro-batch with optim::hyperparameters; Nesterov is not
//                    offered (spike compensation with D = 1 is Nesterov's form).
//   optim::adamw<T>  AdamW (decoupled weight decay, PyTorch's semantics; optim/adamw.hpp): the policies that work
//                    on weights and weight steps: none, weight_stashing, linear_weight_prediction in the
//                    weight-difference form, pipemare, optimizer_weight_prediction (AdamW's own step), nesterov
//                    (NAdamW instead of AdamW: optim/nadam.hpp) and pipedream_2bw. The update of a stage is the AdamW step number
//                    k + 1 of that
//                    stage (k: its updates so far), with the micro-batch's learning rate and decoupled weight decay
//                    (optim::hyperparameters; momentum must be 0) and the betas and eps of options::adamw.
//                    Spike compensation and LWP's velocity form are written in SGD's velocity: rejected at compile
//                    time (needs_momentum_sgd, pb/policies.hpp).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "pipeprop/optim/adamw.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/optim/sgd.hpp"
#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb {

/// True when O is momentum SGD over T.
template <class O, class T>
inline constexpr bool is_momentum_sgd = std::is_same_v<O, optim::sgd<T>>;
/// True when O is AdamW over T.
template <class O, class T>
inline constexpr bool is_adamw = std::is_same_v<O, optim::adamw<T>>;

/// The policy's compile-time momentum, or 0 when the momentum is a runtime hyperparameter.
template <mitigation_policy Policy>
constexpr double fixed_momentum_of() {
    if constexpr (Policy::fixed_momentum)
        return static_cast<double>(Policy::momentum);
    else
        return 0.0;
}

/// Compile-time check of a PB engine's optimizer (each failure is a sentence).
template <mitigation_policy Policy, class Optimizer, class T>
constexpr bool check_pb_optimizer() {
    static_assert(!(is_momentum_sgd<Optimizer, T> && fixed_momentum_of<Policy>() >= 1.0),
                  "pipeprop::pb: a policy's compile-time momentum of 1 does not decay momentum SGD's velocity (the "
                  "engine refuses momentum 1 at run time too); use a std::ratio below 1.");
    static_assert(is_momentum_sgd<Optimizer, T> || is_adamw<Optimizer, T>,
                  "pipeprop::pb: the Optimizer of a PB engine must be optim::sgd<T> (momentum SGD) or "
                  "optim::adamw<T> over the engine's value type T (pb/optimizer.hpp).");
    static_assert(!(is_adamw<Optimizer, T> && needs_momentum_sgd<Policy>),
                  "pipeprop::pb: spike compensation and the velocity form of linear weight prediction are defined for "
                  "momentum SGD only (PB-paper §4, pb-semantics.md §3); with optim::adamw<T> use policy::none, "
                  "policy::weight_stashing, policy::pipemare, linear_weight_prediction<lwp_form::weight_difference>, "
                  "policy::optimizer_weight_prediction<>, policy::nesterov or policy::pipedream_2bw.");
    return true;
}

/// Checks the hyperparameters of the micro-batches a PB engine pushes: values in range (optim::validate); with
/// momentum SGD a momentum in [0, 1) (1 does not decay the velocity); with AdamW a momentum of 0 (its betas are
/// options::adamw; weight_decay is then AdamW's decoupled decay); when the policy's momentum is a compile-time
/// constant, that momentum. Throws std::invalid_argument naming the value.
template <mitigation_policy Policy, class Optimizer, class T>
void check_pb_hyperparameters(const optim::hyperparameters<T>& h) {
    optim::validate(h, "pipeprop::pb::engine::set_hyperparameters");
    if constexpr (is_adamw<Optimizer, T>)
        if (h.momentum != T(0))
            throw std::invalid_argument("pipeprop::pb::engine: the momentum hyperparameter is " +
                                        std::to_string(h.momentum) +
                                        ", but the optimizer is AdamW (momentum must be 0; its betas are "
                                        "options::adamw)");
    if constexpr (is_momentum_sgd<Optimizer, T>)
        if (!(h.momentum < T(1)))
            throw std::invalid_argument("pipeprop::pb::engine::set_hyperparameters: momentum = " +
                                        std::to_string(h.momentum) +
                                        " must be in [0, 1) for momentum SGD (1 does not decay the velocity)");
    if constexpr (Policy::fixed_momentum)
        if (h.momentum != static_cast<T>(Policy::momentum))
            throw std::invalid_argument("pipeprop::pb::engine: policy " + std::string(Policy::name) +
                                        " has the compile-time momentum " + std::to_string(Policy::momentum) +
                                        ", but the hyperparameters give " + std::to_string(h.momentum));
}

}  // namespace pipeprop::pb
