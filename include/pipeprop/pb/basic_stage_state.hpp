// pipeprop/pb/basic_stage_state.hpp: the state one PB stage owns, and the per-stage operations both executors share.
//
// PB-paper (Kosson et al., arXiv 2003.11666) §3; docs/pb-semantics.md §1-3. To the stage_core (program, weights [P],
// gradient [P], running state) it adds the optimizer state, the policy state (see the accessors) and the update count.
// The executors decide WHEN the functions below run; they are the one definition of WHAT a stage computes, which is
// why the two executors give identical bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "pipeprop/runtime_layer_stack.hpp"
#include "pipeprop/stage_program.hpp"
#include "pipeprop/optim/adamw_prediction.hpp"
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/optim/nadam.hpp"
#include "pipeprop/pb/buffer_counts.hpp"
#include "pipeprop/pb/micro_batch.hpp"
#include "pipeprop/pb/optimizer.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pb/policy_parameters.hpp"
#include "pipeprop/pb/stage_kernels.hpp"
#include "pipeprop/pb/stats.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/stage_core.hpp"

namespace pipeprop::pb {

/// Per-stage parameters, optimizer state and policy state of a network with value type T under policy Policy,
/// updated by Optimizer (optim::sgd<T> or optim::adamw<T>, pb/optimizer.hpp). Network-free: the constructor reads
/// the network through its runtime_layer_stack<T>; stage_state<Net, ...> makes one from the network type.
/// Not copyable (large buffers); movable. All buffers are allocated by the constructor; no member function
/// allocates afterwards. Cache-line aligned: neighbouring stages in a std::vector, run on different cores by the
/// concurrent executor, never write to one line.
template <mitigation_policy Policy, class T, class Optimizer = optim::sgd<T>>
class alignas(64) basic_stage_state : public delay_observations {
    static_assert(check_pb_optimizer<Policy, Optimizer, T>());

public:
    using stack_type = runtime_layer_stack<T>;  ///< The network's layers, seen through the network-free base.
    using policy_type = Policy;  ///< The mitigation policy (pb/policies.hpp).
    using policy_parameters = typename Policy::parameters;  ///< The policy's runtime knobs (Policy::parameters).
    using optimizer_type = Optimizer;  ///< The optimizer (optim::sgd<T> or optim::adamw<T>).
    /// AdamW stages keep a second moment and step with optim::adamw_update; SGD stages with momentum_update.
    static constexpr bool adaptive = is_adamw<Optimizer, T>;

    /// Elements processed per pass of the fused update loop (fits L1 together with its w, v, g slices).
    static constexpr std::size_t update_chunk = 1024;
    /// The update needs each chunk's weights before it (LWP weight-difference form, PipeMare).
    static constexpr bool keeps_old_weights =
        (Policy::predicts_weights && Policy::form == lwp_form::weight_difference) || Policy::corrects_discrepancy;

