// pipeprop/pb/remote_stages.hpp: the concurrent PB executor's stages in other processes
// (remote_transport.hpp, pipeprop/mpi/mpi_transport.hpp): the part of pb::concurrent_executor
// (pb/concurrent_executor.hpp) that exchanges boundary messages with the other processes. Include it (mpi_transport.hpp
// does) in one translation unit of a program that gives options::remote a transport: it registers the exchange for
// float and double executors (pb/remote_part.hpp); other programs do not compile it.
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
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/pb/remote_part.hpp"
#include "pipeprop/remote_backlog.hpp"
#include "pipeprop/remote_receive.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::pb::detail {

/// The exchange of a concurrent executor over values of type T (its remote_host): the backlog of early forward
/// messages and the functions that send to, receive from and wait for the stages of other processes. The executor
/// owns it and calls it only with a transport.
template <class T>
class remote_stages final : public remote_part<T> {
public:
    explicit remote_stages(const remote_host<T>& host) noexcept : ex_(host) {}

    remote_layout setup() override {
        remote_transport& t = ex_.transport();
        const std::size_t count = ex_.stage_count();
        layout_.local.assign(count, false);
        for (std::size_t s = 0; s < count; ++s) layout_.local[s] = t.is_local(s);
        layout_.first = count;
        for (std::size_t s = count; s-- > 0;)
            if (layout_.local[s]) layout_.first = s;
        if (layout_.first == count)
            throw std::invalid_argument(std::string(ex_.who()) + ": no stage runs in this process (rank " +
                                        std::to_string(t.rank()) + ")");
        for (std::size_t s = layout_.first; s < count && layout_.local[s]; ++s) layout_.last = s;
        for (std::size_t s = layout_.last + 1; s < count; ++s)
            if (layout_.local[s])
                throw std::invalid_argument(std::string(ex_.who()) + ": the stages of rank " +
                                            std::to_string(t.rank()) + " are not one contiguous group (stage " +
                                            std::to_string(s) + ")");
        return layout_;
    }

    /// A message for stage `to`, which another process runs: its payload (and targets, and on a backward message
    /// the micro-batch's loss) goes to the transport; a backward channel's buffer is released (a forward channel's
    /// is the sending stage's output until its BW: pb/forward_channel.hpp).
    void send_remote(std::size_t to, const boundary_message& msg) override {
        const std::size_t elems = ex_.message_size(msg.dir, to);
        if (msg.dir == direction::forward) {
            forward_channel<T>& ch = ex_.forward_channel_to(to);
            const std::size_t k = ch.buffer_of(msg.micro_batch);
            ex_.transport().send(to, msg, std::as_bytes(std::span<const T>(ch.values(k), msg.batch * elems)),
                                 {ch.labels(k), msg.batch * ex_.targets_per_sample()}, boundary_note{});
            return;
        }
        boundary_channel<T>& ch = ex_.backward_channel_to(to);
        const auto& r = ex_.result(msg.micro_batch);
        const boundary_note note{static_cast<double>(r.loss), r.correct, r.targets};
        ex_.transport().send(to, msg, std::as_bytes(std::span<const T>(ch.values(msg.buffer), msg.batch * elems)), {},
                             note);
        ch.release(msg.buffer);
    }

    // The graph is idle: receive from the other processes (delivering into the graph) until the local stages are,
    // then until this process's sends have reached their processes (receiving drives the transport; what arrives
    // now is a forward message of a later run, which waits in the backlog).
    void run_with_remote() override {
        pipeprop::detail::receive_until_idle(
            ex_.transport(), ex_.who(), [this] { return local_stages_idle(); },
            [this](const remote_message& m) { accept_remote(m); },
            [this] {
                deliver_backlog();
                ex_.wait();
            },
            [this] { return waiting_for(); });
        ex_.wait();  // nothing runs (the local stages are idle); keeps the invariant explicit
    }

