// pipeprop/pb/remote_stages.hpp: the concurrent PB executor's stages in other processes
// (remote_transport.hpp, pipeprop/mpi/mpi_transport.hpp): the part of pb::concurrent_executor
// (pb/concurrent_executor.hpp) that exchanges boundary messages with the other processes.
//
// Given a transport, the executor runs only the stages the transport calls local (a contiguous group, one lane) and
// allocates their activation slots only; a message to another process's stage goes through the transport (payload,
// targets, and on backward messages the micro-batch's loss as a boundary_note), and the driving thread receives
// messages from other processes whenever its graph is idle, until every local stage has run its ops of the run
// (remote_receive.hpp). A forward message that arrives before its push() on this process waits for it
// (remote_backlog.hpp). Every stage runs its op stream as in one process (the clocked model, PB-paper, Kosson et al.,
// arXiv 2003.11666, §3; docs/pb-semantics.md §1), so a run across processes is bit-identical to one process
// (tests/mpi/test_mpi_pb.cpp). No message within the transport's timeout while a local stage waits:
// remote_timeout_error naming the stage.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/remote_backlog.hpp"
#include "pipeprop/remote_receive.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::pb::detail {

/// The remote part of Executor (a pb::concurrent_executor over values of type T, which befriends it): the backlog
/// of early forward messages and the functions that send to, receive from and wait for the stages of other
/// processes. It reads the executor's transport, stages, channels, rings and graph; the executor owns it as a member
/// and calls it only with a transport.
template <class Executor, class T>
class remote_stages {
public:
    explicit remote_stages(Executor& ex) noexcept : ex_(ex) {}

    // Which stages run here (the transport's local ones): the executor's local_, first_local_ and last_local_.
    // Throws std::invalid_argument when none does or they are not one contiguous group.
    void setup_remote() {
        remote_transport* remote_ = ex_.remote_;
        auto& local_ = ex_.local_;
        std::size_t& first_local_ = ex_.first_local_;
        std::size_t& last_local_ = ex_.last_local_;
        const std::size_t count = ex_.stages_.size();
        for (std::size_t s = 0; s < count; ++s) local_[s] = remote_->is_local(s);
        first_local_ = count;
        for (std::size_t s = count; s-- > 0;)
            if (local_[s]) first_local_ = s;
        if (first_local_ == count)
            throw std::invalid_argument(std::string(Executor::who) + ": no stage runs in this process (rank " +
                                        std::to_string(remote_->rank()) + ")");
        for (std::size_t s = first_local_; s < count && local_[s]; ++s) last_local_ = s;
        for (std::size_t s = last_local_ + 1; s < count; ++s)
            if (local_[s])
                throw std::invalid_argument(std::string(Executor::who) + ": the stages of rank " +
                                            std::to_string(remote_->rank()) +
                                            " are not one contiguous group (stage " + std::to_string(s) + ")");
    }

    /// A message for stage `to`, which another process runs: its payload (and targets, and on a backward message
    /// the micro-batch's loss) goes to the transport; a backward channel's buffer is released (a forward channel's
    /// is the sending stage's output until its BW: pb/forward_channel.hpp).
    void send_remote(std::size_t to, const boundary_message& msg) {
        if (msg.dir == direction::forward) {
            forward_channel<T>& ch = *ex_.forward_[to - 1];
            const std::size_t k = ch.buffer_of(msg.micro_batch);
            ex_.remote_->send(to, msg,
                              std::as_bytes(std::span<const T>(ch.values(k), msg.batch * ch.sample_elements())),
                              {ch.labels(k), msg.batch * Executor::targets_per_sample}, boundary_note{});
            return;
        }
        boundary_channel<T>& ch = *ex_.backward_[to];
        const std::size_t elems = Executor::stack_type::activation_size[ex_.stages_[to].range().end];
        const auto& r = ex_.results_[msg.micro_batch % ex_.ring_];
        const boundary_note note{static_cast<double>(r.loss), r.correct, r.targets};
        ex_.remote_->send(to, msg, std::as_bytes(std::span<const T>(ch.values(msg.buffer), msg.batch * elems)), {},
                          note);
        ch.release(msg.buffer);
    }

    // The graph is idle: receive from the other processes (delivering into the graph) until the local stages are,
    // then until this process's sends have reached their processes (receiving drives the transport; what arrives
    // now is a forward message of a later run, which waits in the backlog).
    void run_with_remote() {
        pipeprop::detail::receive_until_idle(
            *ex_.remote_, Executor::who, [this] { return local_stages_idle(); },
            [this](const remote_message& m) { accept_remote(m); },
            [this] {
                deliver_backlog();
                ex_.graph_->wait();
            },
            [this] { return waiting_for(); });
        ex_.graph_->wait();  // nothing runs (the local stages are idle); keeps the invariant explicit
    }