    /// Stage `index` of `stage_count` of the network `stack`, with the stage's code `program` (stage_program.hpp),
    /// weights copied from the network's block `network_block` [stack.parameter_count]; storage (optional): the
    /// caller's parameter block [stack.parameter_count], whose slice the stage then updates in place; adamw: AdamW's
    /// betas and eps. Throws std::invalid_argument for a bad range, block size or policy parameter.
    basic_stage_state(const stack_type& stack, std::size_t index, std::size_t stage_count,
                      const basic_stage_program<T>& program, std::span<const T> network_block,
                      const policy_parameters& parameters, std::span<T> storage = {},
                      const optim::adamw_config& adamw = {})
        : core_(stack, index, program, network_block, storage, "pipeprop::pb::stage_state"),
          delay_(pb_delay(index, stage_count)),
          parameter_count_(core_.parameter_count()),
          horizon_(lwp_horizon<Policy, T>(delay_)),
          parameters_(parameters),
          accumulation_(checked_policy_parameters<Policy>(parameters, stage_count)) {
        if constexpr (adaptive) {
            adamw.validate();
            adamw_ = adamw;
        }
        if constexpr (Policy::corrects_discrepancy) {
            gamma_ = static_cast<T>(parameters.discrepancy_decay);
            one_minus_gamma_ = T(1) - gamma_;
        }
        if constexpr (Policy::double_buffered) previous_.assign(core_.weights().begin(), core_.weights().end());
        expected_delay_ = delay_;
        velocity_.assign(parameter_count_, T(0));
        if constexpr (adaptive) second_moment_.assign(parameter_count_, T(0));
        if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference)
            last_step_.assign(parameter_count_, T(0));
        if constexpr (Policy::corrects_discrepancy) {
            discrepancy_.assign(parameter_count_, T(0));
            corrected_.assign(parameter_count_, T(0));
            refresh_corrected();
        }
        if constexpr (Policy::spike_compensated && Policy::fixed_momentum)
            fixed_sc_ = Policy::template coefficients<T>(delay_);
        if constexpr (!adaptive && !keeps_old_weights && !Policy::double_buffered) {
            unfused_runs_ = stack.unfused_parameter_runs(core_.range());
            fusable_ = stack.fuses_momentum_update_in(core_.range());
        }
    }

    basic_stage_state(basic_stage_state&&) noexcept = default;  ///< Movable, not copyable.
    basic_stage_state& operator=(basic_stage_state&&) noexcept = default;  ///< Movable, not copyable.

    /// The stage's passes (stage_program.hpp): the executors run the stage's layers through it.
    [[nodiscard]] const basic_stage_program<T>& program() const noexcept { return core_.program(); }
    /// The stage's index s (0 = input side).
    [[nodiscard]] std::size_t index() const noexcept { return core_.index(); }
    /// D_s = 2 (S - 1 - s).
    [[nodiscard]] std::size_t delay() const noexcept { return delay_; }
    /// The stage's layers [begin, end) of the flattened network.
    [[nodiscard]] layer_range range() const noexcept { return core_.range(); }
    /// P: elements of the stage's parameter block (0 for a parameter-free stage).
    [[nodiscard]] std::size_t parameter_count() const noexcept { return parameter_count_; }
    /// The LWP horizon T of this stage (0 when the policy does not predict).
    [[nodiscard]] T horizon() const noexcept { return horizon_; }
    /// Updates applied so far.
    [[nodiscard]] std::size_t updates() const noexcept { return updates_; }

