// tests/mpi/mpi_test_main.hpp: what the MPI test programs (test_mpi_pb, test_mpi_sync) share: their main (MPI
// session, one OpenBLAS thread, `--fault HOW R` dispatch, the failure policy tests/mpi/fault.cmake checks) and the
// fault injection itself.
#pragma once

#include <pipeprop/mpi/mpi_transport.hpp>

#include <cblas.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace mpi_test {

/// Rank `victim` fails as `how` says: kill (SIGKILL), throw (std::runtime_error), stall (sleeps 600 s).
inline void inject_fault(const std::string& how, int victim) {
    std::fprintf(stderr, "rank %d: fault injected: %s\n", victim, how.c_str());
    if (how == "kill") std::raise(SIGKILL);
    if (how == "throw") throw std::runtime_error("rank " + std::to_string(victim) + ": injected failure");
    if (how == "stall") std::this_thread::sleep_for(std::chrono::seconds(600));
}

/// The programs' main: `name --fault HOW R` runs fault_run(HOW, R), otherwise checks() gives the exit code. An
/// exception ends the whole job: at once when another rank failed and said so (remote_peer_error), after 2 s when
/// this rank failed (the ranks that took its failure note name it and end the job first).
template <class FaultRun, class Checks>
int main_of(const char* name, int argc, char** argv, FaultRun fault_run, Checks checks) {
    namespace mpi = pipeprop::mpi;
    mpi::session session(argc, argv);
    try {
        openblas_set_num_threads(1);
        if (argc == 4 && std::strcmp(argv[1], "--fault") == 0) {
            fault_run(std::string(argv[2]), std::stoi(argv[3]));
            return 0;
        }
        return checks(session);
    } catch (const pipeprop::remote_peer_error& e) {
        std::fprintf(stderr, "%s: rank %d: %s\n", name, mpi::session::rank(), e.what());
        mpi::abort_job(2, std::chrono::milliseconds(0));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: rank %d: %s\n", name, mpi::session::rank(), e.what());
        mpi::abort_job(2, std::chrono::seconds(2));
    }
}

}  // namespace mpi_test
