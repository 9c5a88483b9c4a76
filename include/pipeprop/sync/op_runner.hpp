// pipeprop/sync/op_runner.hpp: what the stages of a synchronous step do with their op lists (sync/schedule.hpp): the
// op interpreter both of sync::schedule_executor's executors share (the flow graph calls it from each stage's node,
// the sequential executor in global_order()); it is the runner of the lane graph (lane_graph.hpp: deliver, ready,
// run_next).
//
// Per stage and step it keeps the op cursor, the boundary messages received per micro-batch, the loss totals of the
// last stage and the op spans. An op is F (stage 0 reads its micro-batch from the batch; a later stage copies the
// forward message's payload and targets out of the boundary channel into its slot; the last stage then computes the
// loss policy's totals and gradient with gradient_scale 1 / N, N the counted targets of the WHOLE batch: docs/pitfalls.md
// item 1), B / p1 or BW (the output gradient from the backward message; p1 sends the input gradient back), or W
// (p2 ADDS into the stage's gradient block). After the stage's last op of a step, its optimizer step (update_stage),
// unless the caller defers it (global gradient clipping); a plan of several consecutive steps (consecutive_steps)
// runs them without a barrier: the stage zeroes its gradient after update n and goes on with step n + 1's ops while
// its neighbours may still be in step n (messages carry the step number). A stage never reads another stage's
// memory: messages only (boundary_channel.hpp). Touched per stage only by the stage's own serial node or the one
// sequential thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/stage_error.hpp"
#include "pipeprop/sync/op_span.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/step_plan.hpp"

namespace pipeprop::sync {

/// The op interpreter over the stages `stages` (sync::stage over value type T) and the boundary channels between them
/// (forward[b]: stage b -> b + 1, backward[b]: b + 1 -> b), all owned by the executor and outliving this object (the
/// executor may rebuild the channels inside the vectors between steps). Loss: the loss policy.
template <class T, class Stage, class Loss>
class op_runner {
public:
    /// The boundary channels between neighbouring stages, owned by the executor.
    using channels = std::vector<std::unique_ptr<boundary_channel<T>>>;
    /// Targets per sample of the loss (1 for class labels, L for token targets).
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;

    /// Per-stage state of the running steps (micro-batch indices g over all steps of the plan: g = n * m + j).
    struct stage_runtime {
        const std::vector<op>* ops = nullptr;  ///< The stage's ops of the plan (schedule order).
        const std::vector<std::size_t>* slot_of = nullptr;  ///< [ops]: the activation slot each op uses.
        /// [steps]: number of ops before the optimizer update of step n.
        const std::vector<std::size_t>* update_at = nullptr;
        std::size_t next = 0;  ///< Index of the next op to run.
        std::size_t p2_done = 0;  ///< Backward-p2 ops done in the stage's current step.
        std::size_t updates = 0;  ///< Optimizer steps done (of the plan's steps).
        bool updated = false;  ///< True when all of the plan's optimizer steps are done.
        ///@{
        /// [steps * m]: boundary message headers received, forward and backward, by micro-batch g.
        std::vector<boundary_message> forward_in, backward_in;
        ///@}
        ///@{
        /// [steps * m]: 1 when micro-batch g's forward input / backward gradient has arrived.
        std::vector<char> has_forward, has_backward;
        ///@}
        std::vector<loss_totals> totals;  ///< Last stage: loss totals [steps * m], by micro-batch g.
        /// [steps]: sum of g^2 of the stage's gradient per step (its contribution to the gradient norm).
        std::vector<double> squared_gradient;
        std::vector<op_span> spans;  ///< The timed spans of the ops run (traces, cost measurement).
    };

    /// One step's input: the batch x [batch, input size], targets [batch, targets per sample], the counted targets
    /// N of the batch and the step's hyperparameters.
    struct step_input {
        const T* x = nullptr;  ///< The batch x [batch, input size] (stage 0).
        const std::int32_t* labels = nullptr;  ///< The targets [batch, targets_per_sample] (last stage).
        std::size_t counted = 0;  ///< Counted targets N of the batch (the loss is a mean over them).
        optim::hyperparameters<double> h{};  ///< The step's hyperparameters.
    };


    /// An interpreter over the executor's stages and its forward and backward boundary channels (all outlive it).
    op_runner(std::vector<std::unique_ptr<Stage>>& stages, channels& forward, channels& backward)
        : stages_(stages), forward_(forward), backward_(backward) {}

