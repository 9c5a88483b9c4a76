// pipeprop/pb/concurrent_executor.hpp: the concurrent PB executor on a oneTBB flow graph.
//
// shared/docs/pb-semantics.md §1 (clocked model); PB-paper (Kosson et al., arXiv 2003.11666) §3. Micro-batch n
// enters stage 0 at tick tau_n (consecutive ticks between drains). At tick t, stage s
//   1. runs the forward of the micro-batch that stage s - 1 sent at tick t - 1 (stage 0: the pushed micro-batch of
//      tick t), with its current forward weights (w, or the LWP prediction of the current state);
//      the last stage then computes the loss and runs the backward of the same micro-batch in the same tick;
//   2. runs the backward of the input gradient that stage s + 1 sent at tick t - 1, with its backward weights
//      (w, the stashed forward weights, or w - D_s delta);
//   3. applies that micro-batch's update.
// Because stage s at tick t reads only tick t - 1 outputs of its neighbours, the run is deterministic, and the
// forward of micro-batch n at stage s sees max(n0, n - D_s) updates, its backward n updates: identical bits to the
// sequential reference (pb/sequential_executor.hpp), which the tests check for every policy.
//
// Lanes. The stages are grouped into lanes of consecutive stages (a lane_plan, pb/lane_plan.hpp: made by pb::engine
// from options::lanes and measured per-tick costs, or given as options::lane_starts). One serial flow-graph node per
// lane runs, per tick, the ticks of its stages in turn. Inside a lane, stages still exchange explicit boundary messages
// (channel copies; a message sent at tick t is kept for the neighbour's tick t + 1); only messages between lanes travel
// through the graph. Why: with one node per stage, TBB's work stealing runs each stage on whichever thread is free, so
// activations, stage messages and stage state keep crossing between cores (bench/README.md has the measurements).
// The results do not depend on the lanes (the clocked model fixes every input of every tick); the tests run L = 1, 2,
// 3, S and the default.
//
// Graph (one serial node per lane; every message carries the tick it is for as its tag):
//   forward message from lane l - 1 (lane 0: the pushed token) --+
//   backward message from lane l + 1 (last lane: its own token) --+-> join_node<tag_matching> -> multifunction_node
//   token from lane l's own previous tick                      ---+      (serial; ports: forward to l + 1, backward
//                                                                          to l - 1, token to itself)
// Every stage sends exactly one message on each outgoing edge per tick, empty (batch 0, no buffer) in bubble ticks;
// seeding: empty tick-0 messages on every edge. The self token is sent last in a tick, so (a) tick t + 1 of a lane
// cannot become ready before its tick t is done (tick order without a sequencer) and (b) when the neighbours' inputs
// of tick t + 1 are already there, tick t + 1 becomes ready on the thread that ran tick t, as the newest task of its
// LIFO deque.
//
// Payloads cross boundaries as explicit messages (boundary_channel: header + payload copied into a channel-owned
// buffer, copied out and released by the receiver; labels travel with forward messages). A tick first copies both
// incoming payloads out and releases their buffers, then computes (forward, backward, update), sending each outgoing
// message as soon as its payload is final. Bounded in-flight work: a sender is at tick t only after the receiver sent
// its tick-t input, i.e. after the receiver started tick t - 1 and released everything it received up to tick t - 1; so
// at most the messages sent at ticks t - 1 and t are unreleased: every channel has capacity 2 (exceeding it throws
// std::logic_error naming the channel). Inside a lane, stage s - 1 sends its tick-t message before stage s has taken
// its tick-t input (sent at tick t - 1): again two unreleased messages at most. Stage s holds at most D_s + 1
// micro-batches (its activation slots, indexed by id mod (D_s + 1)). Nothing grows with the number of micro-batches.
//
// Driving: push() copies the micro-batch into the input channel (capacity push_buffer = K) and returns; every K
// pushes (and at drain()) the tokens are put into the graph and the caller's thread joins the work in
// graph.wait_for_all() until the graph stalls (stage s then has completed tick T + s, T = last token tick). drain()
// adds 2 (S - 1) empty ticks, which complete every backward. A micro-batch is reported as completed by the
// push()/drain() call during which its backward at stage 0 ran (its loss travels back with the backward messages).
// Failures: a layer that throws in a stage's forward or backward is rethrown as pipeprop::stage_error naming the
// stage and the micro-batch (the original exception nested, stage_error.hpp); the flow graph is cancelled (no
// hang: wait_for_all() returns once the running ticks end) and the exception leaves push() / drain(). The other
// lanes may have run further ticks, so the pipeline state is that of an interrupted tick: the executor refuses
// every later push / drain with std::logic_error, and pb::engine refuses every later call (pb/engine.hpp).
// Call openblas_set_num_threads(1) in programs that use it (stages must not oversubscribe the cores).
#pragma once

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/stage_state.hpp"
#include "pipeprop/stage_error.hpp"
#include "pipeprop/pb/lane_plan.hpp"

