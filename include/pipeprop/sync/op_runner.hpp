// pipeprop/sync/op_runner.hpp: what the stages of a synchronous step do with their op lists (sync/schedule.hpp): the
// op interpreter both of sync::schedule_executor's executors share (the flow graph calls it from each stage's node,
// the sequential executor in global_order()); it is the runner of the lane graph (lane_graph.hpp: deliver, ready,
// run_next).
//
// Per stage and step it keeps the op cursor, the boundary messages received per micro-batch, the loss totals of the
// last stage and the op spans. An op is F (stage 0 reads its micro-batch from the batch; a later stage copies the
// forward message's payload and targets out of the boundary channel into its slot; the last stage then computes the
// loss policy's totals and gradient with gradient_scale 1 / N, N the counted targets of the WHOLE batch: pitfalls.md
// item 1), B / p1 or BW (the output gradient from the backward message; p1 sends the input gradient back), or W
// (p2 ADDS into the stage's gradient block). After the last op, the optimizer step (update_stage), unless the caller
// defers it (global gradient clipping). A stage never reads another stage's memory: messages only
// (boundary_channel.hpp). Touched per stage only by the stage's own serial node or the one sequential thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
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
    using channels = std::vector<std::unique_ptr<boundary_channel<T>>>;
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;

    /// Per-stage state of the running step.
    struct stage_runtime {
        const std::vector<op>* ops = nullptr;
        const std::vector<std::size_t>* slot_of = nullptr;
        std::size_t next = 0;
        std::size_t p2_done = 0;
        bool updated = false;
        std::vector<boundary_message> forward_in, backward_in;  // [m] headers received, by micro-batch
        std::vector<char> has_forward, has_backward;
        std::vector<loss_totals> totals;                         // last stage: [m]
        std::vector<op_span> spans;
    };


    op_runner(std::vector<std::unique_ptr<Stage>>& stages, channels& forward, channels& backward)
        : stages_(stages), forward_(forward), backward_(backward) {}

    /// Stage s's state of the current (or last) step.
    [[nodiscard]] const stage_runtime& runtime(std::size_t s) const { return runtime_.at(s); }
    [[nodiscard]] const std::vector<stage_runtime>& runtimes() const noexcept { return runtime_; }

    /// Starts step number `step` of plan pl on the batch x [batch, input size] with targets labels [batch, targets
    /// per sample], N = counted targets and the step's hyperparameters h; deferred_updates: the optimizer steps wait for the
    /// caller (update_stage after global gradient clipping). Every stage's gradient block is zeroed.
    void begin_step(const step_plan& pl, const T* x, const std::int32_t* labels, std::size_t batch, std::size_t counted,
                    const optim::hyperparameters<double>& h, std::uint64_t step, bool deferred_updates) {
        const std::size_t m = pl.sc.micro_batches;
        counted_ = counted;
        step_ = step;
        deferred_updates_ = deferred_updates;
        sizes_.assign(m, batch / m);
        offsets_.assign(m, 0);
        for (std::size_t j = 0; j < batch % m; ++j) ++sizes_[j];
        for (std::size_t j = 1; j < m; ++j) offsets_[j] = offsets_[j - 1] + sizes_[j - 1];
        x_ = x;
        labels_ = labels;
        hyper_ = h;
        runtime_.resize(stages_.size());
        for (std::size_t s = 0; s < stages_.size(); ++s) {
            auto& rt = runtime_[s];
            rt.ops = &pl.sc.ops[s];
            rt.slot_of = &pl.slots[s].slot_of;
            rt.next = 0;
            rt.p2_done = 0;
            rt.updated = false;
            rt.forward_in.assign(m, boundary_message{});
            rt.backward_in.assign(m, boundary_message{});
            rt.has_forward.assign(m, 0);
            rt.has_backward.assign(m, 0);
            rt.totals.assign(m, loss_totals{});
            rt.spans.clear();
            rt.spans.reserve(rt.ops->size() + 1);
            stages_[s]->zero_gradient();
        }
        t0_ = clock::now();  // the spans count from here
    }

    /// Records a message for stage s (checked: a micro-batch of this step).
    void deliver(std::size_t s, const boundary_message& msg) {
        auto& rt = runtime_[s];
        const bool fwd = msg.dir == direction::forward;
        if (msg.micro_batch >= rt.has_forward.size() || msg.sequence != step_)
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) +
                                   " received a message for micro-batch " + std::to_string(msg.micro_batch) +
                                   " of step " + std::to_string(msg.sequence) + " during step " +
                                   std::to_string(step_));
        (fwd ? rt.forward_in : rt.backward_in)[msg.micro_batch] = msg;
        (fwd ? rt.has_forward : rt.has_backward)[msg.micro_batch] = 1;
    }

    /// True when stage s's next op (or its optimizer step) can run: its input message has arrived.
    [[nodiscard]] bool ready(std::size_t s) const {
        const auto& rt = runtime_[s];
        if (rt.next == rt.ops->size()) return !rt.updated && !deferred_updates_;  // the optimizer step
        const op o = (*rt.ops)[rt.next];
        if (o.kind == op_kind::forward) return s == 0 || rt.has_forward[o.micro_batch];
        if (is_backward_p1(o)) return s + 1 == stages_.size() || rt.has_backward[o.micro_batch];
        return true;
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
        if (rt.next == rt.ops->size()) {  // all ops done: the optimizer step
            update_stage(s, T(1));
            return;
        }
        const op o = (*rt.ops)[rt.next];
        const std::size_t j = o.micro_batch, b = sizes_[j], slot = (*rt.slot_of)[rt.next];
        auto& act = st.slot(slot);
        const double t = now();
        bool send_forward = false, send_backward = false;
        const std::int32_t* sent_labels = nullptr;
        try {
        switch (o.kind) {
            case op_kind::forward: {
                std::int32_t* lab = st.labels(slot);
                if (s == 0) {
                    std::memcpy(act.input(), x_ + offsets_[j] * st.input_size(), b * st.input_size() * sizeof(T));
                    std::memcpy(lab, labels_ + offsets_[j] * targets_per_sample,
                                b * targets_per_sample * sizeof(std::int32_t));
                } else {
                    receive(s, *forward_[s - 1], rt.forward_in[j], j, act.input(), st.input_size(), lab);
                }
                st.forward(slot, b);
                if (last) {
                    // gradient of the MEAN loss over the batch's N counted targets (pitfalls.md item 1)
                    rt.totals[j] = Loss::totals_and_gradient(
                        act.output(), lab, b, act.output_gradient(),
                        counted_ > 0 ? T(1) / static_cast<T>(counted_) : T(1));
                } else {
                    send_forward = true;
                    sent_labels = lab;
                }
                break;
            }
            case op_kind::backward_input:
            case op_kind::backward_fused: {
                if (!last)
                    receive(s, *backward_[s], rt.backward_in[j], j, act.output_gradient(), st.output_size(), nullptr);
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
                                   " (of step " + std::to_string(step_) + ")");
        }
        // The span ends before its message leaves, so a receiver's span never starts before the sender's ends.
        rt.spans.push_back({s, span_kind_of(o.kind), j, t, now(), step_});
        if (send_forward) send(s + 1, forward_[s]->send(direction::forward, j, step_, b, act.output(), sent_labels));
        if (send_backward) send(s - 1, backward_[s - 1]->send(direction::backward, j, step_, b, act.input_gradient()));
        ++rt.next;
    }

    /// The optimizer step of stage s with its gradient scaled by `scale` (clipping; 1 otherwise). Throws
    /// std::logic_error unless all of the stage's ops, backward-p2 work included, are done.
    void update_stage(std::size_t s, T scale) {
        auto& rt = runtime_[s];
        auto& st = *stages_[s];
        if (rt.next != rt.ops->size() || rt.p2_done != rt.has_forward.size())
            throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) + " reached its "
                                   "optimizer step with " + std::to_string(rt.p2_done) + " of " +
                                   std::to_string(rt.has_forward.size()) + " micro-batches' backward-p2 done");
        const double t = now();
        if (scale != T(1))
            for (auto& g : st.gradient()) g *= scale;
        st.update(hyper_);
        rt.spans.push_back({s, span_kind::optimizer, 0, t, now(), step_});
        rt.updated = true;
    }

private:
    using clock = std::chrono::steady_clock;

    // Copies a received payload into the stage's slot, checking the sample count (pitfalls.md item 3).
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
    // the running step
    const T* x_ = nullptr;
    const std::int32_t* labels_ = nullptr;
    std::size_t counted_ = 0;  // N: counted targets of the running step's batch
    optim::hyperparameters<double> hyper_{};
    std::uint64_t step_ = 0;
    bool deferred_updates_ = false;
    std::vector<std::size_t> sizes_, offsets_;
    clock::time_point t0_{};
};

}  // namespace pipeprop::sync