    /// Stage s's state of the current (or last) step.
    [[nodiscard]] const stage_runtime& runtime(std::size_t s) const { return runtime_.at(s); }
    /// The per-stage states of the current (or last) step, by stage.
    [[nodiscard]] const std::vector<stage_runtime>& runtimes() const noexcept { return runtime_; }

    /// Starts the plan pl's steps (pl.sc.steps of them; `inputs` one per step, each a batch of `batch` samples)
    /// numbered first_step, first_step + 1, ...; deferred_updates (one step only): the optimizer step waits for the
    /// caller (update_stage after global gradient clipping). Every stage's gradient block is zeroed.
    void begin_steps(const step_plan& pl, std::span<const step_input> inputs, std::size_t batch,
                     std::uint64_t first_step, bool deferred_updates) {
        const std::size_t m = pl.sc.micro_batches_per_step(), steps = pl.sc.steps, all = pl.sc.micro_batches;
        if (inputs.size() != steps || (deferred_updates && steps != 1))
            throw std::logic_error("pipeprop::sync::pipeline_executor: " + std::to_string(inputs.size()) +
                                   " inputs for a plan of " + std::to_string(steps) + " steps");
        step_ = first_step;
        m_ = m;
        deferred_updates_ = deferred_updates;
        sizes_.assign(m, batch / m);
        offsets_.assign(m, 0);
        for (std::size_t j = 0; j < batch % m; ++j) ++sizes_[j];
        for (std::size_t j = 1; j < m; ++j) offsets_[j] = offsets_[j - 1] + sizes_[j - 1];
        inputs_.assign(inputs.begin(), inputs.end());
        device_of_ = &pl.sc.device_of;
        device_order_ = &pl.sc.device_order;
        device_next_.assign(pl.sc.device_order.size(), 0);
        runtime_.resize(stages_.size());
        for (std::size_t s = 0; s < stages_.size(); ++s) {
            auto& rt = runtime_[s];
            rt.ops = &pl.sc.ops[s];
            rt.slot_of = &pl.slots[s].slot_of;
            rt.update_at = &pl.update_at[s];
            rt.next = 0;
            rt.p2_done = 0;
            rt.updates = 0;
            rt.updated = false;
            rt.forward_in.assign(all, boundary_message{});
            rt.backward_in.assign(all, boundary_message{});
            rt.has_forward.assign(all, 0);
            rt.has_backward.assign(all, 0);
            rt.totals.assign(all, loss_totals{});
            rt.squared_gradient.assign(steps, 0.0);
            rt.spans.clear();
            rt.spans.reserve(rt.ops->size() + steps);
            stages_[s]->zero_gradient();
        }
        t0_ = clock::now();  // the spans count from here
    }

