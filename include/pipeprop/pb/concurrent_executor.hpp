// pipeprop/pb/concurrent_executor.hpp: the concurrent PB executor: every stage runs its PB op stream
// (pb/op_stream.hpp: F(i), BW(i - D_s), U(i - D_s), group after group) on the engines' one flow graph
// (lane_graph.hpp), exchanging boundary messages (boundary_channel.hpp); the same bits as the sequential reference
// (pb/sequential_executor.hpp). PB-paper (Kosson et al., arXiv 2003.11666) §3.
//
// When an op runs, the ops themselves (pb/concurrent_stage_ops.hpp), lanes, their second cut and the inline
// alternative under load (pb/lane_plan.hpp, pb/lane_rebalance.hpp, pb/load_adaptation.hpp), the bounds of every
// buffer and channel, how push() and drain() drive the graph, and stages in other processes (pb/remote_stages.hpp,
// which a program that uses them includes; the seam: pb/remote_part.hpp): docs/pb-semantics.md §9. A layer that
// throws makes push() / drain() throw pipeprop::stage_error and the executor refuse every later call with
// std::logic_error (docs/pb-semantics.md §8).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/flush_subnormals.hpp"
#include "pipeprop/lane_graph.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/pb/concurrent_stage_buffers.hpp"
#include "pipeprop/pb/concurrent_stage_ops.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/pb/lane_plan.hpp"
#include "pipeprop/pb/lane_rebalance.hpp"
#include "pipeprop/pb/load_adaptation.hpp"
#include "pipeprop/pb/op_stream.hpp"
#include "pipeprop/pb/remote_part.hpp"
#include "pipeprop/pb/basic_stage_state.hpp"
#include "pipeprop/remote_transport.hpp"
#include "pipeprop/stage_error.hpp"

