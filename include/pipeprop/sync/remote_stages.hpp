// pipeprop/sync/remote_stages.hpp: the synchronous schedule executor's stages in other processes
// (executor_options::remote, remote_transport.hpp, pipeprop/mpi/mpi_transport.hpp): the part of
// sync::schedule_executor (sync/schedule_executor.hpp) that exchanges boundary messages with the other processes.
// Include it (mpi_transport.hpp does) in one translation unit of a program that gives options::remote a transport: it
// registers the exchange for float and double executors (sync/remote_part.hpp); other programs do not compile it.
//
// This process runs only its local stages on its lanes (a virtual-stage schedule's device keeps all of its stages in
// one process); a message to a stage of another process goes to the transport (payload, targets, and on backward
// messages the micro-batch's loss totals as a boundary_note), and the driving thread, once its graph is idle,
// receives the other processes' messages into its channels and graph until every local stage has made its optimizer
// steps and its own sends have arrived (remote_receive.hpp); a forward message of a later step (a process that is
// ahead) waits in a backlog (remote_backlog.hpp) until that step starts. Every stage runs the same ops as in one
// process (2BP-paper, Rae et al. arXiv 2405.18047, §3; docs/schedules.md §3), so the losses, the local
// stages' weights and optimizer state are bitwise those of a single process (tests/mpi/test_mpi_sync.cpp). No
// message for timeout(): remote_timeout_error naming the waiting stage. Not with clipping (a global norm) or the
// sequential executor.
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
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/executor_kind.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/remote_backlog.hpp"
#include "pipeprop/remote_receive.hpp"
#include "pipeprop/remote_transport.hpp"
#include "pipeprop/sync/remote_part.hpp"

namespace pipeprop::sync::detail {

/// The exchange of a schedule executor over values of type T (its remote_host): its state of the running steps and
/// the functions that send to, receive from and wait for the stages of other processes. The executor owns it and
/// calls it only with options::remote.
template <class T>
class remote_stages final : public remote_part<T> {
public:
    explicit remote_stages(const remote_host<T>& host) noexcept : ex_(host) {}

    std::vector<bool> setup(std::vector<std::size_t>& lane_of, executor_kind executor, double max_gradient_norm,
                            std::size_t remote_lane) override {
        remote_transport& t = ex_.transport();
        const std::string me = std::string(ex_.who()) + ": rank " + std::to_string(t.rank()) + ": ";
        if (executor != executor_kind::concurrent)
            throw std::invalid_argument(me + "stages in other processes (options::remote) need the concurrent "
                                             "executor");
        if (max_gradient_norm > 0)
            throw std::invalid_argument(me + "global gradient clipping needs every stage's gradient; not with stages "
                                             "in other processes (options::remote)");
        const std::size_t p = ex_.stage_count();
        std::vector<bool> local(p);
        for (std::size_t s = 0; s < p; ++s) local[s] = t.is_local(s);
        if (std::find(local.begin(), local.end(), true) == local.end())
            throw std::invalid_argument(me + "no stage runs in this process");
        for (std::size_t s = 0; s < p; ++s)
            for (std::size_t u = s + 1; u < p; ++u)
                if (lane_of[s] == lane_of[u] && t.rank_of(s) != t.rank_of(u))
                    throw std::invalid_argument(me + "stages " + std::to_string(s) + " and " + std::to_string(u) +
                                                " run on device " + std::to_string(lane_of[s]) +
                                                " of the schedule but on ranks " + std::to_string(t.rank_of(s)) +
                                                " and " + std::to_string(t.rank_of(u)) +
                                                " (a device's stages must run in one process)");
        std::vector<std::size_t> dense(p, remote_lane);
        std::size_t lanes = 0;
        for (std::size_t s = 0; s < p; ++s) {
            if (!local[s]) {
                lane_of[s] = remote_lane;
                continue;
            }
            if (dense[lane_of[s]] == remote_lane) dense[lane_of[s]] = lanes++;
            lane_of[s] = dense[lane_of[s]];
        }
        last_local_ = local.back();
        return local;
    }

    void begin_steps(std::uint64_t first, std::size_t steps, std::size_t m) override {
        remote_first_ = first;
        remote_steps_ = steps;
        remote_m_ = m;
        notes_.assign(steps * m, loss_totals{});
    }

    [[nodiscard]] const loss_totals& totals_of(std::size_t g) const override {
        return last_local_ ? ex_.last_stage_totals(g) : notes_[g];
    }

    // Called from the sending stage's lane.
    void send_remote(std::size_t to, const boundary_message& msg) override {
        const bool fwd = msg.dir == direction::forward;
        boundary_channel<T>& ch = ex_.channel(msg.dir, to);
        const std::size_t elems = ex_.message_size(msg.dir, to);
        boundary_note note{};
        std::span<const std::int32_t> labels;
        if (fwd) {
            labels = {ch.labels(msg.buffer), msg.batch * ex_.targets_per_sample()};
        } else {
            const loss_totals& t = totals_of(static_cast<std::size_t>(msg.sequence - remote_first_) * remote_m_ +
                                             msg.micro_batch);
            note = {t.mean(), t.correct, t.count, t.loss_sum};
        }
        note.run = ex_.run();
        ex_.transport().send(to, msg, std::as_bytes(std::span<const T>(ch.values(msg.buffer), msg.batch * elems)),
                             labels, note);
        ch.release(msg.buffer);
    }

    // The graph is idle: receive the other processes' messages (into the graph) until every local stage has made
    // its optimizer steps, then until this process's sends have arrived (what arrives then is of a later step).
    void run_with_remote() override {
        pipeprop::detail::receive_until_idle(
            ex_.transport(), ex_.who(), [this] { return local_stages_updated(); },
            [this](const remote_message& m) { accept_remote(m); }, [this] { ex_.wait(); },
            [this] { return waiting_for(); });
        ex_.wait();
    }

