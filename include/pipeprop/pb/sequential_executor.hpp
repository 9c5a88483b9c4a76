// pipeprop/pb/sequential_executor.hpp: the sequential reference executor of Pipelined Backpropagation.
//
// docs/pb-semantics.md §1 ("sequential equivalent"); PB-paper (Kosson et al., arXiv 2003.11666) §3. For each
// pushed micro-batch n, in the caller's thread:
//   1. every stage s (input side first) runs its forward with its forward weights "as after k_s updates",
//      k_s = max(n0, n - D_s) (n0: first micro-batch after the last drain): w(k_s), or for LWP the prediction made
//      from the state after k_s updates. They come from a per-stage history of D_s + 1 forward-weight versions,
//      written after every update (stage_state::update's forward_out);
//   2. the last stage computes the loss policy's mean loss over the micro-batch's counted targets and its gradient;
//   3. every stage (loss side first) runs its backward with its backward weights: the current w, the history
//      version k_s (weight stashing), or w - D_s delta (PipeMare);
//   4. every stage applies the update of micro-batch n.
// Stage boundaries are explicit copies of the boundary tensors (the output of s into the input of s + 1, the input
// gradient of s + 1 into the output gradient of s). push() returns the micro-batch it was given, completed.
// A layer that throws in a stage's forward or backward: pipeprop::stage_error naming the stage and micro-batch (the
// original exception nested); earlier stages of that micro-batch may have run, so pb::engine then refuses every
// later call (pb/engine.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "pipeprop/flush_subnormals.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/pb/buffer_counts.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/basic_stage_state.hpp"
#include "pipeprop/stage_error.hpp"

namespace pipeprop::pb {

/// Reference executor over `stages` (owned by the engine; they outlive this object); loss policy Loss
/// (loss/loss_policy.hpp), stages updated by Optimizer (pb/optimizer.hpp).
/// Network-free: it sees the network through its runtime_layer_stack<T>, so its code is compiled once per (Policy,
/// T, Loss, Optimizer), whatever the network.
template <mitigation_policy Policy, class T, loss_policy Loss, class Optimizer>
class sequential_executor final : public executor<T> {
public:
    using stack_type = runtime_layer_stack<T>;  ///< The network's layers, shared with the engine.
    using stage_type = basic_stage_state<Policy, T, Optimizer>;  ///< The stages' type (pb::basic_stage_state).
    using loss_type = Loss;  ///< The loss policy.

    /// Allocates one activation buffer per stage for up to max_b samples and the forward-weight histories.
    /// flush_subnormals: every push runs with subnormals flushed to zero (flush_subnormals.hpp).
    sequential_executor(const stack_type& stack, std::vector<stage_type>& stages, std::size_t max_b,
                        bool flush_subnormals = false)
        : stack_(stack), stages_(stages), labels_(max_b * Loss::targets_per_sample), flush_(flush_subnormals) {
        per_.reserve(stages.size());
        for (const stage_type& st : stages) {
            per_stage p;
            p.act = stack.make_activations(st.range(), max_b);
            p.ws = stack.make_workspaces(st.range(), max_b);
            // A history is needed when the forward weights differ from the current w: a delay, or a prediction.
            p.versions = forward_weight_versions(st.delay(), st.parameter_count(), st.predicted_forward());
            p.history.assign(p.versions * st.parameter_count(), T(0));
            per_.push_back(std::move(p));
        }
        resynchronize();
    }

