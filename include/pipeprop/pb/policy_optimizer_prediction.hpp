// pipeprop/pb/policy_optimizer_prediction.hpp: optimizer-aware linear weight prediction, a PB mitigation policy.
//
// PipeOptim (Guan et al., "PipeOptim: Ensuring Effective 1F1B Schedule with Optimizer-Dependent Weight
// Prediction", arXiv 2312.00839, its method section): the forward of stage s uses the weights its optimizer would
// reach T updates ahead if its most recent step repeated, w_hat = w - eta T delta, T = Horizon::horizon(D_s) (default
// D_s, as LWP in PB-paper §4). delta is the optimizer's own step direction of the CURRENT state (after k updates):
//   optim::sgd<T>    delta = v (heavy-ball velocity): w_hat = w - eta_last T v, LWP's velocity form, bit for bit;
//   optim::adamw<T>  delta = m_hat / (sqrt(v_hat) + eps) + lambda w, bias corrections of step k, eta and lambda of
//                    the most recent update (optim/adamw_prediction.hpp).
// Before the first update (k = 0) the forward uses w. The backward uses the current weights; the prediction never
// replaces w. docs/pb-semantics.md §3 "Optimizer-aware LWP".
#pragma once

#include <string_view>

#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb::policy {

/// Optimizer-aware linear weight prediction (see the file comment); Horizon as for linear_weight_prediction
/// (delay_horizon, scaled_horizon<Ratio>, fixed_horizon<N>). Works with optim::sgd<T> and optim::adamw<T>.
template <class Horizon = delay_horizon>
struct optimizer_weight_prediction : policy_base {
    static constexpr std::string_view name = "lwp_opt";  ///< the --mitigation key and checkpoint tag
    static constexpr bool predicts_weights = true;        ///< the forward uses predicted weights
    static constexpr lwp_form form = lwp_form::optimizer_step;  ///< w - lr T delta, delta the optimizer's own step
    /// The prediction horizon T (in updates) of a stage of delay D_s (Horizon::horizon).
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept { return Horizon::horizon(delay); }
};

}  // namespace pipeprop::pb::policy