    ///@{
    /// Running state of the stage's stateful layers [state_count_of(range)] (layer_concept.hpp; empty when none):
    /// the training forward and backward of the stage update it, evaluation only reads it.
    [[nodiscard]] std::span<T> state() noexcept { return core_.state(); }
    /// The same, read only.
    [[nodiscard]] std::span<const T> state() const noexcept { return core_.state(); }
    ///@}
    ///@{
    /// The stage's current weights w [P]: the network's parameter block slice of its layers.
    [[nodiscard]] std::span<T> weights() noexcept { return core_.weights(); }
    /// The same, read only.
    [[nodiscard]] std::span<const T> weights() const noexcept { return core_.weights(); }
    ///@}
    ///@{
    /// The heavy-ball velocity v [P] (SGD), or AdamW's first moment.
    [[nodiscard]] std::span<T> velocity() noexcept { return velocity_; }
    /// The same, read only.
    [[nodiscard]] std::span<const T> velocity() const noexcept { return velocity_; }
    ///@}
    ///@{
    /// Buffer k of the optimizer's state, named Optimizer::state_buffer_names[k] in checkpoints: SGD's velocity
    /// (k = 0); AdamW's first moment (k = 0, the velocity() buffer) and second moment (k = 1). [P]
    [[nodiscard]] std::span<T> optimizer_state(std::size_t k) noexcept {
        return k == 0 ? std::span<T>(velocity_) : std::span<T>(second_moment_);
    }
    /// The same, read only.
    [[nodiscard]] std::span<const T> optimizer_state(std::size_t k) const noexcept {
        return k == 0 ? std::span<const T>(velocity_) : std::span<const T>(second_moment_);
    }
    ///@}
    ///@{
    /// The gradient buffer [P] the backward-p2 of the micro-batch being applied adds into (zero between updates).
    [[nodiscard]] std::span<T> gradient() noexcept { return core_.gradient(); }
    /// The same, read only.
    [[nodiscard]] std::span<const T> gradient() const noexcept { return core_.gradient(); }
    ///@}
    ///@{
    /// LWP weight-difference form: w(k) - w(k-1) [P]; empty otherwise.
    [[nodiscard]] std::span<T> last_step() noexcept { return last_step_; }
    /// The same, read only.
    [[nodiscard]] std::span<const T> last_step() const noexcept { return last_step_; }
    ///@}
    ///@{
    /// PipeMare: the EMA delta of weight steps [P]; empty otherwise.
    [[nodiscard]] std::span<T> discrepancy() noexcept { return discrepancy_; }
    /// The same, read only.
    [[nodiscard]] std::span<const T> discrepancy() const noexcept { return discrepancy_; }
    ///@}
    /// LWP velocity form: learning rate of the most recent update (its prediction uses it).
    [[nodiscard]] T last_learning_rate() const noexcept { return last_learning_rate_; }
    ///@{
    /// PipeDream-2BW: the older weight version W(j - 1) [P]; empty otherwise.
    [[nodiscard]] std::span<T> previous_weights() noexcept { return previous_; }
    /// The same, read only.
    [[nodiscard]] std::span<const T> previous_weights() const noexcept { return previous_; }
    ///@}
    ///@{
    /// Weight decay of the most recent update (the optimizer-step prediction with AdamW uses it); checkpoints set it.
    [[nodiscard]] T last_weight_decay() const noexcept { return last_weight_decay_; }
    /// Sets last_weight_decay() (a checkpoint restores it).
    void set_last_weight_decay(T lambda) noexcept { last_weight_decay_ = lambda; }
    ///@}

    /// Restores the counters and scalar policy state (checkpoint load; buffers are written through the spans above),
    /// then recomputes the derived buffers.
    void restore(std::size_t updates, T last_learning_rate) {
        updates_ = updates;
        last_learning_rate_ = last_learning_rate;
        if constexpr (adaptive && Policy::nesterov_update)
            mu_product_ = optim::nadam_momentum_product(adamw_.beta1, parameters_.momentum_decay, updates);
        if constexpr (Policy::double_buffered)  // before the first batch update both versions are W(0)
            if (updates < accumulation_) std::copy_n(core_.weights().data(), parameter_count_, previous_.data());
        refresh_corrected();
    }

    /// True when the forward uses LWP-predicted weights rather than w itself (policy predicts and T != 0).
    [[nodiscard]] bool predicted_forward() const noexcept { return predicts_forward<Policy, T>(delay_); }

    /// Writes the forward weights of the CURRENT state into out [P]: the LWP prediction (velocity form:
    /// w - (eta_last T) v; weight-difference form: w + T (w(k) - w(k-1))), or a copy of w. PB-paper §4.
    void forward_weights(T* out) const noexcept {
        for (std::size_t i = 0; i < parameter_count_; i += update_chunk)
            forward_weights_chunk(i, std::min(update_chunk, parameter_count_ - i), out, updates_);
    }

    /// The weights the backward of the CURRENT state uses when the policy does not stash: w, or for PipeMare
    /// (D > 0) the discrepancy-corrected w - D delta.
    [[nodiscard]] std::span<const T> backward_weights() const noexcept {
        if constexpr (Policy::double_buffered) return previous_;  // W(g - 1) for every micro-batch of batch g
        if constexpr (Policy::corrects_discrepancy)
            if (delay_ > 0) return corrected_;
        return core_.weights();
    }

