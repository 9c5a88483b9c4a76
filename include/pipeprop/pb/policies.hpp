// pipeprop/pb/policies.hpp: the mitigation policies of Pipelined Backpropagation, as compile-time types.
//
// PB-paper = Kosson et al., "Pipelined Backpropagation at Scale: Training Large Models without Batches", arXiv
// 2003.11666; docs/pb-semantics.md §3 gives the exact formulas implemented here. A policy is a plain type
// with static members that the stage code (pb/basic_stage_state.hpp) branches on with `if constexpr`; it carries no
// state. Its runtime knobs (if any) are in its nested `parameters` struct, passed through pb::options.
//
//   policy                       update (per stage s, delay D = D_s)       forward weights         backward weights
//   none                         heavy-ball                                w(n - D)                 w(n)
//   spike_compensation<M>        w -= eta (a v + b g), a = m^D,            w(n - D)                 w(n)
//                                b = (1 - m^D)/(1 - m)   (PB-paper §4)
//   linear_weight_prediction     heavy-ball                                w_hat = w - eta T v      w(n)
//     <Form, Horizon>                                                      or w + T (w(k) - w(k-1))
//   sc_lwp<M, Form, Horizon>     spike compensation                        w_hat as above           w(n)
//   weight_stashing              heavy-ball                                w(n - D)                 w(n - D) (stashed)
//   pipemare                     heavy-ball, eta_s = eta D^-(1-min(t/Tw,1)) w(n - D)                 w(n) - D delta
//   optimizer_weight_prediction  the optimizer's                           w - eta T delta (its step)  w(n)
//     <Horizon>                  (policy_optimizer_prediction.hpp)
//   nesterov                     Nesterov SGD / NAdamW                     w(n - D)                 w(n - D) (stashed)
//                                (policy_nesterov.hpp)
//   pipedream_2bw                every N micro-batches, mean gradient      W(g - 1), g = n / N      W(g - 1)
//                                (policy_pipedream_2bw.hpp)
//
// w(k): the stage's weights after k updates; n: the micro-batch's 0-based index; the forward of micro-batch n at
// stage s sees the state after max(n0, n - D_s) updates (n0: first micro-batch after the last drain).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ratio>
#include <string_view>
#include <type_traits>

#include "pipeprop/optim/momentum_update.hpp"