    std::span<const completed_micro_batch<T>> push(const T* x, const std::int32_t* labels,
                                                   const micro_batch_info<T>& mb) override {
        using clock = std::chrono::steady_clock;
        const scoped_flush_subnormals flush(flush_);
        const std::size_t n = mb.id;
        const std::size_t b = mb.batch;
        const std::size_t count = stages_.size();
        std::copy_n(labels, b * Loss::targets_per_sample, labels_.data());
        std::copy_n(x, b * per_[0].act.input_size(), per_[0].act.input());

        // 1. forward, input side first.
        for (std::size_t s = 0; s < count; ++s) {
            const auto t0 = clock::now();
            stage_type& st = stages_[s];
            per_stage& p = per_[s];
            p.version = std::max(n0_, n >= st.delay() ? n - st.delay() : std::size_t{0});
            try {
                st.program().forward(stack_, forward_weights(s), p.act, b, p.ws, st.state());
            } catch (...) {
                rethrow_as_stage_error(who, s, n, "forward");
            }
            if (s + 1 < count) std::copy_n(p.act.output(), b * p.act.output_size(), per_[s + 1].act.input());
            p.busy += clock::now() - t0;
        }
        // 2. loss of the last stage (mean over the counted targets).
        per_stage& last = per_[count - 1];
        {
            const auto t0 = clock::now();
            const loss_totals t =
                Loss::totals_and_gradient(last.act.output(), labels_.data(), b, last.act.output_gradient(), T(0));
            result_ = {n, b, static_cast<T>(t.mean()), t.correct, t.count};
            last.busy += clock::now() - t0;
        }
        // 3. backward, loss side first.
        for (std::size_t s = count; s-- > 0;) {
            const auto t0 = clock::now();
            stage_type& st = stages_[s];
            per_stage& p = per_[s];
            try {
                if (st.fuses_update(b))  // dense layers' p2 fused into the update of step 4
                    st.backward_fusing_update(stack_, backward_weights(s), p.act, p.ws, s > 0, mb);
                else
                    st.program().backward(stack_, backward_weights(s), st.gradient(), p.act, b, p.ws, s > 0,
                                          st.state());
            } catch (...) {
                rethrow_as_stage_error(who, s, n, "backward");
            }
            if (s > 0) std::copy_n(p.act.input_gradient(), b * p.act.input_size(), per_[s - 1].act.output_gradient());
            st.record_delay(n - p.version);
            p.busy += clock::now() - t0;
        }
        // 4. update of micro-batch n at every stage; the new forward weights become history version n + 1.
        for (std::size_t s = 0; s < count; ++s) {
            const auto t0 = clock::now();
            per_stage& p = per_[s];
            stages_[s].update(mb, p.versions > 0 ? slot(s, n + 1) : nullptr);
            p.busy += clock::now() - t0;
        }
        used_ = true;
        return {&result_, 1};
    }

    /// Nothing is in flight between calls; the next micro-batch starts a new segment (n0 := its index).
    std::span<const completed_micro_batch<T>> drain() override {
        n0_ = stages_.empty() ? 0 : stages_[0].updates();
        return {};
    }

    [[nodiscard]] std::size_t in_flight() const noexcept override { return 0; }

    void resynchronize() override {
        n0_ = stages_.empty() ? 0 : stages_[0].updates();
        for (std::size_t s = 0; s < stages_.size(); ++s)
            if (per_[s].versions > 0) stages_[s].forward_weights(slot(s, n0_));
    }

    /// executor_kind::sequential.
    [[nodiscard]] executor_kind kind() const noexcept override { return executor_kind::sequential; }

    void fill_stats(std::vector<stage_stats>& out) const override {
        for (std::size_t s = 0; s < per_.size(); ++s) {
            const per_stage& p = per_[s];
            out[s].activation_slots = 1;
            out[s].in_flight_max = used_ ? 1 : 0;
            out[s].stash_bytes = p.act.bytes();
            out[s].weight_bytes += p.history.size() * sizeof(T);
            out[s].weight_copies += p.versions;
            out[s].busy_seconds = std::chrono::duration<double>(p.busy).count();
        }
    }

private:
    struct per_stage {
        typename stack_type::activations act;  // one micro-batch's buffers of the stage's range
        typename stack_type::workspaces ws;
        aligned_vector<T> history;  // [versions, P]: forward weights after k updates in row k mod versions
        std::size_t versions = 0;   // D_s + 1, or 0 when the forward always uses the current w
        std::size_t version = 0;    // k_s of the micro-batch being processed
        std::chrono::steady_clock::duration busy{};
    };

    T* slot(std::size_t s, std::size_t k) noexcept {
        per_stage& p = per_[s];
        return p.history.data() + (k % p.versions) * stages_[s].parameter_count();
    }
    std::span<const T> forward_weights(std::size_t s) noexcept {
        per_stage& p = per_[s];
        if (p.versions == 0) return stages_[s].weights();
        return {slot(s, p.version), stages_[s].parameter_count()};
    }
    std::span<const T> backward_weights(std::size_t s) noexcept {
        if constexpr (Policy::stashes_weights)
            if (per_[s].versions > 0) return forward_weights(s);
        return stages_[s].backward_weights();
    }

    static constexpr const char* who = "pipeprop::pb::sequential_executor";

    const stack_type& stack_;
    std::vector<stage_type>& stages_;
    std::vector<per_stage> per_;
    std::vector<std::int32_t> labels_;  // [max_b, targets_per_sample]
    std::size_t n0_ = 0;
    completed_micro_batch<T> result_{};
    bool used_ = false;
    bool flush_ = false;
};

}  // namespace pipeprop::pb