    /// The learning rate the update of micro-batch mb uses at this stage (policy_learning_rate).
    [[nodiscard]] T learning_rate_for(const micro_batch_info<T>& mb) const noexcept {
        return policy_learning_rate<Policy>(mb.hyper.learning_rate, delay_, parameters_, mb.first_sample);
    }

    /// The update coefficients for micro-batch mb (docs/pb-semantics.md §2-3): heavy-ball, or spike compensation with
    /// a = m^D, b = (1 - m^D)/(1 - m); AdamW: those of its step updates() + 1 (bias corrections in double).
    /// lr: learning_rate_for(mb).
    [[nodiscard]] auto coefficients_for(const micro_batch_info<T>& mb, T lr) const noexcept {
        if constexpr (adaptive && Policy::nesterov_update)
            return optim::nadam_step_coefficients<T>(lr, mb.hyper.weight_decay, adamw_.beta1, adamw_.beta2, adamw_.eps,
                                                     parameters_.momentum_decay, updates_ + 1, mu_product_);
        else if constexpr (adaptive)
            return optim::adamw_step_coefficients<T>(lr, mb.hyper.weight_decay, adamw_.beta1, adamw_.beta2,
                                                     adamw_.eps, (updates_ + 1) / accumulation_);
        else
            return momentum_coefficients_for(mb, lr);
    }

    /// The heavy-ball coefficients for micro-batch mb and learning rate lr: momentum m and weight decay from mb's
    /// hyperparameters, with the spike-compensation a and b under an SC policy (PB paper §4; docs/pb-semantics.md §3).
    [[nodiscard]] optim::update_coefficients<T> momentum_coefficients_for(const micro_batch_info<T>& mb,
                                                                          T lr) const noexcept {
        if constexpr (Policy::spike_compensated) {
            const sc_coefficients<T> sc =
                Policy::fixed_momentum ? fixed_sc_ : spike_coefficients<T>(mb.hyper.momentum, delay_);
            return {lr, mb.hyper.momentum, mb.hyper.weight_decay, sc.a, sc.b, T(0)};
        } else if constexpr (Policy::nesterov_update) {
            return optim::nesterov(lr, mb.hyper.momentum, mb.hyper.weight_decay);
        } else {
            return optim::heavy_ball(lr, mb.hyper.momentum, mb.hyper.weight_decay);
        }
    }

    /// Whether the backward of b samples also applies the update of the layers that fuse backward-p2 into it (b = 1,
    /// momentum SGD, no weights from before the update needed): the executors then call backward_fusing_update.
    [[nodiscard]] bool fuses_update(std::size_t b) const noexcept { return fusable_ && b == 1; }

    /// The backward of micro-batch mb (fuses_update(mb.batch)) with the update of mb applied in place by the layers
    /// that fuse it (layer_stack::backward_momentum_update, with coefficients_for(mb)); bw: the weights the backward
    /// reads (weights(), or a stashed copy); act / ws: the micro-batch's buffers. update(mb, ...) must follow
    /// before the stage runs anything else (PB's op streams run U right after BW); it then updates only the other
    /// layers' parts. The same bits as the program's backward followed by update.
    void backward_fusing_update(const stack_type& stack, std::span<const T> bw,
                                typename stack_type::activations& act, typename stack_type::workspaces& ws,
                                bool input_gradient_needed, const micro_batch_info<T>& mb) {
        if constexpr (!adaptive) {
            program().backward_momentum_update(stack, bw, gradient(), weights(), velocity_,
                                               momentum_coefficients_for(mb, learning_rate_for(mb)), act, ws,
                                               input_gradient_needed, state());
            fused_pending_ = true;
        }
    }