    void deliver_backlog() override {
        backlog_.deliver([this](const auto& h) { return h.header.micro_batch < ex_.next_id(); },
                         [this](const remote_message& m) { accept_remote(m); });
    }

private:
    // Whether every local stage has run its ops of this run: its stream is done, or waits for the forward of a
    // micro-batch not pushed yet.
    [[nodiscard]] bool local_stages_idle() const {
        for (std::size_t s = layout_.first; s <= layout_.last; ++s) {
            const std::optional<op> o = ex_.current_op(s);
            if (o && !(o->kind == op_kind::forward && o->micro_batch >= ex_.next_id())) return false;
        }
        return true;
    }
    // The message a local stage waits for from another process, for the timeout's message. A stage waiting for a
    // local neighbour (which itself waits for a remote one) is named only when no stage waits for a remote one.
    [[nodiscard]] std::string waiting_for() const {
        std::string local_wait;
        for (std::size_t s = layout_.first; s <= layout_.last; ++s) {
            const std::optional<op> o = ex_.current_op(s);
            if (!o || (o->kind == op_kind::forward && o->micro_batch >= ex_.next_id())) continue;
            const bool fwd = o->kind == op_kind::forward;
            const std::size_t from = fwd ? s - 1 : s + 1;
            std::string what = "stage " + std::to_string(s) + " waits for the " + (fwd ? "forward" : "backward") +
                               " message of micro-batch " + std::to_string(o->micro_batch) + " from stage " +
                               std::to_string(from) + " on rank " + std::to_string(ex_.transport().rank_of(from));
            if (from < layout_.first || from > layout_.last) return what;
            if (local_wait.empty()) local_wait = std::move(what);
        }
        return local_wait.empty() ? "no stage waits" : local_wait;
    }
    // A message from another process: copied into this process's channel and put into the graph, or kept until
    // its micro-batch is pushed here (a forward message of a later run).
    void accept_remote(const remote_message& m) {
        const std::size_t count = ex_.stage_count();
        const int rank = ex_.transport().rank();
        if (m.to >= count || !layout_.local[m.to] || (m.header.dir == direction::forward && m.to == 0) ||
            (m.header.dir == direction::backward && m.to + 1 >= count))
            throw std::logic_error(std::string(ex_.who()) + ": rank " + std::to_string(rank) +
                                   " received a message for stage " + std::to_string(m.to) + ", which it does not run");
        const bool fwd = m.header.dir == direction::forward;
        const std::size_t elems = ex_.message_size(m.header.dir, m.to);
        if (m.header.batch == 0 || m.header.batch > ex_.max_batch() ||
            m.values.size() != m.header.batch * elems * sizeof(T) ||
            m.labels.size() != (fwd ? m.header.batch * ex_.targets_per_sample() : 0))
            throw std::logic_error(std::string(ex_.who()) + ": rank " + std::to_string(rank) + ", stage " +
                                   std::to_string(m.to) + ", micro-batch " + std::to_string(m.header.micro_batch) +
                                   ": a message of " + std::to_string(m.values.size()) + " payload bytes for " +
                                   std::to_string(m.header.batch) + " samples of " + std::to_string(elems) +
                                   " values each");
        if (fwd && m.header.micro_batch >= ex_.next_id()) {
            backlog_.keep(m);
            return;
        }
        boundary_message h = m.header;
        if (fwd) {  // into the buffer the stage's F binds as its input; its BW releases it
            forward_channel<T>& ch = ex_.forward_channel_to(m.to);
            h.buffer = ch.claim(h.micro_batch);
            std::memcpy(static_cast<void*>(ch.values(h.buffer)), m.values.data(), m.values.size());
            std::copy(m.labels.begin(), m.labels.end(), ch.labels(h.buffer));
        } else {
            boundary_channel<T>& ch = ex_.backward_channel_to(m.to);
            h.buffer = ch.acquire();
            std::memcpy(static_cast<void*>(ch.values(h.buffer)), m.values.data(), m.values.size());
            ex_.result(h.micro_batch) = {static_cast<T>(m.note.loss), m.note.correct, m.note.targets};
        }
        ex_.put(m.to, h);
    }

    const remote_host<T>& ex_;
    remote_layout layout_;
    pipeprop::detail::remote_backlog backlog_;  // forward messages that came before their micro-batch's push
};

/// Registers the exchange for float and double executors (once per program, before main()).
inline const bool remote_stages_registered = pipeprop::detail::register_remote_part<remote_part, remote_stages>();

}  // namespace pipeprop::pb::detail
