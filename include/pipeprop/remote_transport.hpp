// pipeprop/remote_transport.hpp: the interface through which an executor exchanges boundary messages with stages
// that run in other processes (the MPI implementation: pipeprop/mpi/mpi_transport.hpp).
//
// A process runs a contiguous group of the pipeline's stages ("local" stages) with the same executor core as a
// single process (lane_graph.hpp); a message to a stage of another process is handed to the transport, which copies
// its header and payload (tensor [b, sample_elements] and, on forward messages, the targets [b, targets per
// sample]) and delivers them to the process that runs the target stage. There the executor copies the payload into
// its own boundary channel (boundary_channel.hpp) and puts the message into its graph as if a local lane had sent
// it. No pointer ever crosses a process. Backward messages also carry a boundary_note: the loss the last stage found
// for that micro-batch, so that the process of stage 0 (which reports completed micro-batches) learns it.
// The semantics do not change: every stage still runs its own op list (PB: the clocked model, PB-paper, Kosson et
// al., arXiv 2003.11666, §3; docs/pb-semantics.md §1), so a run across processes is bit-identical to one
// process (tests/mpi). This header has no MPI dependency: the core library compiles and runs without MPI.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/boundary_channel.hpp"

namespace pipeprop {

/// What a backward message carries besides its gradient: the last stage's result for the micro-batch.
struct boundary_note {
    double loss = 0;             ///< mean loss over the micro-batch's counted targets (nats)
    std::uint64_t correct = 0;   ///< counted targets predicted right
    std::uint64_t targets = 0;   ///< counted targets N
    double loss_sum = 0;         ///< the loss summed over those targets (nats; the synchronous schedules' step loss
                                 ///< adds these sums, so every process reports the same bits)
    std::uint64_t run = 0;       ///< the sender's run number (sync: its step() / consecutive_steps() calls, the same
                                 ///< on every process), on every message: a later run's early message waits, a stale
                                 ///< one (of a run that failed) is refused
};

/// A message that arrived from another process: the target stage, the header (its `buffer` is meaningless here),
/// the payload bytes (header.batch rows of the target channel's sample size) and targets, and the note.
struct remote_message {
    std::size_t to = 0;  ///< The target stage.
    boundary_message header{};  ///< The message header (its buffer field is meaningless here).
    std::span<const std::byte> values;  ///< Payload bytes: header.batch rows of the target channel's sample size.
    std::span<const std::int32_t> labels;  ///< Targets [header.batch, labels per sample] (forward messages).
    boundary_note note{};  ///< The sender's note (boundary_note).
};

/// Thrown by an executor when no message arrived from another process within the transport's timeout while a local
/// stage waited for one (a peer that hangs or died): what() names this process's rank, the waiting stage and the
/// micro-batch.
class remote_timeout_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Thrown by a transport's receive() when another process reported that it failed (remote_transport::
/// report_failure): what() names this process's rank, the failed process's rank and stages, and its message.
class remote_peer_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Message transport between processes, each running a contiguous group of stages. Implementations must allow
/// send() from any thread (the lanes' threads) concurrently with receive() (the executor's driving thread).
class remote_transport {
public:
    virtual ~remote_transport() = default;
    /// Whether `stage` runs in this process.
    [[nodiscard]] virtual bool is_local(std::size_t stage) const = 0;
    /// This process's number (for messages), e.g. the MPI rank.
    [[nodiscard]] virtual int rank() const = 0;
    /// Sends a message for stage `to` (not local): header, payload values (bytes), targets and note are copied
    /// before the call returns. Throws std::runtime_error when the transport fails.
    virtual void send(std::size_t to, const boundary_message& header, std::span<const std::byte> values,
                      std::span<const std::int32_t> labels, const boundary_note& note) = 0;
    /// Waits up to `wait` for messages from other processes and calls handler once per arrived message (the spans
    /// are valid during the call). Returns how many arrived (0: the wait ran out). Throws std::runtime_error when
    /// the transport fails or a peer reported a failure.
    virtual std::size_t receive(std::chrono::milliseconds wait,
                                const std::function<void(const remote_message&)>& handler) = 0;
    /// How long an executor waits for a message before it gives up (remote_timeout_error).
    [[nodiscard]] virtual std::chrono::milliseconds timeout() const = 0;
    /// The process that runs `stage` (for messages).
    [[nodiscard]] virtual int rank_of(std::size_t stage) const = 0;
    /// Tells every other process that this one failed with `what` (best effort: waits a bounded time, a few
    /// seconds at most, for them to take the note); their receive() then throws remote_peer_error naming this
    /// process and its stages, so that they end with a message instead of waiting out their timeout. Never throws.
    virtual void report_failure(std::string_view what) noexcept = 0;
    /// Whether sends handed to the transport may not have reached their process yet (an executor keeps receiving,
    /// and so driving the transport, until they have, before a run returns).
    [[nodiscard]] virtual bool sending() = 0;
};

/// The ranks of S stages cut into P contiguous groups, the first S mod P of them one stage larger: rank_of[s].
/// Throws std::invalid_argument when P == 0 or P > S (a rank without a stage).
[[nodiscard]] inline std::vector<int> contiguous_ranks(std::size_t stages, std::size_t ranks) {
    if (ranks == 0 || ranks > stages)
        throw std::invalid_argument("pipeprop::contiguous_ranks: " + std::to_string(ranks) + " ranks for " +
                                    std::to_string(stages) + " stages; every rank needs at least one stage (P <= S)");
    std::vector<int> rank_of(stages);
    std::size_t s = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
        const std::size_t n = stages / ranks + (r < stages % ranks ? 1 : 0);
        for (std::size_t i = 0; i < n; ++i) rank_of[s++] = static_cast<int>(r);
    }
    return rank_of;
}

/// Reports the exception `e` (the one that ended this process's part of a run) to the other processes through
/// `t` (remote_transport::report_failure), unless it is a remote_peer_error: that failure was a peer's, which
/// reported it already. Never throws.
inline void report_exception(remote_transport& t, const std::exception_ptr& e) noexcept {
    try {
        std::rethrow_exception(e);
    } catch (const remote_peer_error&) {
    } catch (const std::exception& x) {
        t.report_failure(x.what());
    } catch (...) {
        t.report_failure("an exception of unknown type");
    }
}

}  // namespace pipeprop