namespace pipeprop::pb {

/// A message on a stage boundary: the boundary header (micro-batch id, tick as sequence, b, direction, payload
/// buffer) plus the micro-batch's header data (hyperparameters, loss on the way back).
template <class T>
struct stage_message {
    boundary_message header{};
    micro_batch_info<T> info{};
};

/// Concurrent executor over `stages` (owned by the engine; they outlive this object); loss policy Loss
/// (loss/loss_policy.hpp), stages updated by Optimizer (pb/optimizer.hpp).
template <network_type Net, mitigation_policy Policy, class T, loss_policy Loss, class Optimizer>
class concurrent_executor final : public executor<T> {
public:
    using stack_type = layer_stack<Net, T>;
    using stage_type = stage_state<Net, Policy, T, Optimizer>;
    using loss_type = Loss;
    /// int32 targets per sample that travel with the forward messages.
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    using message = stage_message<T>;

    /// Messages in flight per boundary and direction (see the file comment for the proof).
    static constexpr std::size_t channel_capacity = 2;

    /// Builds the channels, D_s + 1 activation slots per stage for up to max_b samples, one serial node per lane of
    /// `lanes` (default: one lane per stage; throws std::invalid_argument for a plan that is not one for S stages,
    /// check_lane_plan) and the graph; push_buffer (>= 1) tokens are buffered before the graph runs.
    concurrent_executor(const stack_type& stack, std::vector<stage_type>& stages, std::size_t max_b,
                        std::size_t push_buffer, const lane_plan& lanes)
        : stack_(stack), stages_(stages), push_buffer_(push_buffer) {
        const std::size_t count = stages.size();
        per_.reserve(count);
        for (const stage_type& st : stages) {
            auto p = std::make_unique<per_stage>();
            p->slots.resize(st.delay() + 1);
            for (slot& sl : p->slots) {
                sl.act = stack.make_activations(st.range(), max_b);
                sl.labels.assign(max_b * targets_per_sample, 0);
            }
            p->ws = stack.make_workspaces(st.range(), max_b);
            if (st.predicted_forward()) p->forward_weights.assign(st.parameter_count(), T(0));
            if (Policy::stashes_weights && st.delay() > 0)
                p->stash.assign((st.delay() + 1) * st.parameter_count(), T(0));
            per_.push_back(std::move(p));
        }
        input_ = std::make_unique<boundary_channel<T>>(
            "input -> stage 0", push_buffer, stack_type::activation_size[stages.front().range().begin], max_b,
            targets_per_sample);
        for (std::size_t s = 0; s + 1 < count; ++s) {
            const std::size_t boundary = stages[s].range().end;
            const std::size_t elems = stack_type::activation_size[boundary];
            const std::string where = "stage " + std::to_string(s) + " -> stage " + std::to_string(s + 1);
            forward_.push_back(
                std::make_unique<boundary_channel<T>>("forward " + where, channel_capacity, elems, max_b,
                                                      targets_per_sample));
            backward_.push_back(std::make_unique<boundary_channel<T>>(
                "backward stage " + std::to_string(s + 1) + " -> stage " + std::to_string(s), channel_capacity, elems,
                max_b, 0));
        }
        pending_.reserve(push_buffer);
        completed_.reserve(push_buffer + 2 * count + 1);
        apply(lanes);
        build_graph();
        resynchronize();
    }