    /// Applies the update of micro-batch mb from gradient() (docs/pb-semantics.md §1: after the forward and the backward
    /// of the tick), zeroes gradient(), advances the policy state (LWP step, PipeMare EMA and correction) and, when
    /// forward_out is not null, writes the forward weights of the new state into it [P] (see forward_weights).
    /// One fused pass over the block in chunks of update_chunk elements; optim::momentum_update is element-wise, so
    /// the chunking does not change any result. After backward_fusing_update: only the parts of the layers that did
    /// not fuse (their fused parts are updated already). No allocation, no exceptions.
    void update(const micro_batch_info<T>& mb, T* forward_out) noexcept {
        if constexpr (Policy::double_buffered)
            if ((updates_ + 1) % accumulation_ != 0) {  // not the last micro-batch of its batch: keep the gradient
                ++updates_;
                if (forward_out != nullptr) forward_weights(forward_out);
                return;
            }
        const T learning_rate = learning_rate_for(mb);  // once per update (PipeMare: a pow)
        const auto c = coefficients_for(mb, learning_rate);
        constexpr bool keeps_old = keeps_old_weights;
        if constexpr (!adaptive && !keeps_old) {
            if (fused_pending_) {  // the fusing layers' parts are updated (backward_fusing_update)
                fused_pending_ = false;
                for (const auto& [offset, count] : unfused_runs_)
                    for (std::size_t i = offset; i < offset + count; i += update_chunk) {
                        const std::size_t n = std::min(update_chunk, offset + count - i);
                        optim::momentum_update(n, core_.weights().data() + i, velocity_.data() + i,
                                               core_.gradient().data() + i, c);
                        std::fill_n(core_.gradient().data() + i, n, T(0));
                    }
                last_learning_rate_ = learning_rate;
                if (forward_out != nullptr) forward_weights(forward_out);
                ++updates_;
                return;
            }
        }
        alignas(64) T old[keeps_old ? update_chunk : 1];
        for (std::size_t i = 0; i < parameter_count_; i += update_chunk) {
            const std::size_t n = std::min(update_chunk, parameter_count_ - i);
            T* w = core_.weights().data() + i;
            if constexpr (keeps_old) std::copy_n(w, n, old);
            if constexpr (Policy::double_buffered) {  // W(j) becomes the older version; the mean gradient of the batch
                std::copy_n(w, n, previous_.data() + i);
                for (T* g = core_.gradient().data() + i; g != core_.gradient().data() + i + n; ++g)
                    *g /= static_cast<T>(accumulation_);
            }
            if constexpr (adaptive && Policy::nesterov_update)
                optim::nadam_update(n, w, velocity_.data() + i, second_moment_.data() + i, core_.gradient().data() + i,
                                    c);
            else if constexpr (adaptive)
                optim::adamw_update(n, w, velocity_.data() + i, second_moment_.data() + i, core_.gradient().data() + i, c);
            else
                optim::momentum_update(n, w, velocity_.data() + i, core_.gradient().data() + i, c);
            std::fill_n(core_.gradient().data() + i, n, T(0));
            if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference)
                kernels::difference(n, w, old, last_step_.data() + i);
            if constexpr (Policy::corrects_discrepancy) {
                kernels::ema_of_step(n, w, old, gamma_, one_minus_gamma_, discrepancy_.data() + i);
                if (delay_ > 0)
                    kernels::subtract_scaled(n, w, discrepancy_.data() + i, static_cast<T>(delay_),
                                             corrected_.data() + i);
            }
            if (forward_out != nullptr) {
                last_learning_rate_ = learning_rate;  // the prediction below uses this update's eta, lambda and t
                last_weight_decay_ = mb.hyper.weight_decay;
                forward_weights_chunk(i, n, forward_out, updates_ + 1);
            }
        }
        last_learning_rate_ = learning_rate;
        last_weight_decay_ = mb.hyper.weight_decay;
        if constexpr (adaptive && Policy::nesterov_update) mu_product_ = c.mu_product;
        ++updates_;
    }

    /// Bytes of every parameter-sized buffer this object holds (weights, velocity, gradient, policy buffers).
    [[nodiscard]] std::size_t weight_bytes() const noexcept { return weight_copies() * parameter_count_ * sizeof(T); }
    /// Number of parameter-sized buffers this object holds (pb::stage_weight_copies).
    [[nodiscard]] std::size_t weight_copies() const noexcept { return stage_weight_copies<Policy, Optimizer, T>; }

