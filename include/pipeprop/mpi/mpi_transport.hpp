// pipeprop/mpi/mpi_transport.hpp: boundary messages between processes over MPI: the remote_transport
// (remote_transport.hpp) of a pipeline whose contiguous groups of stages run on the ranks of an MPI communicator.
//
// Needs MPI (OpenMPI: libopenmpi-dev; CMake: find_package(MPI), target MPI::MPI_CXX; the rest of pipeprop does not):
// MPI must be initialized with MPI_THREAD_MULTIPLE (mpi::session), because the lanes send from oneTBB's threads
// while the driving thread receives. A message is one non-blocking point-to-point send (MPI_Isend) of a header
// (target stage, micro-batch, sequence, samples b, direction, value bytes, targets, the backward note) followed by
// its payload, tagged by direction and micro-batch; the receiver probes (MPI_Iprobe / MPI_Mprobe), checks the size
// against the header and hands the message to the executor, which checks it against the stage types. Per message
// the bytes are 96 + b x (boundary elements x sizeof(T)) + b x targets x 4 (forward only).
// Errors: the communicator's error handler is MPI_ERRORS_RETURN, and every failed call throws std::runtime_error
// naming the call and this rank; a peer that dies or hangs is detected by the executor's bounded wait (timeout())
// or by mpirun, which ends the job when a rank exits abnormally. A rank that fails (an executor's exception, or a
// transport destroyed while an exception propagates) sends a failure note (its rank, stages and message) to every
// other rank and waits a few seconds at most for their acknowledgements; their receive() throws
// remote_peer_error naming it, so a job whose rank throws ends with the survivors naming the failed rank and
// stages (tests/mpi/fault.cmake), before the failed rank's MPI_Abort ends the job.
// Including this header registers the executors' exchange with other processes (pb/remote_stages.hpp,
// sync/remote_stages.hpp), which a program without a transport does not compile.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: no deprecated C++ bindings (and their warnings)
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pipeprop/pb/remote_stages.hpp"    // registers the PB executor's exchange with other processes
#include "pipeprop/sync/remote_stages.hpp"  // and the synchronous schedule executor's
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::mpi {

/// Throws std::runtime_error naming `call` and the MPI error string unless rc is MPI_SUCCESS.
inline void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    throw std::runtime_error("pipeprop::mpi: rank " + std::to_string(rank) + ": " + call + " failed: " +
                             std::string(text, static_cast<std::size_t>(len)));
}