    concurrent_executor(const concurrent_executor&) = delete;
    concurrent_executor& operator=(const concurrent_executor&) = delete;

    ~concurrent_executor() override {
        try {
            graph_.wait_for_all();
        } catch (...) {
        }
    }

    std::span<const completed_micro_batch<T>> push(const T* x, const std::int32_t* labels,
                                                   const micro_batch_info<T>& mb) override {
        check_usable();
        const std::size_t buffer = input_->acquire();
        std::copy_n(x, mb.batch * stack_type::activation_size[stages_.front().range().begin], input_->values(buffer));
        std::copy_n(labels, mb.batch * targets_per_sample, input_->labels(buffer));
        message m;
        m.header = {mb.id, next_tick_++, mb.batch, direction::forward, buffer};
        m.info = mb;
        pending_.push_back(m);
        ++pushed_;
        if (pending_.size() < push_buffer_) return {};
        return run(0);
    }

    std::span<const completed_micro_batch<T>> drain() override {
        check_usable();
        if (in_flight() == 0) {  // nothing pushed since the last drain: no ticks to run
            completed_.clear();
            return {};
        }
        return run(2 * (stages_.size() - 1));
    }

    [[nodiscard]] std::size_t in_flight() const noexcept override { return pushed_ - completed_total_; }

    void resynchronize() override {
        for (std::size_t s = 0; s < stages_.size(); ++s)
            if (!per_[s]->forward_weights.empty()) stages_[s].forward_weights(per_[s]->forward_weights.data());
    }

    [[nodiscard]] executor_kind kind() const noexcept override { return executor_kind::concurrent; }

    void fill_stats(std::vector<stage_stats>& out) const override {
        for (std::size_t s = 0; s < per_.size(); ++s) {
            const per_stage& p = *per_[s];
            out[s].activation_slots = p.slots.size();
            out[s].in_flight_max = p.in_flight_max;
            std::size_t bytes = 0;
            for (const slot& sl : p.slots) bytes += sl.act.bytes() + sl.labels.size() * sizeof(std::int32_t);
            out[s].stash_bytes = bytes;
            const std::size_t pc = stages_[s].parameter_count();
            out[s].weight_bytes += (p.forward_weights.size() + p.stash.size()) * sizeof(T);
            out[s].weight_copies += pc == 0 ? 0 : (p.forward_weights.size() + p.stash.size()) / pc;
            out[s].busy_seconds = std::chrono::duration<double>(p.busy).count();
            out[s].lane = lane_of_[s];
        }
    }

    /// Number of lanes (serial flow-graph nodes), 1 <= L <= S.
    [[nodiscard]] std::size_t lane_count() const noexcept { return lanes_.size(); }
    /// The lane that runs `stage` (lanes are runs of consecutive stages, in order). Throws std::out_of_range for
    /// stage >= S.
    [[nodiscard]] std::size_t lane_of(std::size_t stage) const { return lane_of_.at(stage); }

private:
    /// Inputs of one tick: (forward input, backward input, the stage's own token from its previous tick).
    using inputs_type = std::tuple<message, message, message>;
    using join_type = tbb::flow::join_node<inputs_type, tbb::flow::tag_matching>;
    /// Outputs: port 0 forward to lane l + 1, port 1 backward to lane l - 1, port 2 the lane's token for its own
    /// next tick (the last lane: also its backward input).
    using node_type = tbb::flow::multifunction_node<inputs_type, std::tuple<message, message, message>>;
    using ports_type = typename node_type::output_ports_type;