namespace pipeprop::pb {

/// Concurrent executor over `stages` (owned by the engine; they outlive this object); loss policy Loss
/// (loss/loss_policy.hpp), stages updated by Optimizer (pb/optimizer.hpp). It is the runner of its lane_graph.
/// Network-free: it sees the network through its runtime_layer_stack<T>, so its code is compiled once per (Policy,
/// T, Loss, Optimizer), whatever the network.
template <mitigation_policy Policy, class T, loss_policy Loss, class Optimizer>
class concurrent_executor final
    : public executor<T>,
      detail::concurrent_stage_ops<concurrent_executor<Policy, T, Loss, Optimizer>, runtime_layer_stack<T>,
                                   basic_stage_state<Policy, T, Optimizer>, T, Loss> {
public:
    using stack_type = runtime_layer_stack<T>;  ///< The network's layers, shared with the engine.
    using stage_type = basic_stage_state<Policy, T, Optimizer>;  ///< One stage's weights and optimizer/policy state.
    using loss_type = Loss;  ///< The loss policy the last stage applies to its output.
    /// int32 targets per sample that travel with the forward messages.
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    ///@{
    /// Messages in flight on the forward channel out of a stage with delay D (D + 1), and on the backward channel out
    /// of a stage with delay D (D + 3); the proof: docs/pb-semantics.md §9, bounded memory.
    [[nodiscard]] static constexpr std::size_t forward_capacity(std::size_t delay) noexcept { return delay + 1; }
    [[nodiscard]] static constexpr std::size_t backward_capacity(std::size_t delay) noexcept { return delay + 3; }
    ///@}

    /// Builds the channels, D_s + 1 activation slots per stage for up to max_b samples and the flow graph with the
    /// lanes of `lanes` (throws std::invalid_argument for a plan that is not one for S stages); push_buffer (>= 1)
    /// micro-batches are buffered before the graph runs; flush_subnormals: every op runs with subnormals flushed to
    /// zero (flush_subnormals.hpp).
    /// remote: the transport to the stages other processes run (nullptr: every stage runs here); with one, the
    /// local stages (a contiguous group; std::invalid_argument otherwise) run on one lane and `lanes` is not read.
    /// load_probe_period / lane_rebalance_period: the periods in runs of the load adaptation and of the lanes'
    /// rebalancing (pb/load_adaptation.hpp, pb/lane_rebalance.hpp; 0: off; both off with one lane or a transport).
    concurrent_executor(const stack_type& stack, std::vector<stage_type>& stages, std::size_t max_b,
                        std::size_t push_buffer, const lane_plan& lanes, bool flush_subnormals = false,
                        remote_transport* remote = nullptr, std::size_t load_probe_period = 0,
                        std::size_t lane_rebalance_period = 0)
        : stack_(stack),
          stages_(stages),
          remote_(remote),
          max_b_(max_b),
          push_buffer_(push_buffer),
          flush_(flush_subnormals),
          ring_(push_buffer + stages.front().delay() + 2),
          infos_(ring_),
          results_(ring_) {
        check_lane_plan(lanes.first_stage, stages.size());
        const std::size_t count = stages.size();
        local_.assign(count, true);
        if (remote_ != nullptr) {  // the exchange (pb/remote_stages.hpp) says which stages run here
            remote_stages_ = pipeprop::detail::make_remote_part<detail::remote_part<T>>(
                remote_host_, "pipeprop/pb/remote_stages.hpp");
            detail::remote_layout layout = remote_stages_->setup();
            local_ = std::move(layout.local);
            first_local_ = layout.first;
            last_local_ = layout.last;
        } else {
            last_local_ = count - 1;
        }
        per_.reserve(count);
        for (std::size_t s = 0; s < count; ++s) {
            const stage_type& st = stages[s];
            auto p = std::make_unique<per_stage>();
            if (!local_[s]) {  // another process runs it: no buffers here
                p->forward_in.resize(1);
                p->backward_in.resize(1);
                per_.push_back(std::move(p));
                continue;
            }
            // D_s + 1 activation slots (one set of gradient buffers), workspaces, forward weights, stash, stream
            detail::allocate_stage_buffers(*p, stack, st, s == 0, s + 1 == count, max_b, targets_per_sample,
                                           weight_stash_copies<Policy>(st.delay()));
            p->forward_in.resize(s == 0 ? push_buffer : forward_capacity(stages[s - 1].delay()));
            p->backward_in.resize(s + 1 < count ? backward_capacity(stages[s + 1].delay()) : 1);
            per_.push_back(std::move(p));
        }
        input_ = std::make_unique<boundary_channel<T>>(
            "input -> stage 0", push_buffer, stack.activation_size[stages.front().range().begin], max_b,
            targets_per_sample);
        for (std::size_t s = 0; s + 1 < count; ++s) {
            const std::size_t elems = stack.activation_size[stages[s].range().end];
            const std::string where = "stage " + std::to_string(s) + " -> stage " + std::to_string(s + 1);
            forward_.push_back(std::make_unique<forward_channel<T>>(
                "forward " + where, forward_capacity(stages[s].delay()), elems, max_b, targets_per_sample));
            backward_.push_back(std::make_unique<boundary_channel<T>>(
                "backward stage " + std::to_string(s + 1) + " -> stage " + std::to_string(s),
                backward_capacity(stages[s + 1].delay()),
                elems, max_b, 0));
        }
        pending_.reserve(push_buffer);
        completed_.reserve(push_buffer + stages.front().delay() + 1);
        if (remote_ == nullptr) {
            graph_ = std::make_unique<lane_graph<concurrent_executor>>(*this, count, lanes.first_stage);
        } else {
            std::vector<std::size_t> lane_of(count, lane_graph<concurrent_executor>::remote_lane);
            for (std::size_t s = first_local_; s <= last_local_; ++s) lane_of[s] = 0;
            graph_ = std::make_unique<lane_graph<concurrent_executor>>(
                *this, typename lane_graph<concurrent_executor>::lane_map{lane_of});
        }
        if (remote_ == nullptr && graph_->lane_count() > 1) {
            load_ = load_adapter(load_probe_period);
            rebalance_ = lane_rebalancer(lane_rebalance_period, lanes, count);
        }
        resynchronize();
    }

    concurrent_executor(const concurrent_executor&) = delete;
    concurrent_executor& operator=(const concurrent_executor&) = delete;

    std::span<const completed_micro_batch<T>> push(const T* x, const std::int32_t* labels,
                                                   const micro_batch_info<T>& mb) override {
        check_usable();
        if (!open_) {  // the first micro-batch after construction or a drain starts a segment
            for (auto& p : per_) p->stream.open(mb.id);
            open_ = true;
            pushed_in_segment_ = 0;
        }
        ++pushed_in_segment_;
        if (local_[0]) {
            const std::size_t buffer = input_->acquire();
            std::copy_n(x, mb.batch * stack_.activation_size[stages_.front().range().begin],
                        input_->values(buffer));
            std::copy_n(labels, mb.batch * targets_per_sample, input_->labels(buffer));
            pending_.push_back({mb.id, 0, mb.batch, direction::forward, buffer});
        }
        infos_[mb.id % ring_] = mb;
        ++pushes_since_run_;
        next_id_ = mb.id + 1;
        ++pushed_;
        if (pushes_since_run_ < push_buffer_) return {};
        return run(false);
    }

    std::span<const completed_micro_batch<T>> drain() override {
        check_usable();
        if (in_flight() == 0) {  // nothing pushed since the last drain: no ops to run
            completed_.clear();
            return {};
        }
        return run(true);
    }

    [[nodiscard]] std::size_t in_flight() const noexcept override { return pushed_ - completed_total_; }

    void resynchronize() override {
        for (std::size_t s = 0; s < stages_.size(); ++s)
            if (local_[s] && !per_[s]->forward_weights.empty())
                stages_[s].forward_weights(per_[s]->forward_weights.data());
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
            out[s].channel_bytes = (s == 0 ? input_->bytes() : forward_[s - 1]->bytes()) +
                                   (s + 1 < per_.size() ? backward_[s]->bytes() : 0);
            const std::size_t pc = stages_[s].parameter_count();
            out[s].weight_bytes += (p.forward_weights.size() + p.stash.size()) * sizeof(T);
            out[s].weight_copies += pc == 0 ? 0 : (p.forward_weights.size() + p.stash.size()) / pc;
            out[s].busy_seconds = std::chrono::duration<double>(p.busy).count();
            out[s].lane = graph_->lane_of(s);  // lane_graph's remote_lane: another process runs it
        }
    }

