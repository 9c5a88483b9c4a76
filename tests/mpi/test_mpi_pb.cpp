// PB with its stages in P processes: run under `mpirun -np P`. Every rank trains the same stream of
// micro-batches twice: with the sequential reference executor in this process (all stages), and with its contiguous
// group of stages of the same cut on the MPI transport (pipeprop/mpi/mpi_transport.hpp), the other stages on the
// other ranks. Checked on every rank, bitwise: the completed micro-batches (ids in order, losses, correct counts:
// every rank reports them all, with the loss the backward messages carried) and the weights and velocities of the
// rank's own stages. Networks: the small CNN fine-grained (S = 10) and the small ResNet cut inside its residual
// blocks (fine-grained S = 11, and split_at<5, 13, 16>); policies none, sc_lwp and weight stashing; b = 1 and b = 3
// with a partial last micro-batch; a drain in the middle; inputs and targets are NaN / -1 on the ranks that do not
// run stage 0 (never read there). Exit 0 when every rank agrees, 1 otherwise (each rank
// names what differs).
// Faults (`test_mpi_pb --fault kill|throw|stall R`): rank R kills itself (SIGKILL), throws, or stops answering at
// micro-batch 50 of a long run; the other ranks must end (non-zero) within seconds: mpirun ends the job when a
// rank dies; a rank that throws reports it to the others (its transport, destroyed during unwinding), which name it
// and its stages (remote_peer_error) and end the job (mpi::abort_job); a rank whose peer stalls gives up after the
// transport's timeout (2 s here) with remote_timeout_error naming the waiting stage (tests/mpi/fault.cmake times
// each).
#include <pipeprop/mpi/mpi_transport.hpp>

#include "mpi/mpi_test_main.hpp"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "unit/small_resnet.hpp"
#include "unit/test_pb_support.hpp"

namespace {

using namespace pb_test;
namespace mpi = pipeprop::mpi;
using test_nets::small_resnet;

int failures = 0;

void fail(const std::string& what) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", mpi::session::rank(), what.c_str());
}

template <class Pipe>
void check_run(const char* name, std::size_t b, std::size_t partial_last) {
    using Policy = typename Pipe::policy_type;
    using stack = typename Pipe::stack_type;
    const std::size_t count = 150, drain_at = 71;
    const int ranks = mpi::session::size();
    pb::options<Policy> o;
    o.max_batch = b;
    o.push_buffer = 16;
    o.seed = 13;
    o.executor = pb::executor_kind::sequential;
    Pipe reference(o);
    const run_record want = drive(reference, count, b, partial_last, drain_at, Policy::fixed_momentum);

    mpi::transport t(MPI_COMM_WORLD, mpi::contiguous_ranks(Pipe::stage_count, static_cast<std::size_t>(ranks)),
                     std::chrono::seconds(30));
    o.executor = pb::executor_kind::concurrent;
    o.remote = &t;
    Pipe split(o);
    // the ranks without stage 0 push NaN inputs and targets -1: not read there (the targets travel with the messages)
    const run_record got = drive(split, count, b, partial_last, drain_at, Policy::fixed_momentum, !t.is_local(0));

    const std::string what = std::string(name) + ", policy " + std::string(Policy::name) + ", b = " + std::to_string(b) +
                             ", S = " + std::to_string(Pipe::stage_count) + ", P = " + std::to_string(ranks);
    if (want.ids.size() != count) fail(what + ": the reference completed " + std::to_string(want.ids.size()));
    if (got.ids != want.ids) fail(what + ": completed micro-batches differ");
    if (!bitwise_equal(got.losses, want.losses)) fail(what + ": losses differ");
    if (got.correct != want.correct) fail(what + ": correct counts differ");
    std::size_t compared = 0;
    for (std::size_t s = 0; s < Pipe::stage_count; ++s) {
        if (!t.is_local(s)) continue;
        const auto r = split.stage_ranges()[s];
        const std::size_t lo = stack::parameter_offset[r.begin], hi = stack::parameter_offset[r.end];
        compared += hi - lo;
        for (std::size_t i = lo; i < hi; ++i)
            if (std::memcmp(&got.weights[i], &want.weights[i], sizeof(float)) != 0 ||
                std::memcmp(&got.velocities[i], &want.velocities[i], sizeof(float)) != 0) {
                fail(what + ": stage " + std::to_string(s) + " weight or velocity " + std::to_string(i) + " differs");
                break;
            }
    }
    if (compared == 0 && t.rank() == 0) fail(what + ": rank 0 compared no parameters");
    if (mpi::session::rank() == 0)
        std::printf("%s: %zu micro-batches, rank 0 compared %zu parameters\n", what.c_str(), got.ids.size(), compared);
}

// A long PB run on the small CNN in which rank `victim` fails at micro-batch 50 as `how` says.
void fault_run(const std::string& how, int victim) {
    using Pipe = pb::pipeline<cnn, pp::fine_grained<>, pb::policy::sc_lwp<>>;
    pb::options<pb::policy::sc_lwp<>> o;
    o.push_buffer = 4;
    mpi::transport t(MPI_COMM_WORLD, mpi::contiguous_ranks(Pipe::stage_count, mpi::session::size()),
                     std::chrono::seconds(2));
    o.remote = &t;
    Pipe e(o);
    data_stream<cnn> data(64, Pipe::classes);
    for (std::size_t n = 0; n < 1000000; ++n) {
        if (n == 50 && t.rank() == victim) {
            mpi_test::inject_fault(how, victim);
        }
        e.set_hyperparameters(schedule(n));
        (void)e.push(data.xs(n % 64, 1), data.ys(n % 64, 1), 1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    return mpi_test::main_of("test_mpi_pb", argc, argv, fault_run, [](pipeprop::mpi::session& session) {
        check_run<pb::pipeline<cnn, pp::fine_grained<>, pb::policy::none>>("small CNN fine-grained", 1, 0);
        check_run<pb::pipeline<cnn, pp::fine_grained<>, pb::policy::sc_lwp<>>>("small CNN fine-grained", 3, 2);
        check_run<pb::pipeline<small_resnet, pp::fine_grained<>, pb::policy::sc_lwp<>>>("small ResNet fine-grained",
                                                                                        1, 0);
        check_run<pb::pipeline<small_resnet, pp::split_at<5, 13, 16>, pb::policy::weight_stashing>>(
            "small ResNet split_at<5, 13, 16>", 3, 1);
        // a second engine on a new transport after the others: the transports' messages never mix
        check_run<pb::pipeline<cnn, pp::fine_grained<>, pb::policy::none>>("small CNN fine-grained, again", 2, 1);
        int mine = failures, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (session.rank() == 0) std::printf("%s: %d failure(s) over all ranks\n", all == 0 ? "PASS" : "FAIL", all);
        return all == 0 ? 0 : 1;
    });
}