    struct slot {
        typename stack_type::activations act;  // one micro-batch's buffers of the stage's range
        std::vector<std::int32_t> labels;      // [max_b, targets_per_sample]
        micro_batch_info<T> info{};
        std::size_t forward_version = 0;  // stage updates when its forward ran
    };
    /// A run of consecutive stages [first, end) that one serial node runs (read-only after construction).
    struct lane {
        std::size_t first = 0;
        std::size_t end = 0;
    };
    /// Everything the executor keeps per stage; cache-line aligned, so that stages of different lanes (cores) never
    /// write to one line.
    struct alignas(64) per_stage {
        std::vector<slot> slots;  // D_s + 1, micro-batch n in slot n mod (D_s + 1)
        typename stack_type::workspaces ws;
        aligned_vector<T> forward_weights;  // [P] LWP prediction of the current state (predicting stages only)
        aligned_vector<T> stash;            // [D_s + 1, P] stashed forward weights (weight stashing, D_s > 0)
        std::size_t in_flight = 0;
        std::size_t in_flight_max = 0;
        std::chrono::steady_clock::duration busy{};
        message forward_next{};   // from stage s - 1 in the same lane: forward input of the next tick
        message backward_next{};  // from stage s + 1 in the same lane: backward input of the next tick
        message forward_in{};     // inputs of the current tick (taken from the above or the graph)
        message backward_in{};
    };

    static message empty_message(std::size_t tick, direction dir) {
        message m;
        m.header.sequence = tick;
        m.header.dir = dir;
        return m;
    }

    /// Groups the stages into the plan's lanes.
    void apply(const lane_plan& plan) {
        const std::size_t count = stages_.size();
        check_lane_plan(plan.first_stage, count);
        const std::vector<std::size_t>& firsts = plan.first_stage;
        lane_of_.assign(count, 0);
        for (std::size_t l = 0; l < firsts.size(); ++l) {
            lane ln;
            ln.first = firsts[l];
            ln.end = l + 1 < firsts.size() ? firsts[l + 1] : count;
            for (std::size_t s = ln.first; s < ln.end; ++s) lane_of_[s] = l;
            lanes_.push_back(ln);
        }
        // Tick 0's inputs inside a lane: empty messages (the graph seeds the edges between lanes).
        for (std::size_t s = 0; s < count; ++s) {
            per_[s]->forward_next = empty_message(0, direction::forward);
            per_[s]->backward_next = empty_message(0, direction::backward);
        }
    }

    void build_graph() {
        const std::size_t count = lanes_.size();
        auto tag = [](const message& m) -> tbb::flow::tag_value { return m.header.sequence; };
        for (std::size_t l = 0; l < count; ++l) {
            nodes_.push_back(std::make_unique<node_type>(
                graph_, tbb::flow::serial,
                [this, l](const inputs_type& in, ports_type& out) {
                    lane_tick(l, std::get<0>(in), std::get<1>(in), out);
                }));
            joins_.push_back(std::make_unique<join_type>(graph_, tag, tag, tag));
            tbb::flow::make_edge(*joins_[l], *nodes_[l]);
            tbb::flow::make_edge(tbb::flow::output_port<2>(*nodes_[l]), tbb::flow::input_port<2>(*joins_[l]));
        }
        for (std::size_t l = 0; l + 1 < count; ++l) {
            tbb::flow::make_edge(tbb::flow::output_port<0>(*nodes_[l]), tbb::flow::input_port<0>(*joins_[l + 1]));
            tbb::flow::make_edge(tbb::flow::output_port<1>(*nodes_[l + 1]), tbb::flow::input_port<1>(*joins_[l]));
        }
        // The last lane has no backward input from a neighbour: its own token (one per tick) stands in for it.
        tbb::flow::make_edge(tbb::flow::output_port<2>(*nodes_[count - 1]),
                             tbb::flow::input_port<1>(*joins_[count - 1]));
        // Seeds: the (empty) tick-0 messages of every edge that has a sender.
        for (std::size_t l = 0; l < count; ++l) {
            if (l > 0) tbb::flow::input_port<0>(*joins_[l]).try_put(empty_message(0, direction::forward));
            tbb::flow::input_port<1>(*joins_[l]).try_put(empty_message(0, direction::backward));
            tbb::flow::input_port<2>(*joins_[l]).try_put(empty_message(0, direction::forward));
        }
        graph_.wait_for_all();
    }

    void put_token(const message& m) { tbb::flow::input_port<0>(*joins_[0]).try_put(m); }

    void check_usable() const {
        if (failed_)
            throw std::logic_error(
                "pipeprop::pb::concurrent_executor: a stage threw an exception in an earlier run; "
                "the pipeline state is undefined and the executor cannot be used any more");
    }