    [[nodiscard]] load_adaptation_stats load_adaptation() const override { return load_.stats(); }
    [[nodiscard]] lane_rebalance_stats lane_rebalance() const override { return rebalance_.stats(); }

    /// Number of lanes (serial flow-graph nodes), 1 <= L <= S.
    [[nodiscard]] std::size_t lane_count() const noexcept { return graph_->lane_count(); }
    /// The lane that runs `stage`. Throws std::out_of_range for stage >= S.
    [[nodiscard]] std::size_t lane_of(std::size_t stage) const { return graph_->lane_of(stage); }

    // ---- the runner of the lane graph (lane_graph.hpp); called only from the stage's lane node ----

    /// Records an arrived message for stage s (its payload stays in the channel until the op that uses it).
    void deliver(std::size_t s, const boundary_message& msg) {
        per_stage& p = *per_[s];
        auto& ring = msg.dir == direction::forward ? p.forward_in : p.backward_in;
        received& r = ring[msg.micro_batch % ring.size()];
        if (r.present)
            throw std::logic_error(std::string(who) + ": stage " + std::to_string(s) + " received micro-batch " +
                                   std::to_string(msg.micro_batch) + " while micro-batch " +
                                   std::to_string(r.header.micro_batch) + " still waits in its place");
        r = {msg, true};
    }