    // The kept messages whose run (step() or consecutive_steps() call) is now.
    void deliver_backlog() override {
        backlog_.deliver([this](const auto& h) { return h.note.run <= ex_.run(); },
                         [this](const remote_message& m) { accept_remote(m); });
    }

    void clear_backlog() noexcept override { backlog_.clear(); }

private:
    [[nodiscard]] bool local_stages_updated() const {
        for (std::size_t s = 0; s < ex_.stage_count(); ++s)
            if (ex_.is_local(s) && !ex_.updated(s)) return false;
        return true;
    }

    // The message a local stage waits for from another process, for the timeout's message. A stage waiting for a
    // local neighbour (which itself waits for a remote one) is named only when no stage waits for a remote one.
    [[nodiscard]] std::string waiting_for() const {
        std::string local_wait;
        for (std::size_t s = 0; s < ex_.stage_count(); ++s) {
            if (!ex_.is_local(s)) continue;
            const std::optional<op> next = ex_.next_op(s);
            if (!next) continue;
            const op o = *next;
            const bool fwd = o.kind == op_kind::forward;
            if (!fwd && o.kind != op_kind::backward_input && o.kind != op_kind::backward_fused) continue;
            const std::size_t from = fwd ? s - 1 : s + 1;
            std::string what = "stage " + std::to_string(s) + " waits for the " + (fwd ? "forward" : "backward") +
                               " message of micro-batch " + std::to_string(o.micro_batch % remote_m_) + " of step " +
                               std::to_string(remote_first_ + o.micro_batch / remote_m_) + " from stage " +
                               std::to_string(from) + " on rank " + std::to_string(ex_.transport().rank_of(from));
            if (!ex_.is_local(from)) return what;
            if (local_wait.empty()) local_wait = std::move(what);
        }
        return local_wait.empty() ? "no stage waits for a message" : local_wait;
    }

    // A message from another process: copied into this process's channel and put into the graph, or kept until its
    // step runs (a forward message of a later step). Throws std::logic_error for a message this process cannot take.
    void accept_remote(const remote_message& m) {
        const std::uint64_t run_ = ex_.run();
        const std::size_t p = ex_.stage_count();
        const bool fwd = m.header.dir == direction::forward;
        const std::string me = std::string(ex_.who()) + ": rank " + std::to_string(ex_.transport().rank()) + ": ";
        if (m.to >= p || !ex_.is_local(m.to) || (fwd && m.to == 0) || (!fwd && m.to + 1 >= p))
            throw std::logic_error(me + "received a message for stage " + std::to_string(m.to) +
                                   ", which it does not run");
        const std::size_t elems = ex_.message_size(m.header.dir, m.to);
        if (m.header.batch == 0 || m.header.batch > ex_.max_batch() ||
            m.values.size() != m.header.batch * elems * sizeof(T) ||
            m.labels.size() != (fwd ? m.header.batch * ex_.targets_per_sample() : 0))
            throw std::logic_error(me + "stage " + std::to_string(m.to) + ", micro-batch " +
                                   std::to_string(m.header.micro_batch) + ": a message of " +
                                   std::to_string(m.values.size()) + " payload bytes for " +
                                   std::to_string(m.header.batch) + " samples of " + std::to_string(elems) +
                                   " values each");
        if (m.note.run < run_) return;  // of a run that failed here or elsewhere: nobody waits for it any more
        if (m.note.run > run_) {  // a later step()'s: waits for it
            if (!fwd)
                throw std::logic_error(me + "a backward message of run " + std::to_string(m.note.run) +
                                       " (step " + std::to_string(m.header.sequence) + ") arrived during run " +
                                       std::to_string(run_));
            backlog_.keep(m);
            return;
        }
        if (remote_first_ > m.header.sequence || m.header.micro_batch >= remote_m_)
            throw std::logic_error(me + "micro-batch " + std::to_string(m.header.micro_batch) + " of step " +
                                   std::to_string(m.header.sequence) + " arrived during steps " +
                                   std::to_string(remote_first_) + " .. " +
                                   std::to_string(remote_first_ + remote_steps_ - 1) + " of " +
                                   std::to_string(remote_m_) + " micro-batches");
        boundary_channel<T>& ch = ex_.channel(m.header.dir, m.to);
        boundary_message h = m.header;
        h.buffer = ch.acquire();
        std::memcpy(static_cast<void*>(ch.values(h.buffer)), m.values.data(), m.values.size());
        if (fwd)
            std::copy(m.labels.begin(), m.labels.end(), ch.labels(h.buffer));
        else
            notes_[static_cast<std::size_t>(h.sequence - remote_first_) * remote_m_ + h.micro_batch] = {
                m.note.loss_sum, static_cast<std::size_t>(m.note.targets), static_cast<std::size_t>(m.note.correct)};
        ex_.put(m.to, h);
    }

    const remote_host<T>& ex_;
    bool last_local_ = true;           // the last stage runs here: its totals are the executor's own
    std::uint64_t remote_first_ = 0;  // the running steps: first, count, micro-batches per step
    std::size_t remote_steps_ = 0, remote_m_ = 1;
    std::vector<loss_totals> notes_;  // [steps * m]: the backward notes' loss totals (last stage elsewhere)
    pipeprop::detail::remote_backlog backlog_;  // messages of a later step
};

/// Registers the exchange for float and double executors (once per program, before main()).
inline const bool remote_stages_registered = pipeprop::detail::register_remote_part<remote_part, remote_stages>();

}  // namespace pipeprop::sync::detail