    std::span<const completed_micro_batch<T>> run(std::size_t empty_ticks) {
        completed_.clear();
        try {
            for (const message& m : pending_) put_token(m);
            pending_.clear();
            for (std::size_t i = 0; i < empty_ticks; ++i) put_token(empty_message(next_tick_++, direction::forward));
            graph_.wait_for_all();
        } catch (...) {
            failed_ = true;
            throw;
        }
        completed_total_ += completed_.size();
        return completed_;
    }

    /// One tick of lane l: the inputs of all its stages are taken first (messages of tick t - 1), then each stage
    /// runs its tick; the lane's token goes last.
    void lane_tick(std::size_t l, const message& f, const message& g, ports_type& out) {
        const lane& ln = lanes_[l];
        const std::size_t next = f.header.sequence + 1;
        for (std::size_t s = ln.first; s < ln.end; ++s) {
            per_stage& p = *per_[s];
            p.forward_in = s == ln.first ? f : p.forward_next;
            p.backward_in = s + 1 == ln.end ? g : p.backward_next;
        }
        for (std::size_t s = ln.first; s < ln.end; ++s) tick(s, per_[s]->forward_in, per_[s]->backward_in, out);
        std::get<2>(out).try_put(empty_message(next, direction::forward));
    }

    /// Stage s's forward message for s + 1: kept for s + 1's next tick in the same lane, or sent to the next lane.
    void send_forward(std::size_t s, const message& m, ports_type& out) {
        if (lane_of_[s + 1] == lane_of_[s])
            per_[s + 1]->forward_next = m;
        else
            std::get<0>(out).try_put(m);
    }
    /// Stage s's backward message for s - 1 (s > 0): kept in the lane, or sent to the previous lane.
    void send_backward(std::size_t s, const message& m, ports_type& out) {
        if (lane_of_[s - 1] == lane_of_[s])
            per_[s - 1]->backward_next = m;
        else
            std::get<1>(out).try_put(m);
    }

    /// One tick of stage s: forward of f (if any), backward of g (if any), update; one message per outgoing edge.
    void tick(std::size_t s, const message& f, const message& g, ports_type& out) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::size_t count = stages_.size();
        const bool last = s + 1 == count;
        const std::size_t next = f.header.sequence + 1;
        stage_type& st = stages_[s];
        per_stage& p = *per_[s];
        bool sent_forward = false;
        bool sent_backward = false;

        // 1. Receive: copy both payloads out of their channels and release the buffers before any work, so that
        //    a sender never waits on work of this tick (this is what makes capacity 2 sufficient).
        slot* fs = nullptr;
        slot* gs = nullptr;
        if (!f.header.empty()) {
            fs = &p.slots[f.info.id % p.slots.size()];
            boundary_channel<T>& in = s == 0 ? *input_ : *forward_[s - 1];
            std::copy_n(in.values(f.header.buffer), f.header.batch * fs->act.input_size(), fs->act.input());
            std::copy_n(in.labels(f.header.buffer), f.header.batch * targets_per_sample, fs->labels.data());
            in.release(f.header.buffer);
            fs->info = f.info;
        }
        if (!last && !g.header.empty()) {
            gs = &p.slots[g.info.id % p.slots.size()];
            boundary_channel<T>& ch = *backward_[s];
            std::copy_n(ch.values(g.header.buffer), g.header.batch * gs->act.output_size(), gs->act.output_gradient());
            ch.release(g.header.buffer);
            gs->info.loss = g.info.loss;
            gs->info.correct = g.info.correct;
            gs->info.targets = g.info.targets;
        }
        // 2. Forward (the last stage: forward, loss and backward of the same micro-batch, then its update).
        if (fs != nullptr) {
            slot& sl = *fs;
            const std::size_t b = sl.info.batch;
            sl.forward_version = st.updates();
            p.in_flight_max = std::max(p.in_flight_max, ++p.in_flight);
            const std::size_t pc = st.parameter_count();
            const T* fw = p.forward_weights.empty() ? st.weights().data() : p.forward_weights.data();
            if (!p.stash.empty()) std::copy_n(st.weights().data(), pc, stash_of(p, sl, pc));
            try {
                st.program().forward(stack_, {fw, pc}, sl.act, b, p.ws, st.state());
            } catch (...) {
                rethrow_as_stage_error(who, s, sl.info.id, "forward");
            }
            if (!last) {
                boundary_channel<T>& ch = *forward_[s];
                const std::size_t buffer = ch.acquire();
                std::copy_n(sl.act.output(), b * sl.act.output_size(), ch.values(buffer));
                std::copy_n(sl.labels.data(), b * targets_per_sample, ch.labels(buffer));
                message m;
                m.header = {sl.info.id, next, b, direction::forward, buffer};
                m.info = sl.info;
                send_forward(s, m, out);
                sent_forward = true;
            } else {
                const loss_totals t =
                    Loss::totals_and_gradient(sl.act.output(), sl.labels.data(), b, sl.act.output_gradient(), T(0));
                sl.info.loss = static_cast<T>(t.mean());
                sl.info.correct = t.correct;
                sl.info.targets = t.count;
                backward_and_update(s, sl, next, out);
                sent_backward = s > 0;
            }
        }
        // 3. Backward of the older micro-batch, then its update.
        if (gs != nullptr) {
            backward_and_update(s, *gs, next, out);
            sent_backward = s > 0;
        }
        if (!last && !sent_forward) send_forward(s, empty_message(next, direction::forward), out);
        if (s > 0 && !sent_backward) send_backward(s, empty_message(next, direction::backward), out);
        p.busy += std::chrono::steady_clock::now() - t0;
    }