    /// True when stage s's next op has its input.
    [[nodiscard]] bool ready(std::size_t s) const {
        const per_stage& p = *per_[s];
        const std::optional<op> o = p.stream.current();
        if (!o) return false;
        if (o->kind == op_kind::forward) return detail::arrived(p.forward_in, o->micro_batch);
        if (o->kind == op_kind::backward_fused)
            return s + 1 == stages_.size() || detail::arrived(p.backward_in, o->micro_batch);
        return true;  // U
    }

    /// A message for stage `to`, which another process runs: its payload (and targets, and on a backward message
    /// the micro-batch's loss) goes to the transport; the channel's buffer is released (pb/remote_stages.hpp).
    void send_remote(std::size_t to, const boundary_message& msg) { remote_stages_->send_remote(to, msg); }

    /// Runs stage s's next op (ready(s) holds); send(to, message) passes each outgoing message on.
    template <class Send>
    void run_next(std::size_t s, Send& send) {
        const auto t0 = std::chrono::steady_clock::now();
        const scoped_flush_subnormals flush(flush_);
        per_stage& p = *per_[s];
        const op o = *p.stream.current();
        switch (o.kind) {
            case op_kind::forward: this->forward(s, o.micro_batch, send); break;
            case op_kind::backward_fused: this->backward(s, o.micro_batch, send); break;
            case op_kind::update: this->update(s, o.micro_batch); break;
            default: throw std::logic_error(std::string(who) + ": an op PB's streams do not contain");
        }
        p.stream.advance();
        p.busy += std::chrono::steady_clock::now() - t0;
    }

private:
    using remote_host_type = detail::remote_host_of<concurrent_executor, T>;
    friend remote_host_type;  // what the exchange with other processes (pb/remote_part.hpp) reads of the state below
    using ops_type = detail::concurrent_stage_ops<concurrent_executor, stack_type, stage_type, T, Loss>;
    friend ops_type;  // the ops F, BW, U (pb/concurrent_stage_ops.hpp) run on the state below

    using slot = detail::concurrent_slot<stack_type, T>;
    using received = detail::received_message;
    using loss_result = detail::loss_result<T>;
    using per_stage = detail::concurrent_stage_buffers<stack_type, T>;  // pb/concurrent_stage_buffers.hpp

    void check_usable() const {
        if (failed_)
            throw std::logic_error(
                "pipeprop::pb::concurrent_executor: a stage threw an exception in an earlier run; "
                "the pipeline state is undefined and the executor cannot be used any more");
    }

