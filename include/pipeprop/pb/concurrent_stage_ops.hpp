// pipeprop/pb/concurrent_stage_ops.hpp: the ops of one PB stage in the concurrent executor (a base of
// pb::concurrent_executor): F(n), BW(n) and U(n) on the stage's buffers (pb/concurrent_stage_buffers.hpp), each
// reading only its stage's state and its message, so that the results do not depend on the threads
// (docs/pb-semantics.md §9, the ops). When the ops run is the executor's business.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/pb/concurrent_stage_buffers.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/stage_error.hpp"

namespace pipeprop::pb::detail {

/// F, BW and U of Executor's stages (Executor derives from this class and befriends it: its stack_, stages_ [S] of
/// Stage, per_ [S] buffers, channels input_, forward_ (pb::forward_channel), backward_, rings infos_ and results_
/// [ring_], local_, first_local_ and completed_). Stack: the layer_stack, T its value type, Loss the loss policy.
/// Each op throws pipeprop::stage_error naming the stage and the micro-batch when a layer throws, std::logic_error
/// for a message of the wrong size.
template <class Executor, class Stack, class Stage, class T, class Loss>
class concurrent_stage_ops {
protected:
    using slot = concurrent_slot<Stack, T>;
    using per_stage = concurrent_stage_buffers<Stack, T>;

    // Checks a message's sample count against the micro-batch's (docs/pitfalls.md item 3).
    static void check_batch(std::size_t s, const boundary_message& msg, std::size_t b) {
        if (msg.batch != b)
            throw std::logic_error(std::string(who) + ": stage " + std::to_string(s) + ", micro-batch " +
                                   std::to_string(msg.micro_batch) + ": a message of " + std::to_string(msg.batch) +
                                   " samples, expected " + std::to_string(b));
    }
    // The message's payload into dst (and its targets into labels_dst), checking the sample count; the buffer is
    // released.
    void receive(std::size_t s, boundary_channel<T>& ch, const boundary_message& msg, std::size_t b, T* dst,
                 std::int32_t* labels_dst) {
        check_batch(s, msg, b);
        ch.receive(msg, dst, labels_dst);
    }

    // F(id) on stage s; send(to, message) passes the output on. The slot's input (not stage 0's) and output (not
    // the last stage's) are micro-batch id's buffers of the forward channels (pb/forward_channel.hpp); stage 0
    // copies its input out of the input channel.
    template <class Send>
    void forward(std::size_t s, std::size_t id, Send& send) {
        Executor& ex = static_cast<Executor&>(*this);
        const bool last = s + 1 == ex.stages_.size();
        Stage& st = ex.stages_[s];
        per_stage& p = *ex.per_[s];
        slot& sl = p.slots[id % p.slots.size()];
        sl.info = ex.infos_[id % ex.ring_];
        const std::size_t b = sl.info.batch;
        const boundary_message in = take(p.forward_in, id);
        if (s == 0) {
            receive(s, *ex.input_, in, b, sl.act.input(), sl.labels.data());
        } else {
            check_batch(s, in, b);
            forward_channel<T>& ch = *ex.forward_[s - 1];
            const std::size_t k = ch.buffer_of(id);
            sl.act.bind_input(ch.values(k));
            std::copy_n(ch.labels(k), b * ch.labels_per_sample(), sl.labels.data());
        }
        std::size_t out = 0;  // the output's buffer in the forward channel s -> s + 1
        if (!last) {
            out = ex.forward_[s]->claim(id);
            sl.act.bind_output(ex.forward_[s]->values(out));
        }
        sl.forward_version = st.updates();
        p.in_flight_max = std::max(p.in_flight_max, ++p.in_flight);
        const std::size_t pc = st.parameter_count();
        const T* fw = p.forward_weights.empty() ? st.weights().data() : p.forward_weights.data();
        if (!p.stash.empty()) std::copy_n(st.weights().data(), pc, p.stash.data() + (id % p.slots.size()) * pc);
        try {
            st.program().forward(ex.stack_, {fw, pc}, sl.act, b, p.ws, st.state());
        } catch (...) {
            rethrow_as_stage_error(who, s, id, "forward");
        }
        if (!last) {
            std::copy_n(sl.labels.data(), b * ex.forward_[s]->labels_per_sample(), ex.forward_[s]->labels(out));
            send(s + 1, ex.forward_[s]->message(id, b));
        } else {
            const loss_totals t =
                Loss::totals_and_gradient(sl.act.output(), sl.labels.data(), b, sl.act.output_gradient(), T(0));
            ex.results_[id % ex.ring_] = {static_cast<T>(t.mean()), t.correct, t.count};
        }
    }

    // BW(id) on stage s; send(to, message) passes the input gradient on.
    template <class Send>
    void backward(std::size_t s, std::size_t id, Send& send) {
        Executor& ex = static_cast<Executor&>(*this);
        const bool last = s + 1 == ex.stages_.size();
        Stage& st = ex.stages_[s];
        per_stage& p = *ex.per_[s];
        slot& sl = p.slots[id % p.slots.size()];
        const std::size_t b = sl.info.batch;
        if (!last)
            receive(s, *ex.backward_[s], take(p.backward_in, id), b, sl.act.output_gradient(), nullptr);
        const std::size_t pc = st.parameter_count();
        const std::span<const T> bw = p.stash.empty()
                                          ? st.backward_weights()
                                          : std::span<const T>(p.stash.data() + (id % p.slots.size()) * pc, pc);
        try {
            if (st.fuses_update(b))  // dense layers' p2 fused into this micro-batch's update (U follows at once)
                st.backward_fusing_update(ex.stack_, bw, sl.act, p.ws, s > 0, sl.info);
            else
                st.program().backward(ex.stack_, bw, st.gradient(), sl.act, b, p.ws, s > 0, st.state());
        } catch (...) {
            rethrow_as_stage_error(who, s, id, "backward");
        }
        st.record_delay(st.updates() - sl.forward_version);
        // The forward channels' buffers of micro-batch id that this process reads last, released before the input
        // gradient goes out (after it, stage s - 1 may already send micro-batch id + D_{s-1} + 1 into the input's): the
        // output's (stage s + 1's BW(id) came first: it sent the gradient this BW waited for), and the input's when
        // stage s - 1 runs in another process (here the buffer is this stage's alone).
        if (!last) ex.forward_[s]->release(id);
        if (s > 0 && !ex.local_[s - 1]) ex.forward_[s - 1]->release(id);
        if (s > 0) send(s - 1, ex.backward_[s - 1]->send(direction::backward, id, 0, b, sl.act.input_gradient()));
        if (s == ex.first_local_) {  // stage 0, or this process's first stage (remote_transport)
            const loss_result<T>& r = ex.results_[id % ex.ring_];
            ex.completed_.push_back({id, b, r.loss, r.correct, r.targets});
        }
    }

    // U(id) on stage s: the update, and the new forward weights (LWP).
    void update(std::size_t s, std::size_t id) {
        Executor& ex = static_cast<Executor&>(*this);
        per_stage& p = *ex.per_[s];
        ex.stages_[s].update(p.slots[id % p.slots.size()].info,
                             p.forward_weights.empty() ? nullptr : p.forward_weights.data());
        --p.in_flight;
    }

private:
    static constexpr const char* who = "pipeprop::pb::concurrent_executor";
};

}  // namespace pipeprop::pb::detail
