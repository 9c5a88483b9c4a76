// pipeprop/remote_backlog.hpp: the messages from other processes that arrived before this process can take them
// (remote_transport.hpp): a forward message of a later run (sync: a later step() or consecutive_steps()
// call, sync/remote_stages.hpp) or of a micro-batch not pushed here yet (PB, pb/remote_stages.hpp). Both executors
// keep such a message as a copy and hand it to their accept function once it is due, in arrival order; the
// semantics do not change (every stage runs its op list as in one process, PB-paper, Kosson et al.,
// arXiv 2003.11666, §3; docs/pb-semantics.md §1), so a run across processes stays bit-identical to one
// process (tests/mpi).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::detail {

/// A copy of a message from another process that waits until it is due: the target stage, the header, the payload
/// bytes (header.batch rows of the target channel's sample size), the targets and the note.
struct held_message {
    std::size_t to = 0;
    boundary_message header{};
    std::vector<std::byte> values;
    std::vector<std::int32_t> labels;
    boundary_note note{};
};

/// The messages that wait, in arrival order. Not thread-safe: only the executor's driving thread (the one that
/// calls remote_transport::receive) uses it.
class remote_backlog {
public:
    /// Keeps a copy of m (its spans are valid only during the transport's handler call).
    void keep(const remote_message& m) {
        held_.push_back({m.to, m.header, std::vector<std::byte>(m.values.begin(), m.values.end()),
                         std::vector<std::int32_t>(m.labels.begin(), m.labels.end()), m.note});
    }

    /// Calls accept(remote_message) for every kept message for which due(const held_message&) holds, in arrival
    /// order, and keeps the others in their order. accept must not keep messages (a due message is never kept
    /// again). Throws what accept throws (the backlog is then in an unspecified state: the caller clears it or
    /// gives up).
    template <class Due, class Accept>
    void deliver(Due due, Accept accept) {
        std::size_t kept = 0;
        for (std::size_t i = 0; i < held_.size(); ++i) {
            held_message& h = held_[i];
            if (due(static_cast<const held_message&>(h)))
                accept(remote_message{h.to, h.header, h.values, h.labels, h.note});
            else if (kept++ != i)
                held_[kept - 1] = std::move(h);
        }
        held_.resize(kept);
    }

    /// Drops every kept message (a failed run: nobody waits for them any more).
    void clear() noexcept { held_.clear(); }
    /// Number of kept messages.
    [[nodiscard]] std::size_t size() const noexcept { return held_.size(); }

private:
    std::vector<held_message> held_;
};

}  // namespace pipeprop::detail