/// MPI_Init_thread with MPI_THREAD_MULTIPLE and MPI_Finalize (RAII); sets MPI_ERRORS_RETURN on MPI_COMM_WORLD.
/// Throws std::runtime_error when the library does not provide MPI_THREAD_MULTIPLE.
class session {
public:
    /// MPI_Init_thread(argc, argv) with MPI_THREAD_MULTIPLE; throws std::runtime_error when it is not provided.
    session(int& argc, char**& argv) {
        int provided = 0;
        check(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        if (provided < MPI_THREAD_MULTIPLE) {
            MPI_Finalize();
            throw std::runtime_error("pipeprop::mpi: the MPI library does not provide MPI_THREAD_MULTIPLE");
        }
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;
    ~session() { MPI_Finalize(); }
    [[nodiscard]] static int rank(MPI_Comm c = MPI_COMM_WORLD) {  ///< This process's rank in communicator c.
        int r = 0;
        MPI_Comm_rank(c, &r);
        return r;
    }
    [[nodiscard]] static int size(MPI_Comm c = MPI_COMM_WORLD) {  ///< Number of processes in communicator c.
        int n = 0;
        MPI_Comm_size(c, &n);
        return n;
    }
};

/// Ends the whole job (MPI_Abort on MPI_COMM_WORLD with exit code `code`) after flushing stdout and stderr and
/// waiting `grace`: a rank that failed and reported it (remote_transport::report_failure) gives the ranks that took
/// its note the time to print what failed and end the job themselves; a rank ending because of a peer's failure
/// (remote_peer_error) passes 0.
[[noreturn]] inline void abort_job(int code, std::chrono::milliseconds grace) {
    std::fflush(stdout);
    std::fflush(stderr);
    if (grace.count() > 0) std::this_thread::sleep_for(grace);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; if it did, the rank must still end
}

/// The ranks of S stages cut into P contiguous groups (remote_transport.hpp).
using pipeprop::contiguous_ranks;

/// The MPI transport over a duplicate of communicator `comm` (MPI_Comm_dup: its messages never mix with the caller's
/// or with another transport's; constructing it is collective over `comm`, MPI initialized with
/// MPI_THREAD_MULTIPLE): stage s runs on rank rank_of[s]. timeout: how long an executor waits for a message before
/// it gives up.
class transport final : public remote_transport {
public:
    /// Transport over comm with stage s on rank rank_of[s]; collective over comm (see the class comment).
    transport(MPI_Comm comm, std::vector<int> rank_of, std::chrono::milliseconds timeout = std::chrono::seconds(60))
        : rank_of_(std::move(rank_of)), timeout_(timeout), uncaught_(std::uncaught_exceptions()) {
        check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        int size = 0;
        check(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
        for (std::size_t s = 0; s < rank_of_.size(); ++s)
            if (rank_of_[s] < 0 || rank_of_[s] >= size)
                throw std::invalid_argument("pipeprop::mpi::transport: stage " + std::to_string(s) + " on rank " +
                                            std::to_string(rank_of_[s]) + " of " + std::to_string(size));
    }
    transport(const transport&) = delete;
    transport& operator=(const transport&) = delete;
    /// Reports a failure to the other ranks when destroyed while an exception propagates (unless this rank
    /// reported one already or the failure was a peer's); completes the sends in flight (at most 5 s: a peer that
    /// failed never receives them; then they are cancelled and completed); frees the communicator.
    ~transport() override {
        if (std::uncaught_exceptions() > uncaught_)
            report_failure("its stages were left by an exception (the transport was destroyed during unwinding)");
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        std::lock_guard lock(mutex_);
        try {
            while (!sends_.empty() && std::chrono::steady_clock::now() < end) {
                test_sends();
                std::this_thread::yield();
            }
        } catch (...) {
        }
        // Sends a failed peer never received: released without waiting (OpenMPI's ob1 cannot cancel a send, and a
        // wait could block forever); their buffers stay allocated, since MPI may still read them.
        if (!sends_.empty()) {
            auto* kept = new std::list<outgoing>();  // deliberately never freed
            for (auto& s : sends_) MPI_Request_free(&s.request);
            kept->splice(kept->end(), sends_);
        }
        MPI_Comm_free(&comm_);
    }

    [[nodiscard]] bool is_local(std::size_t stage) const override { return rank_of_.at(stage) == rank_; }
    [[nodiscard]] int rank() const override { return rank_; }
    [[nodiscard]] std::chrono::milliseconds timeout() const override { return timeout_; }
    [[nodiscard]] int rank_of(std::size_t stage) const override { return rank_of_.at(stage); }
    void report_failure(std::string_view what) noexcept override {
        if (reported_ || peer_failed_) return;
        reported_ = true;
        try {
            int size = 0;
            check(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
            failure_note_ = stages_text(rank_) + " failed: " + std::string(what);
            const std::string& note = failure_note_;
            std::vector<MPI_Request> requests;
            for (int r = 0; r < size; ++r) {
                if (r == rank_) continue;
                requests.emplace_back();
                check(MPI_Isend(note.data(), static_cast<int>(note.size()), MPI_BYTE, r, failure_tag, comm_,
                                &requests.back()),
                      "MPI_Isend");
            }
            // Wait for every peer's acknowledgement (a peer acknowledges when its receive() takes the note), and
            // acknowledge the failure notes of peers that fail at the same time, for a bounded time.
            const auto end = std::chrono::steady_clock::now() + std::min(timeout_, std::chrono::milliseconds(3000));
            int acknowledged = 0;
            char ignored = 0;
            while (acknowledged < size - 1 && std::chrono::steady_clock::now() < end) {
                int flag = 0;
                MPI_Status status{};
                check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &status), "MPI_Iprobe");
                if (!flag) {
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                    continue;
                }
                if (status.MPI_TAG == acknowledgement_tag) {
                    check(MPI_Recv(&ignored, 1, MPI_BYTE, status.MPI_SOURCE, acknowledgement_tag, comm_,
                                   MPI_STATUS_IGNORE),
                          "MPI_Recv");
                    ++acknowledged;
                } else if (status.MPI_TAG == failure_tag) {
                    discard(status);
                    acknowledge(status.MPI_SOURCE);
                } else {
                    discard(status);  // a boundary message: nobody will use it any more
                }
            }
            for (auto& q : requests) {
                int done = 0;
                MPI_Test(&q, &done, MPI_STATUS_IGNORE);
                if (!done) MPI_Request_free(&q);  // its buffer (failure_note_) outlives the request
            }
        } catch (...) {  // best effort: the failing rank's own error is what its caller reports
        }
    }

    [[nodiscard]] bool sending() override {
        std::lock_guard lock(mutex_);
        test_sends();
        return !sends_.empty();
    }

    void send(std::size_t to, const boundary_message& h, std::span<const std::byte> values,
              std::span<const std::int32_t> labels, const boundary_note& note) override {
        wire w{to, h.micro_batch, h.sequence, h.batch, static_cast<std::uint64_t>(h.dir), values.size(),
               labels.size(), note.loss, note.correct, note.targets, note.loss_sum, note.run};
        std::lock_guard lock(mutex_);
        test_sends();
        const std::size_t bytes = sizeof(wire) + values.size() + labels.size_bytes();
        if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
            throw std::runtime_error("pipeprop::mpi: rank " + std::to_string(rank_) + ": a message of " +
                                     std::to_string(bytes) + " bytes for stage " + std::to_string(to) +
                                     " exceeds MPI's int count");
        if (free_.empty()) free_.emplace_back();  // allocates only until the pool covers the sends in flight
        sends_.splice(sends_.end(), free_, free_.begin());
        outgoing& o = sends_.back();
        o.bytes.resize(sizeof(wire) + values.size() + labels.size_bytes());
        std::memcpy(o.bytes.data(), &w, sizeof(wire));
        if (!values.empty()) std::memcpy(o.bytes.data() + sizeof(wire), values.data(), values.size());
        if (!labels.empty())
            std::memcpy(o.bytes.data() + sizeof(wire) + values.size(), labels.data(), labels.size_bytes());
        check(MPI_Isend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, rank_of_.at(to), tag(h), comm_,
                        &o.request),
              "MPI_Isend");
    }

    std::size_t receive(std::chrono::milliseconds wait,
                        const std::function<void(const remote_message&)>& handler) override {
        const auto end = std::chrono::steady_clock::now() + wait;
        std::size_t got = 0;
        for (std::size_t idle = 0;; ++idle) {
            int flag = 0;
            MPI_Message message{};
            MPI_Status status{};
            {
                std::lock_guard lock(mutex_);
                test_sends();
                check(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &message, &status), "MPI_Improbe");
                if (flag && status.MPI_TAG >= failure_tag) {
                    int count = 0;
                    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
                    std::string note(static_cast<std::size_t>(count), '\0');
                    check(MPI_Mrecv(note.data(), count, MPI_BYTE, &message, &status), "MPI_Mrecv");
                    if (status.MPI_TAG == acknowledgement_tag) continue;  // late: its sender gave up waiting
                    peer_failed_ = true;
                    acknowledge(status.MPI_SOURCE);
                    throw remote_peer_error("pipeprop::mpi: rank " + std::to_string(rank_) + ": " + note);
                }
                if (flag) {
                    int count = 0;
                    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
                    in_.resize(static_cast<std::size_t>(count));
                    check(MPI_Mrecv(in_.data(), count, MPI_BYTE, &message, &status), "MPI_Mrecv");
                }
            }
            if (flag) {
                handler(unpack(status.MPI_SOURCE));
                ++got;
                idle = 0;
                continue;  // take whatever else has arrived
            }
            if (got > 0 || std::chrono::steady_clock::now() >= end) return got;
            if (idle > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

private:
    struct wire {  // the header that precedes a message's payload
        std::uint64_t to, micro_batch, sequence, batch, dir, value_bytes, label_count;
        double loss;
        std::uint64_t correct, targets;
        double loss_sum;
        std::uint64_t run;
    };
    static_assert(sizeof(wire) == 96);
    struct outgoing {
        std::vector<std::byte> bytes;
        MPI_Request request = MPI_REQUEST_NULL;
    };

    // Boundary messages: tags 0 ... 31999 (MPI guarantees tags up to 32767); failure notes and their
    // acknowledgements above.
    static int tag(const boundary_message& h) {
        return static_cast<int>((h.micro_batch % 16000) * 2 + (h.dir == direction::backward ? 1 : 0));
    }
    static constexpr int failure_tag = 32000;
    static constexpr int acknowledgement_tag = 32001;

    // "rank R (stages a-b)" (or "stages 0, 3" for stages that are not consecutive) for the failure notes.
    std::string stages_text(int rank) const {
        std::vector<std::size_t> mine;
        for (std::size_t s = 0; s < rank_of_.size(); ++s)
            if (rank_of_[s] == rank) mine.push_back(s);
        const std::string r = "rank " + std::to_string(rank);
        if (mine.empty()) return r + " (no stage)";
        if (mine.size() == 1) return r + " (stage " + std::to_string(mine[0]) + ")";
        if (mine.back() - mine.front() + 1 == mine.size())
            return r + " (stages " + std::to_string(mine.front()) + "-" + std::to_string(mine.back()) + ")";
        std::string list;
        for (const std::size_t s : mine) list += (list.empty() ? "" : ", ") + std::to_string(s);
        return r + " (stages " + list + ")";
    }
    // Receives and drops the probed message (a failure note answered elsewhere, or a boundary message after a
    // failure).
    void discard(const MPI_Status& status) {
        int count = 0;
        check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
        std::vector<char> bytes(static_cast<std::size_t>(count));
        check(MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, comm_, MPI_STATUS_IGNORE),
              "MPI_Recv");
    }
    // Acknowledges a failure note of rank `to` (a one-byte message; waits a second at most for its completion).
    void acknowledge(int to) {
        static const char byte = 1;
        MPI_Request q = MPI_REQUEST_NULL;
        check(MPI_Isend(&byte, 1, MPI_BYTE, to, acknowledgement_tag, comm_, &q), "MPI_Isend");
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        for (int done = 0; !done;) {
            check(MPI_Test(&q, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (!done && std::chrono::steady_clock::now() >= end) {
                MPI_Request_free(&q);  // the buffer is a static byte
                return;
            }
        }
    }

    // Returns the buffers of completed sends to the pool (mutex_ held; no allocation: list splices).
    void test_sends() {
        for (auto it = sends_.begin(); it != sends_.end();) {
            int done = 0;
            check(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
            const auto next = std::next(it);
            if (done) free_.splice(free_.end(), sends_, it);
            it = next;
        }
    }

    remote_message unpack(int source) const {
        if (in_.size() < sizeof(wire))
            throw std::runtime_error("pipeprop::mpi: rank " + std::to_string(rank_) + ": a message of " +
                                     std::to_string(in_.size()) + " bytes from rank " + std::to_string(source) +
                                     " is shorter than its header");
        wire w{};
        std::memcpy(&w, in_.data(), sizeof(wire));
        if (in_.size() != sizeof(wire) + w.value_bytes + w.label_count * sizeof(std::int32_t) || w.dir > 1 ||
            w.to >= rank_of_.size())
            throw std::runtime_error("pipeprop::mpi: rank " + std::to_string(rank_) + ": a malformed message of " +
                                     std::to_string(in_.size()) + " bytes from rank " + std::to_string(source));
        remote_message m;
        m.to = w.to;
        m.header = {w.micro_batch, w.sequence, w.batch, w.dir == 0 ? direction::forward : direction::backward,
                    boundary_message::no_buffer};
        m.values = {in_.data() + sizeof(wire), w.value_bytes};
        m.labels = {reinterpret_cast<const std::int32_t*>(in_.data() + sizeof(wire) + w.value_bytes), w.label_count};
        m.note = {w.loss, w.correct, w.targets, w.loss_sum, w.run};
        return m;
    }

    MPI_Comm comm_;
    std::vector<int> rank_of_;
    std::chrono::milliseconds timeout_;
    int rank_ = 0;
    int uncaught_ = 0;           // std::uncaught_exceptions() at construction
    bool reported_ = false;      // this rank reported its failure
    bool peer_failed_ = false;   // a peer's failure note arrived
    std::string failure_note_;   // this rank's failure note (its sends may outlive report_failure)
    std::mutex mutex_;
    std::list<outgoing> sends_;  // in flight
    std::list<outgoing> free_;   // completed: their buffers are reused by later sends
    std::vector<std::byte> in_;  // the message being handed to the executor (the driving thread only)
};

}  // namespace pipeprop::mpi