    /// Records a message for stage s (checked: a micro-batch of one of the running steps).
    void deliver(std::size_t s, const boundary_message& msg) {
        auto& rt = runtime_[s];
        const bool fwd = msg.dir == direction::forward;
        const std::size_t steps = rt.squared_gradient.size();
        if (msg.micro_batch >= m_ || msg.sequence < step_ || msg.sequence - step_ >= steps)
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) +
                                   " received a message for micro-batch " + std::to_string(msg.micro_batch) +
                                   " of step " + std::to_string(msg.sequence) + " during steps " +
                                   std::to_string(step_) + " .. " + std::to_string(step_ + steps - 1));
        const std::size_t g = static_cast<std::size_t>(msg.sequence - step_) * m_ + msg.micro_batch;
        if ((fwd ? rt.has_forward : rt.has_backward)[g])
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) + " received the " +
                                   (fwd ? "forward" : "backward") + " message of micro-batch " +
                                   std::to_string(msg.micro_batch) + " of step " + std::to_string(msg.sequence) +
                                   " twice");
        (fwd ? rt.forward_in : rt.backward_in)[g] = msg;
        (fwd ? rt.has_forward : rt.has_backward)[g] = 1;
    }

    /// True when stage s's next op (or its optimizer step) can run: its input message has arrived.
    [[nodiscard]] bool ready(std::size_t s) const {
        const auto& rt = runtime_[s];
        if (update_due(s)) return !deferred_updates_;  // the optimizer step
        if (rt.next == rt.ops->size()) return false;
        if (!device_order_->empty()) {  // virtual stages: the device runs its stages' ops in its order
            const std::size_t d = (*device_of_)[s];
            const auto& order = (*device_order_)[d];
            if (device_next_[d] == order.size() || order[device_next_[d]] != s) return false;
        }
        const op o = (*rt.ops)[rt.next];
        if (o.kind == op_kind::forward) return s == 0 || rt.has_forward[o.micro_batch];
        if (is_backward_p1(o)) return s + 1 == stages_.size() || rt.has_backward[o.micro_batch];
        return true;
    }

    /// True when stage s has run all of its ops of its current step and not yet its optimizer step.
    [[nodiscard]] bool update_due(std::size_t s) const {
        const auto& rt = runtime_[s];
        return !rt.updated && rt.next == (*rt.update_at)[rt.updates];
    }

    /// Runs stage s's ops while they are ready; send(to, message) passes each outgoing message on.
    template <class Send>
    void run_ready(std::size_t s, Send&& send) {
        while (ready(s)) run_next(s, send);
    }

    /// Runs stage s's next op (or, after its last op, its optimizer step). Throws pipeprop::stage_error when a layer
    /// or the loss throws (stage, micro-batch, phase and step named).
    template <class Send>
    void run_next(std::size_t s, Send& send) {
        auto& rt = runtime_[s];
        auto& st = *stages_[s];
        const bool last = s + 1 == stages_.size();
        if (update_due(s)) {  // all ops of the step done: the optimizer step
            update_stage(s, T(1));
            return;
        }
        const op o = (*rt.ops)[rt.next];
        const std::size_t g = o.micro_batch, n = g / m_, j = g % m_, b = sizes_[j], slot = (*rt.slot_of)[rt.next];
        const step_input& in = inputs_[n];
        const std::uint64_t step = step_ + n;
        auto& act = st.slot(slot);
        const double t = now();
        bool send_forward = false, send_backward = false;
        const std::int32_t* sent_labels = nullptr;
        try {
        switch (o.kind) {
            case op_kind::forward: {
                std::int32_t* lab = st.labels(slot);
                if (s == 0) {
                    std::memcpy(act.input(), in.x + offsets_[j] * st.input_size(), b * st.input_size() * sizeof(T));
                    std::memcpy(lab, in.labels + offsets_[j] * targets_per_sample,
                                b * targets_per_sample * sizeof(std::int32_t));
                } else {
                    receive(s, *forward_[s - 1], rt.forward_in[g], j, act.input(), st.input_size(), lab);
                }
                st.forward(slot, b);
                if (last) {
                    // gradient of the MEAN loss over the batch's N counted targets (docs/pitfalls.md item 1)
                    rt.totals[g] = Loss::totals_and_gradient(
                        act.output(), lab, b, act.output_gradient(),
                        in.counted > 0 ? T(1) / static_cast<T>(in.counted) : T(1));
                } else {
                    send_forward = true;
                    sent_labels = lab;
                }
                break;
            }
            case op_kind::backward_input:
            case op_kind::backward_fused: {
                if (!last)
                    receive(s, *backward_[s], rt.backward_in[g], j, act.output_gradient(), st.output_size(), nullptr);
                if (o.kind == op_kind::backward_fused) {
                    st.backward_fused(slot, b);
                    ++rt.p2_done;
                } else {
                    st.backward_input(slot, b);
                }
                send_backward = s > 0;
                break;
            }
            case op_kind::backward_weight:
                st.backward_weight(slot, b);
                ++rt.p2_done;
                break;
            case op_kind::update:  // the schedules' lists end before the optimizer step, which follows them
                throw std::logic_error("pipeprop::sync::pipeline_executor: a U op inside a schedule's op list");
        }
        } catch (...) {
            rethrow_as_stage_error("pipeprop::sync::pipeline_executor", s, j, pipeprop::phase_name(o.kind),
                                   " (of step " + std::to_string(step) + ")");
        }
        // The span ends before its message leaves, so a receiver's span never starts before the sender's ends.
        rt.spans.push_back({s, span_kind_of(o.kind), j, t, now(), step});
        if (!device_order_->empty()) ++device_next_[(*device_of_)[s]];
        if (send_forward) send(s + 1, forward_[s]->send(direction::forward, j, step, b, act.output(), sent_labels));
        if (send_backward) send(s - 1, backward_[s - 1]->send(direction::backward, j, step, b, act.input_gradient()));
        ++rt.next;
    }

    /// The optimizer step of stage s for its current step with its gradient scaled by `scale` (clipping; 1
    /// otherwise); the stage's squared gradient norm (before scaling) is kept for the step's result, and when a step
    /// of the plan follows, the gradient block is zeroed for it. Throws std::logic_error unless all of the stage's
    /// ops of the step, backward-p2 work included, are done.
    void update_stage(std::size_t s, T scale) {
        auto& rt = runtime_[s];
        auto& st = *stages_[s];
        if (!update_due(s) || rt.p2_done != m_)
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) + " reached its "
                                   "optimizer step with " + std::to_string(rt.p2_done) + " of " +
                                   std::to_string(m_) + " micro-batches' backward-p2 done");
        const double t = now();
        rt.squared_gradient[rt.updates] = squared_norm(st.gradient());
        if (scale != T(1))
            for (auto& g : st.gradient()) g *= scale;
        st.update(inputs_[rt.updates].h);
        rt.spans.push_back({s, span_kind::optimizer, 0, t, now(), step_ + rt.updates});
        rt.p2_done = 0;
        if (++rt.updates == rt.squared_gradient.size())
            rt.updated = true;
        else
            st.zero_gradient();
    }

    /// The sequential executor: runs the plan's ops on the calling thread in its global order (pl.order), each stage's
    /// optimizer step of a previous step where it is due and the last ones at the end; a message goes straight to its
    /// stage. Throws std::logic_error when the order does not match the stages' lists, and as run_next.
    void run_in_global_order(const step_plan& pl) {
        auto send = [this](std::size_t to, const boundary_message& msg) { deliver(to, msg); };
        for (const auto g : pl.order) {
            if (update_due(g.stage) && ready(g.stage))  // its update of the previous step
                run_next(g.stage, send);
            if (runtime(g.stage).next != g.index || !ready(g.stage))
                throw std::logic_error("pipeprop::sync::pipeline_executor: global order broken at stage " +
                                       std::to_string(g.stage) + " op " + std::to_string(g.index));
            run_next(g.stage, send);
        }
        for (std::size_t s = 0; s < stages_.size(); ++s) run_ready(s, send);  // the optimizer steps
    }

    /// After the steps: throws std::logic_error naming the first stage s with local[s] that has not run all of its ops
    /// and optimizer steps.
    void check_finished(const std::vector<bool>& local) const {
        for (std::size_t s = 0; s < stages_.size(); ++s)
            if (local[s] && !runtime(s).updated)
                throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) +
                                       " did not finish its op list (stopped at op " + std::to_string(runtime(s).next) +
                                       ")");
    }

    /// After an interrupted run: takes back the step counts of the optimizer steps the run made on every stage (the
    /// failed steps do not count anywhere).
    void roll_back_step_counts() {
        for (std::size_t s = 0; s < stages_.size(); ++s) {
            auto& o = stages_[s]->optimizer();
            o.set_step_count(o.step_count() - runtime(s).updates);
        }
    }

    /// Sum of the squares of g in double, elements in order (deterministic): one stage's share of the global
    /// gradient norm, which adds the stages' shares in stage order.
    [[nodiscard]] static double squared_norm(std::span<const T> g) noexcept {
        double sq = 0;
        for (const T v : g) sq += static_cast<double>(v) * static_cast<double>(v);
        return sq;
    }