private:
    /// The forward weights of elements [i, i + n) of the state after `steps` updates (AdamW's bias corrections).
    void forward_weights_chunk(std::size_t i, std::size_t n, T* out, std::size_t steps) const noexcept {
        const T* w = core_.weights().data() + i;
        if constexpr (Policy::double_buffered) {  // W(g - 1) for micro-batch steps + D_s: W(j) or W(j - 1)
            const bool newest = (steps + delay_) / accumulation_ > steps / accumulation_;
            std::copy_n((newest ? w : previous_.data() + i), n, out + i);
            return;
        }
        if constexpr (Policy::predicts_weights) {
            if (horizon_ != T(0)) {
                if constexpr (Policy::form == lwp_form::optimizer_step && adaptive) {
                    if (steps == 0) std::copy_n(w, n, out + i);  // before the first step: w itself
                    else optim::adamw_predict(n, w, velocity_.data() + i, second_moment_.data() + i,
                                              optim::adamw_prediction<T>(last_learning_rate_, last_weight_decay_,
                                                                         adamw_.beta1, adamw_.beta2, adamw_.eps, steps,
                                                                         horizon_), out + i);
                } else if constexpr (Policy::form != lwp_form::weight_difference)  // velocity; SGD's optimizer step
                    kernels::subtract_scaled(n, w, velocity_.data() + i, last_learning_rate_ * horizon_, out + i);
                else
                    kernels::add_scaled(n, w, last_step_.data() + i, horizon_, out + i);
                return;
            }
        }
        std::copy_n(w, n, out + i);
    }

    void refresh_corrected() noexcept {
        if constexpr (Policy::corrects_discrepancy)
            if (delay_ > 0)
                kernels::subtract_scaled(parameter_count_, core_.weights().data(), discrepancy_.data(),
                                         static_cast<T>(delay_), corrected_.data());
    }

    basic_stage_core<T> core_;
    std::size_t delay_ = 0;
    std::size_t parameter_count_ = 0;
    T horizon_ = T(0);
    policy_parameters parameters_{};
    std::size_t accumulation_ = 1;  // micro-batches per update: PipeDream-2BW's N, 1 otherwise
    T gamma_ = T(0);
    T one_minus_gamma_ = T(1);
    sc_coefficients<T> fixed_sc_{};
    optim::adamw_config adamw_{};

    aligned_vector<T> velocity_;     // v [P] (AdamW: first moment m)
    aligned_vector<T> second_moment_;  // [P] AdamW only
    aligned_vector<T> last_step_;    // [P] LWP weight-difference form only
    aligned_vector<T> discrepancy_;  // [P] PipeMare only
    aligned_vector<T> corrected_;    // [P] PipeMare only
    aligned_vector<T> previous_;     // [P] PipeDream-2BW only: W(j - 1)
    T last_learning_rate_ = T(0);
    T last_weight_decay_ = T(0);
    double mu_product_ = 1.0;  // NAdam's P_t (Nesterov with AdamW)
    std::size_t updates_ = 0;
    std::vector<std::pair<std::size_t, std::size_t>> unfused_runs_;  // layer_stack::unfused_parameter_runs
    bool fusable_ = false;
    bool fused_pending_ = false;  // backward_fusing_update ran; update() applies the rest of that micro-batch's update
};

}  // namespace pipeprop::pb
