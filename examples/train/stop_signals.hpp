// examples/train/stop_signals.hpp: SIGINT and SIGTERM ask the main program to stop at a consistent point instead of
// killing it mid-write. The handler only stores the signal's number in a lock-free atomic (async-signal-safe); the
// epoch loop (train/training_loop.hpp) polls stop_requested() after every batch, drains the micro-batches in flight,
// saves a checkpoint of where it stopped when --checkpoint-out is given, and throws stopped_by_signal; the program
// says what was saved and exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports a
// process killed by it. A second SIGINT / SIGTERM ends the program at once (the handler is reset on delivery:
// SA_RESETHAND); a save it interrupts leaves <dir>.tmp-<pid>, which the next save removes. SIGXFSZ (a write past
// `ulimit -f`) is ignored, so the write fails with EFBIG and the program reports it like a full disk. --transport
// mpi runs keep the default actions (mpirun ends the whole job; a stop would have to be agreed by every rank).
#pragma once

#include <signal.h>

#include <atomic>
#include <csignal>
#include <stdexcept>
#include <string>

namespace train {

namespace detail {
/// The number of the first SIGINT / SIGTERM received, 0 before any.
inline std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" inline void on_stop_signal(int signal_number) {
    detail::stop_signal.store(signal_number, std::memory_order_relaxed);
}
}  // namespace detail

/// Installs the handlers of the file comment: SIGINT and SIGTERM set the stop flag (SA_RESTART: interrupted system
/// calls resume; SA_RESETHAND: a second signal has the default action), SIGXFSZ ignored. Throws std::runtime_error
/// when sigaction fails.
inline void install_stop_signals() {
    struct sigaction sa {};
    sa.sa_handler = detail::on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (::sigaction(SIGINT, &sa, nullptr) != 0 || ::sigaction(SIGTERM, &sa, nullptr) != 0 ||
        ::sigaction(SIGXFSZ, &ignore, nullptr) != 0)
        throw std::runtime_error("cannot install the signal handlers (sigaction failed)");
}

/// The number of the SIGINT / SIGTERM received since install_stop_signals, or 0.
[[nodiscard]] inline int stop_requested() noexcept { return detail::stop_signal.load(std::memory_order_relaxed); }

/// The signal's name for messages: "SIGINT", "SIGTERM", else "signal <n>".
[[nodiscard]] inline std::string signal_name(int signal_number) {
    if (signal_number == SIGINT) return "SIGINT";
    if (signal_number == SIGTERM) return "SIGTERM";
    return "signal " + std::to_string(signal_number);
}

/// Thrown by the epoch loop when it stopped for a signal; what() says what was saved. The program exits with
/// exit_code() = 128 + the signal's number.
class stopped_by_signal : public std::runtime_error {
public:
    stopped_by_signal(int signal_number, const std::string& what)
        : std::runtime_error(what), signal_(signal_number) {}
    [[nodiscard]] int signal_number() const noexcept { return signal_; }
    [[nodiscard]] int exit_code() const noexcept { return 128 + signal_; }

private:
    int signal_;
};

}  // namespace train
