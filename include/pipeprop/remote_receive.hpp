// pipeprop/remote_receive.hpp: how an executor's driving thread receives the messages of other processes once its
// flow graph is idle (remote_transport.hpp), with the transport's timeout. The same loop for PB's
// concurrent executor (pb/remote_stages.hpp) and the synchronous schedule executor (sync/remote_stages.hpp): receive
// (delivering into the graph) until the local stages have run their ops of the run, then until this process's own
// sends have reached their processes (receiving drives the transport). The semantics do not change: every stage runs
// its op list as in one process (PB-paper, Kosson et al., arXiv 2003.11666, §3; docs/pb-semantics.md §1).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "pipeprop/remote_transport.hpp"

namespace pipeprop::detail {

/// Receives from the other processes through t, accept(const remote_message&) once per message, until idle()
/// holds; after every wait that brought messages, received() runs (e.g. the graph's wait). Then receives until
/// t.sending() is false. Throws remote_timeout_error "<who>: rank R: no message from another process for T ms;
/// <waiting_for()> (a peer failed or hangs)" when no message arrives within t.timeout() while not idle, and
/// "<who>: rank R: its last messages were not received within T ms (a peer failed or hangs)" when the sends do not
/// complete within it; what t.receive and accept throw.
template <class Idle, class Accept, class Received, class WaitingFor>
void receive_until_idle(remote_transport& t, std::string_view who, Idle idle, const Accept& accept, Received received,
                        WaitingFor waiting_for) {
    using clock = std::chrono::steady_clock;
    auto last = clock::now();
    while (!idle()) {
        if (t.receive(std::chrono::milliseconds(100), accept) > 0) {
            received();
            last = clock::now();
        } else if (clock::now() - last > t.timeout()) {
            throw remote_timeout_error(std::string(who) + ": rank " + std::to_string(t.rank()) +
                                       ": no message from another process for " +
                                       std::to_string(t.timeout().count()) + " ms; " + waiting_for() +
                                       " (a peer failed or hangs)");
        }
    }
    const auto end = clock::now() + t.timeout();
    while (t.sending()) {
        (void)t.receive(std::chrono::milliseconds(1), accept);
        if (clock::now() > end)
            throw remote_timeout_error(std::string(who) + ": rank " + std::to_string(t.rank()) +
                                       ": its last messages were not received within " +
                                       std::to_string(t.timeout().count()) + " ms (a peer failed or hangs)");
    }
}

}  // namespace pipeprop::detail