    T* stash_of(per_stage& p, const slot& sl, std::size_t pc) noexcept {
        return p.stash.data() + (sl.info.id % p.slots.size()) * pc;
    }

    void backward_and_update(std::size_t s, slot& sl, std::size_t next, ports_type& out) {
        stage_type& st = stages_[s];
        per_stage& p = *per_[s];
        const std::size_t b = sl.info.batch;
        const std::size_t pc = st.parameter_count();
        const std::span<const T> bw =
            p.stash.empty() ? st.backward_weights() : std::span<const T>(stash_of(p, sl, pc), pc);
        try {
            st.program().backward(stack_, bw, st.gradient(), sl.act, b, p.ws, s > 0, st.state());
        } catch (...) {
            rethrow_as_stage_error(who, s, sl.info.id, "backward");
        }
        st.record_delay(st.updates() - sl.forward_version);
        if (s > 0) {
            boundary_channel<T>& ch = *backward_[s - 1];
            const std::size_t buffer = ch.acquire();
            std::copy_n(sl.act.input_gradient(), b * sl.act.input_size(), ch.values(buffer));
            message m;
            m.header = {sl.info.id, next, b, direction::backward, buffer};
            m.info = sl.info;
            send_backward(s, m, out);
        } else {
            completed_.push_back({sl.info.id, b, sl.info.loss, sl.info.correct, sl.info.targets});
        }
        st.update(sl.info, p.forward_weights.empty() ? nullptr : p.forward_weights.data());
        --p.in_flight;
    }

    static constexpr const char* who = "pipeprop::pb::concurrent_executor";

    const stack_type& stack_;
    std::vector<stage_type>& stages_;
    std::size_t push_buffer_;
    std::vector<std::unique_ptr<per_stage>> per_;
    std::vector<lane> lanes_;
    std::vector<std::size_t> lane_of_;  // [S] lane of each stage
    std::unique_ptr<boundary_channel<T>> input_;
    std::vector<std::unique_ptr<boundary_channel<T>>> forward_;   // [S - 1]: s -> s + 1
    std::vector<std::unique_ptr<boundary_channel<T>>> backward_;  // [S - 1]: s + 1 -> s
    std::vector<message> pending_;                                // tokens not yet put into the graph
    std::vector<completed_micro_batch<T>> completed_;             // completed during the current run
    std::size_t next_tick_ = 0;
    std::size_t pushed_ = 0;
    std::size_t completed_total_ = 0;
    bool failed_ = false;

    // Declared last: destroyed first (nodes before the graph they belong to).
    tbb::flow::graph graph_;
    std::vector<std::unique_ptr<node_type>> nodes_;
    std::vector<std::unique_ptr<join_type>> joins_;
};

}  // namespace pipeprop::pb