namespace pipeprop::pb {

/// Tag: the momentum is a runtime hyperparameter (set through optim::hyperparameters, per micro-batch).
struct runtime_momentum {};

/// Which form of Linear Weight Prediction (PB-paper §4; docs/pb-semantics.md §3).
enum class lwp_form : std::uint8_t {
    velocity,           ///< w_hat = w - eta T v  (eta: learning rate of the stage's most recent update)
    weight_difference,  ///< w_hat = w + T (w(k) - w(k-1))  (the stage's most recent weight step)
    optimizer_step,     ///< w_hat = w - eta T delta, delta the optimizer's own step (policy_optimizer_prediction.hpp)
};

/// LWP horizon rule: T = D_s, the stage's delay (the default: predict the weights the backward will see).
struct delay_horizon {
    /// The horizon T of a stage with delay D: D.
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept { return static_cast<double>(delay); }
};
/// LWP horizon rule: T = Ratio * D_s (e.g. std::ratio<1, 2> predicts half-way).
template <class Ratio>
struct scaled_horizon {
    static_assert(Ratio::num >= 0 && Ratio::den > 0, "pipeprop::pb::scaled_horizon: the ratio must be >= 0.");
    /// The horizon T of a stage with delay D: Ratio * D.
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept {
        return static_cast<double>(delay) * static_cast<double>(Ratio::num) / static_cast<double>(Ratio::den);
    }
};
/// LWP horizon rule: T = N for every stage, whatever its delay.
template <std::size_t N>
struct fixed_horizon {
    /// The horizon T of every stage: N.
    [[nodiscard]] static constexpr double horizon(std::size_t) noexcept { return static_cast<double>(N); }
};

/// Spike-compensation coefficients of one stage: a = m^D, b = (1 - m^D) / (1 - m) (b = D for m = 1).
template <class T>
struct sc_coefficients {
    T a = T(1);  ///< a = m^D: the weight of the velocity v in the update.
    T b = T(0);  ///< b = (1 - m^D) / (1 - m): the weight of the new gradient g in the update.
    friend constexpr bool operator==(const sc_coefficients&, const sc_coefficients&) = default;
};

/// Spike-compensation coefficients for momentum m and delay D, computed with exactly the arithmetic of
/// optim::spike_compensation (so a compile-time momentum and the same runtime momentum give identical bits).
template <class T>
[[nodiscard]] constexpr sc_coefficients<T> spike_coefficients(T m, std::size_t delay) noexcept {
    const auto c = optim::spike_compensation(T(0), m, T(0), delay);
    return {c.a, c.b_loss};
}

namespace detail {
template <class M>
struct momentum_of {
    static constexpr bool fixed = false;
    static constexpr double value = 0.0;
};
template <std::intmax_t Num, std::intmax_t Den>
struct momentum_of<std::ratio<Num, Den>> {
    static_assert(Num >= 0 && Num <= Den,
                  "pipeprop::pb: a compile-time momentum std::ratio<Num, Den> must lie in [0, 1].");
    static constexpr bool fixed = true;
    static constexpr double value = static_cast<double>(Num) / static_cast<double>(Den);
    template <class T>
    static constexpr T as = static_cast<T>(Num) / static_cast<T>(Den);
};
template <class M>
concept momentum_spec = std::is_same_v<M, runtime_momentum> || momentum_of<M>::fixed;
}  // namespace detail

/// Features every policy declares (defaults for policies that derive from it).
struct policy_base {
    static constexpr bool spike_compensated = false;      ///< update with SC coefficients (PB-paper §4)
    static constexpr bool predicts_weights = false;       ///< forward uses LWP-predicted weights (PB-paper §4)
    static constexpr lwp_form form = lwp_form::velocity;  ///< LWP form (when predicts_weights)
    static constexpr bool stashes_weights = false;        ///< backward uses the forward's weights (PipeDream)
    static constexpr bool corrects_discrepancy = false;   ///< PipeMare: backward uses w - D delta, LR warm-up
    static constexpr bool nesterov_update = false;        ///< Nesterov / NAdam update (pb/policy_nesterov.hpp)
    static constexpr bool double_buffered = false;        ///< PipeDream-2BW (pb/policy_pipedream_2bw.hpp)
    static constexpr bool fixed_momentum = false;         ///< momentum is a compile-time constant
    static constexpr double momentum = 0.0;               ///< that constant (when fixed_momentum)
    /// Runtime knobs of the policy (none by default).
    struct parameters {};
    /// LWP horizon T of a stage with delay D (unused unless predicts_weights).
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept { return static_cast<double>(delay); }
};

namespace policy {

/// Plain PB: momentum SGD per stage with delayed gradients, no mitigation (docs/pb-semantics.md §3 "none").
struct none : policy_base {
    static constexpr std::string_view name = "none";  ///< The policy's name in checkpoints (pb_policy) and reports.
};

/// Spike Compensation (PB-paper §4): v <- m v + g ; w <- w - eta (a v + b g), a = m^D_s, b = (1 - m^D_s)/(1 - m).
/// Momentum = runtime_momentum (from optim::hyperparameters) or a std::ratio<Num, Den> in [0, 1], in which case
/// `coefficients<T>(D)` is a constant expression and the runtime hyperparameters must carry the same momentum
/// (pb::engine throws std::invalid_argument otherwise). Static-asserts the ratio's range.
template <class Momentum = runtime_momentum>
struct spike_compensation : policy_base {
    static_assert(detail::momentum_spec<Momentum>,
                  "pipeprop::pb::policy::spike_compensation: the momentum must be pipeprop::pb::runtime_momentum or "
                  "a std::ratio<Num, Den> in [0, 1].");
    static constexpr std::string_view name = "sc";  ///< The policy's name in checkpoints (pb_policy) and reports.
    static constexpr bool spike_compensated = true;  ///< \copydoc policy_base::spike_compensated
    /// \copydoc policy_base::fixed_momentum
    static constexpr bool fixed_momentum = detail::momentum_of<Momentum>::fixed;
    static constexpr double momentum = detail::momentum_of<Momentum>::value;  ///< \copydoc policy_base::momentum
    /// SC coefficients for delay D (compile-time momentum only).
    template <class T>
    [[nodiscard]] static constexpr sc_coefficients<T> coefficients(std::size_t delay) noexcept
        requires(fixed_momentum) {
        return spike_coefficients<T>(detail::momentum_of<Momentum>::template as<T>, delay);
    }
};

/// Linear Weight Prediction (PB-paper §4): the forward of stage s uses w_hat = w - eta T v (Form = velocity) or
/// w_hat = w + T (w(k) - w(k-1)) (Form = weight_difference), T = Horizon::horizon(D_s) (default T = D_s); the
/// backward uses the current weights; the prediction never overwrites w. A stage whose horizon is 0 (the last
/// stage with the default horizon) uses w itself.
template <lwp_form Form = lwp_form::velocity, class Horizon = delay_horizon>
struct linear_weight_prediction : policy_base {
    static constexpr std::string_view name = "lwp";  ///< The policy's name in checkpoints (pb_policy) and reports.
    static constexpr bool predicts_weights = true;  ///< \copydoc policy_base::predicts_weights
    static constexpr lwp_form form = Form;  ///< \copydoc policy_base::form
    /// The horizon T of a stage with delay D: Horizon::horizon(D).
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept { return Horizon::horizon(delay); }
};

/// Spike Compensation + Linear Weight Prediction: the PB-paper's recommended combination (§4).
template <class Momentum = runtime_momentum, lwp_form Form = lwp_form::velocity, class Horizon = delay_horizon>
struct sc_lwp : policy_base {
    static_assert(detail::momentum_spec<Momentum>,
                  "pipeprop::pb::policy::sc_lwp: the momentum must be pipeprop::pb::runtime_momentum or a "
                  "std::ratio<Num, Den> in [0, 1].");
    static constexpr std::string_view name = "sc_lwp";  ///< The policy's name in checkpoints (pb_policy) and reports.
    static constexpr bool spike_compensated = true;  ///< \copydoc policy_base::spike_compensated
    static constexpr bool predicts_weights = true;  ///< \copydoc policy_base::predicts_weights
    static constexpr lwp_form form = Form;  ///< \copydoc policy_base::form
    /// \copydoc policy_base::fixed_momentum
    static constexpr bool fixed_momentum = detail::momentum_of<Momentum>::fixed;
    static constexpr double momentum = detail::momentum_of<Momentum>::value;  ///< \copydoc policy_base::momentum
    template <class T>
    /// \copydoc spike_compensation::coefficients
    [[nodiscard]] static constexpr sc_coefficients<T> coefficients(std::size_t delay) noexcept
        requires(fixed_momentum) {
        return spike_coefficients<T>(detail::momentum_of<Momentum>::template as<T>, delay);
    }
    /// The horizon T of a stage with delay D: Horizon::horizon(D).
    [[nodiscard]] static constexpr double horizon(std::size_t delay) noexcept { return Horizon::horizon(delay); }
};

/// Weight stashing (PipeDream, Narayanan et al. 2019; docs/pb-semantics.md §3): the backward of a micro-batch uses
/// exactly the weights its forward used, at the cost of D_s + 1 weight copies per stage. Heavy-ball update.
struct weight_stashing : policy_base {
    static constexpr std::string_view name = "stash";  ///< The policy's name in checkpoints (pb_policy) and reports.
    static constexpr bool stashes_weights = true;  ///< \copydoc policy_base::stashes_weights
};

/// PipeMare (Yang et al. 2019, arXiv 1910.05124; docs/pb-semantics.md §3): per-stage learning-rate warm-up
/// eta_s(t) = eta(t) * D_s^-(1 - min(t / T_w, 1)) (factor 1 for D_s = 0 or T_w = 0; t = samples trained before the
/// micro-batch) and discrepancy correction: the backward uses w - D_s delta, delta <- gamma delta + (1 - gamma)
/// (w(k) - w(k-1)) after every update (an EMA of the recent weight steps). Heavy-ball update.
struct pipemare : policy_base {
    static constexpr std::string_view name = "pipemare";  ///< The policy's name in checkpoints (pb_policy) and reports.
    static constexpr bool corrects_discrepancy = true;  ///< \copydoc policy_base::corrects_discrepancy
    /// The runtime knobs of PipeMare (passed through pb::options).
    struct parameters {
        double warmup_samples = 0.0;     ///< T_w in samples (0: no warm-up)
        double discrepancy_decay = 0.9;  ///< gamma of the EMA of weight steps, in [0, 1)
    };
};

}  // namespace policy

/// A mitigation policy: derives from policy_base and names itself.
template <class P>
concept mitigation_policy = std::is_base_of_v<policy_base, P> && requires {
    { P::name } -> std::convertible_to<std::string_view>;
    typename P::parameters;
};

/// True when P's formulas are written in momentum SGD's velocity (spike compensation, PB-paper §4; the velocity form
/// of linear weight prediction, w - eta T v): such a policy needs optim::sgd<T>. The other policies (none, weight
/// stashing, LWP's weight-difference form, PipeMare) work on weights and weight steps and take any PB optimizer
/// (pb/optimizer.hpp).
template <mitigation_policy P>
inline constexpr bool needs_momentum_sgd =
    P::spike_compensated || (P::predicts_weights && P::form == lwp_form::velocity);

/// The LWP horizon of a stage with delay D under policy P, as a value of type T (0 when P does not predict).
template <mitigation_policy P, class T>
[[nodiscard]] constexpr T lwp_horizon(std::size_t delay) noexcept {
    if constexpr (P::predicts_weights)
        return static_cast<T>(P::horizon(delay));
    else
        return T(0);
}

}  // namespace pipeprop::pb