private:
    using clock = std::chrono::steady_clock;

    // Copies a received payload into the stage's slot, checking the sample count (docs/pitfalls.md item 3).
    void receive(std::size_t s, boundary_channel<T>& ch, const boundary_message& msg, std::size_t j, T* dst,
                 std::size_t elems, std::int32_t* labels_dst) {
        if (msg.batch != sizes_[j] || msg.micro_batch != j)
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) + ", micro-batch " +
                                   std::to_string(j) + ", " + (msg.dir == direction::forward ? "forward" : "backward") +
                                   " message: expected [" + std::to_string(sizes_[j]) + ", " + std::to_string(elems) +
                                   "], got [" + std::to_string(msg.batch) + ", " + std::to_string(elems) + "]");
        ch.receive(msg, dst, labels_dst);
    }

    double now() const { return std::chrono::duration<double>(clock::now() - t0_).count(); }

    std::vector<std::unique_ptr<Stage>>& stages_;
    channels& forward_;
    channels& backward_;
    std::vector<stage_runtime> runtime_;
    // the running steps
    std::vector<step_input> inputs_;  // [steps]
    // virtual stages (the plan's schedule): device of each stage, each device's order and its next entry; a device's
    // entries are touched only by its lane (all of its stages run on one serial node)
    const std::vector<std::size_t>* device_of_ = nullptr;
    const std::vector<std::vector<std::size_t>>* device_order_ = nullptr;
    std::vector<std::size_t> device_next_;
    std::size_t m_ = 1;               // micro-batches per step
    std::uint64_t step_ = 0;          // number of the plan's first step
    bool deferred_updates_ = false;
    std::vector<std::size_t> sizes_, offsets_;
    clock::time_point t0_{};
};

}  // namespace pipeprop::sync