    // The kept forward messages whose micro-batch has been pushed.
    void deliver_backlog() {
        backlog_.deliver([this](const auto& h) { return h.header.micro_batch < ex_.next_id_; },
                         [this](const remote_message& m) { accept_remote(m); });
    }

private:
    // Whether every local stage has run its ops of this run: its stream is done, or waits for the forward of a
    // micro-batch not pushed yet.
    [[nodiscard]] bool local_stages_idle() const {
        for (std::size_t s = ex_.first_local_; s <= ex_.last_local_; ++s) {
            const std::optional<op> o = ex_.per_[s]->stream.current();
            if (o && !(o->kind == op_kind::forward && o->micro_batch >= ex_.next_id_)) return false;
        }
        return true;
    }
    // The message a local stage waits for from another process, for the timeout's message. A stage waiting for a
    // local neighbour (which itself waits for a remote one) is named only when no stage waits for a remote one.
    [[nodiscard]] std::string waiting_for() const {
        const std::size_t first_local_ = ex_.first_local_, last_local_ = ex_.last_local_;
        std::string local_wait;
        for (std::size_t s = first_local_; s <= last_local_; ++s) {
            const std::optional<op> o = ex_.per_[s]->stream.current();
            if (!o || (o->kind == op_kind::forward && o->micro_batch >= ex_.next_id_)) continue;
            const bool fwd = o->kind == op_kind::forward;
            const std::size_t from = fwd ? s - 1 : s + 1;
            std::string what = "stage " + std::to_string(s) + " waits for the " + (fwd ? "forward" : "backward") +
                               " message of micro-batch " + std::to_string(o->micro_batch) + " from stage " +
                               std::to_string(from) + " on rank " + std::to_string(ex_.remote_->rank_of(from));
            if (from < first_local_ || from > last_local_) return what;
            if (local_wait.empty()) local_wait = std::move(what);
        }
        return local_wait.empty() ? "no stage waits" : local_wait;
    }
    // A message from another process: copied into this process's channel and put into the graph, or kept until
    // its micro-batch is pushed here (a forward message of a later run).
    void accept_remote(const remote_message& m) {
        const auto& stages_ = ex_.stages_;
        const char* const who = Executor::who;
        if (m.to >= stages_.size() || !ex_.local_[m.to] || (m.header.dir == direction::forward && m.to == 0) ||
            (m.header.dir == direction::backward && m.to + 1 >= stages_.size()))
            throw std::logic_error(std::string(who) + ": rank " + std::to_string(ex_.remote_->rank()) +
                                   " received a message for stage " + std::to_string(m.to) + ", which it does not run");
        const bool fwd = m.header.dir == direction::forward;
        const std::size_t elems =
            Executor::stack_type::activation_size[fwd ? stages_[m.to].range().begin : stages_[m.to].range().end];
        if (m.header.batch == 0 || m.header.batch > ex_.max_b_ ||
            m.values.size() != m.header.batch * elems * sizeof(T) ||
            m.labels.size() != (fwd ? m.header.batch * Executor::targets_per_sample : 0))
            throw std::logic_error(std::string(who) + ": rank " + std::to_string(ex_.remote_->rank()) + ", stage " +
                                   std::to_string(m.to) + ", micro-batch " + std::to_string(m.header.micro_batch) +
                                   ": a message of " + std::to_string(m.values.size()) + " payload bytes for " +
                                   std::to_string(m.header.batch) + " samples of " + std::to_string(elems) +
                                   " values each");
        if (fwd && m.header.micro_batch >= ex_.next_id_) {
            backlog_.keep(m);
            return;
        }
        boundary_message h = m.header;
        if (fwd) {  // into the buffer the stage's F binds as its input; its BW releases it
            forward_channel<T>& ch = *ex_.forward_[m.to - 1];
            h.buffer = ch.claim(h.micro_batch);
            std::memcpy(static_cast<void*>(ch.values(h.buffer)), m.values.data(), m.values.size());
            std::copy(m.labels.begin(), m.labels.end(), ch.labels(h.buffer));
        } else {
            boundary_channel<T>& ch = *ex_.backward_[m.to];
            h.buffer = ch.acquire();
            std::memcpy(static_cast<void*>(ch.values(h.buffer)), m.values.data(), m.values.size());
            ex_.results_[h.micro_batch % ex_.ring_] = {static_cast<T>(m.note.loss), m.note.correct, m.note.targets};
        }
        ex_.graph_->put(m.to, h);
    }

    Executor& ex_;
    pipeprop::detail::remote_backlog backlog_;  // forward messages that came before their micro-batch's push
};

}  // namespace pipeprop::pb::detail