    std::span<const completed_micro_batch<T>> run(bool closing) {
        completed_.clear();
        const bool go_inline = load_.next_inline();
        const std::size_t runs_micro_batches = pushes_since_run_;
        const bool comparable = !closing && pushed_in_segment_ >= push_buffer_ + per_[0]->slots.size();  // no fill
        const bool rebalance = comparable && !go_inline && rebalance_.enabled();
        if (rebalance) rebalance_.run_starts(detail::busy_seconds(per_, busy_now_));
        const auto start = std::chrono::steady_clock::now();
        try {
            if (closing)  // before any op runs: while the graph (or the inline loop) runs, only it touches them
                for (auto& p : per_) p->stream.close(next_id_);
            if (go_inline) {
                run_inline();
            } else {
                for (const boundary_message& m : pending_) graph_->put(0, m);
                pending_.clear();
                pushes_since_run_ = 0;
                if (remote_ != nullptr) remote_stages_->deliver_backlog();
                if (closing) graph_->wake_all();
                graph_->wait();
                if (remote_ != nullptr) remote_stages_->run_with_remote();
                if (rebalance)  // a new cut takes effect from the next run (failing to build it fails the executor)
                    if (const auto cut = rebalance_.run_ended(detail::busy_seconds(per_, busy_now_)))
                        graph_ = std::make_unique<lane_graph<concurrent_executor>>(*this, per_.size(),
                                                                                   cut->first_stage);
            }
        } catch (...) {
            failed_ = true;
            if (remote_ != nullptr) {  // messages already put into the graph may still run: let them end first
                try {
                    graph_->wait();
                } catch (...) {
                }
                report_exception(*remote_, std::current_exception());  // the other ranks name this one and stop
            }
            throw;
        }
        if (closing) {
            for (std::size_t s = 0; s < per_.size(); ++s)
                if (local_[s] && !per_[s]->stream.done())
                    throw std::logic_error(std::string(who) + ": stage " + std::to_string(s) +
                                           " did not complete its ops at the drain");
            open_ = false;
        }
        completed_total_ += completed_.size();
        if (load_.enabled()) {  // comparable runs only: push_buffer micro-batches, none in the fill of stage 0's slots
            if (comparable)
                load_.measured(next_id_ - runs_micro_batches, runs_micro_batches,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            else
                load_.unmeasured(go_inline);
        }
        return completed_;
    }

    // A run without the flow graph: the calling thread runs every stage's ready ops, stage after stage, until none
    // is (what one lane's node does for its stages, lane_graph.hpp, here for all of them).
    void run_inline() {
        for (const boundary_message& m : pending_) deliver(0, m);
        pending_.clear();
        pushes_since_run_ = 0;
        auto send = [this](std::size_t to, const boundary_message& m) { deliver(to, m); };
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t s = 0; s < per_.size(); ++s)
                while (ready(s)) {
                    run_next(s, send);
                    progress = true;
                }
        }
    }

    static constexpr const char* who = "pipeprop::pb::concurrent_executor";

    const stack_type& stack_;
    std::vector<stage_type>& stages_;
    remote_transport* remote_ = nullptr;
    std::size_t max_b_ = 1;
    std::vector<bool> local_;     // [S]: the stage runs in this process
    std::size_t first_local_ = 0;  // this process's stages: [first_local_, last_local_]
    std::size_t last_local_ = 0;
    remote_host_type remote_host_{*this};
    std::unique_ptr<detail::remote_part<T>> remote_stages_;  // with a transport: the exchange (pb/remote_stages.hpp)
    std::size_t pushes_since_run_ = 0;
    std::size_t push_buffer_;
    bool flush_ = false;
    // Rings by micro-batch id mod ring_ (push_buffer + D_0 + 2 > the ids that can be in flight): what push() knows
    // of a micro-batch (read by each stage's F) and what the last stage found (read by stage 0's BW).
    std::size_t ring_;
    std::vector<micro_batch_info<T>> infos_;
    std::vector<loss_result> results_;
    std::vector<std::unique_ptr<per_stage>> per_;
    std::unique_ptr<boundary_channel<T>> input_;
    std::vector<std::unique_ptr<forward_channel<T>>> forward_;    // [S - 1]: s -> s + 1, the slots' boundaries
    std::vector<std::unique_ptr<boundary_channel<T>>> backward_;  // [S - 1]: s + 1 -> s
    std::vector<boundary_message> pending_;                       // pushed, not yet put into the graph
    std::vector<completed_micro_batch<T>> completed_;             // completed during the current run
    std::size_t next_id_ = 0;                                     // id after the last pushed one
    std::size_t pushed_ = 0;
    std::size_t completed_total_ = 0;
    bool open_ = false;  // a segment is open (pushes since the last drain)
    std::size_t pushed_in_segment_ = 0;  // micro-batches pushed since the segment opened
    load_adapter load_;  // lanes or inline (off: always the lanes)
    lane_rebalancer rebalance_;  // the lane plan cut anew from the busy time (off: as made)
    std::vector<double> busy_now_;  // [S]: detail::busy_seconds, for the rebalancing
    bool failed_ = false;

    // Declared last: destroyed first (it waits for the running bodies, which use the members above).
    std::unique_ptr<lane_graph<concurrent_executor>> graph_;
};

}  // namespace pipeprop::pb
