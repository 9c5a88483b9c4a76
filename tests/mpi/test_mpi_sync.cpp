// The synchronous schedules with their stages in P processes: run under `mpirun -np P`. Every rank runs
// the same steps twice: with the sequential reference executor in this process (all stages), and with its group of
// stages on the MPI transport (pipeprop/mpi/mpi_transport.hpp; sync::executor_options::remote), the other stages on
// the other ranks. Checked on every rank, bitwise: each step's loss, correct count and counted targets (from the
// backward notes where the last stage is elsewhere) and, after the run, the weights and momentum of the rank's own
// stages. Schedules: every kind (GPipe, 1F1B, ZB-H1, ZB-H2 on 4 stages of the small CNN and on the small ResNet cut
// inside both residual blocks; interleaved 1F1B and ZB-V on 6 stages = 3 devices, a device's stages on one rank),
// 2BP on and off; steps of B = 2m and B = m + 1 samples, a short batch B < m, then two consecutive steps without a
// barrier (ZB-H2's steady state; a rank may receive the next step's forward messages early). Inputs are NaN on the
// ranks without stage 0 and targets -1 on the ranks with neither stage 0 nor the last stage (never read there).
// Exit 0 when every rank agrees, 1 otherwise (each rank names what differs). Faults (`test_mpi_sync --fault
// throw|stall R`, tests/mpi/fault.cmake): rank R throws or stops answering before step 20 of a long 1F1B run.
#include <pipeprop/mpi/mpi_transport.hpp>

#include "mpi/mpi_test_main.hpp"

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "unit/small_resnet.hpp"
#include "unit/test_pb_support.hpp"

namespace {

using namespace pb_test;
namespace mpi = pipeprop::mpi;
namespace ps = pipeprop::sync;
using test_nets::small_resnet;

int failures = 0;
int cases = 0;

void fail(const std::string& what) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", mpi::session::rank(), what.c_str());
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

template <class Net>
void check_schedule(const char* name, const std::vector<std::size_t>& split, ps::schedule_kind kind, bool two) {
    using executor = ps::schedule_executor<Net, float>;
    using stack = typename executor::stack_type;
    constexpr std::size_t m = 6, classes = 3;
    const auto cut = pp::partition_at(Net::layer_count, split);
    if (!ps::schedule_accepts(kind, cut.size(), m)) return;
    const std::size_t ranks = static_cast<std::size_t>(mpi::session::size());
    typename executor::options_type o;
    o.micro_batches = m;
    o.max_batch = 2 * m;
    o.seed = 11;
    o.max_consecutive_steps = 2;
    o.executor = ps::executor_kind::sequential;
    executor reference(kind, two, cut, o);
    const ps::schedule& sc = reference.current_schedule();
    if (sc.devices() < ranks) return;  // every rank needs a device
    // a device's stages on one rank; devices on ranks in contiguous groups
    const std::vector<int> rank_of_device = mpi::contiguous_ranks(sc.devices(), ranks);
    std::vector<int> rank_of(cut.size());
    for (std::size_t s = 0; s < cut.size(); ++s) rank_of[s] = rank_of_device[sc.device_of_stage(s)];
    mpi::transport t(MPI_COMM_WORLD, rank_of, std::chrono::seconds(30));
    o.executor = ps::executor_kind::concurrent;
    o.remote = &t;
    executor split_run(kind, two, cut, o);
    ++cases;

    data_stream<Net> data(8 * m, classes, 17);
    data_stream<Net> poisoned = data;
    if (!t.is_local(0)) std::fill(poisoned.x.begin(), poisoned.x.end(), std::numeric_limits<float>::quiet_NaN());
    if (!t.is_local(0) && !t.is_local(cut.size() - 1)) std::fill(poisoned.labels.begin(), poisoned.labels.end(), -1);

    const std::string what = std::string(name) + ", " + std::string(ps::name(kind)) + (two ? " + 2BP" : "") +
                             ", S = " + std::to_string(cut.size()) + ", P = " + std::to_string(ranks);
    const auto compare = [&](const ps::step_result& want, const ps::step_result& got, std::size_t n) {
        if (!same_bits(want.loss, got.loss) || want.correct != got.correct || want.targets != got.targets ||
            want.micro_batches != got.micro_batches)
            fail(what + ": step " + std::to_string(n) + ": loss " + std::to_string(got.loss) + " / " +
                 std::to_string(want.loss) + ", correct " + std::to_string(got.correct) + " / " +
                 std::to_string(want.correct) + ", targets " + std::to_string(got.targets) + " / " +
                 std::to_string(want.targets));
    };
    // steps of B = 2m, m + 1, a short batch of 4 < m, then two consecutive steps of 2m; the reference first, then
    // the split run's steps back to back (no barrier between them: a rank that is ahead sends the next step's
    // forward messages to one still in the current step, which keeps them for that step)
    const std::size_t sizes[] = {2 * m, m + 1, 4};
    const auto h_of = [](std::size_t n) {
        return pp::optim::hyperparameters<double>{.learning_rate = 0.05 / double(n + 1), .momentum = 0.9,
                                                  .weight_decay = 1e-3};
    };
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.02, .momentum = 0.8, .weight_decay = 0};
    const auto batches = [&](const data_stream<Net>& d) {
        return std::vector<typename executor::batch_view>{{d.xs(0, 2 * m), d.ys(0, 2 * m), h},
                                                          {d.xs(2 * m, 2 * m), d.ys(2 * m, 2 * m), h}};
    };
    std::vector<ps::step_result> want, got;
    for (int which = 0; which < 2; ++which) {
        executor& ex = which == 0 ? reference : split_run;
        const data_stream<Net>& d = which == 0 ? data : poisoned;
        auto& out = which == 0 ? want : got;
        std::size_t first = 0, n = 0;
        for (const std::size_t b : sizes) {
            out.push_back(ex.step(d.xs(first, b), d.ys(first, b), h_of(n++)));
            first = (first + b) % (4 * m);
        }
        const auto in = batches(d);
        for (const auto& r : ex.consecutive_steps(in)) out.push_back(r);
    }
    for (std::size_t n = 0; n < want.size(); ++n) compare(want[n], got.at(n), n);

    const std::vector<float> w_want = reference.parameters(), w_got = split_run.parameters();
    const std::vector<float> v_want = reference.velocity(), v_got = split_run.velocity();
    std::size_t compared = 0;
    for (std::size_t s = 0; s < cut.size(); ++s) {
        if (!t.is_local(s)) continue;
        const std::size_t lo = stack::parameter_offset[cut[s].begin], hi = stack::parameter_offset[cut[s].end];
        compared += hi - lo;
        if (std::memcmp(w_want.data() + lo, w_got.data() + lo, (hi - lo) * sizeof(float)) != 0 ||
            std::memcmp(v_want.data() + lo, v_got.data() + lo, (hi - lo) * sizeof(float)) != 0)
            fail(what + ": stage " + std::to_string(s) + "'s weights or momentum differ");
    }
    // every parameter is compared by the rank that owns it (a rank may own no parameters: ZB-V's device 2 of the
    // 6-stage CNN holds a relu and a pooling stage)
    unsigned long mine = compared, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (all != stack::parameter_count && t.rank() == 0)
        fail(what + ": the ranks compared " + std::to_string(all) + " of " + std::to_string(stack::parameter_count) +
             " parameters");
    if (mpi::session::rank() == 0) std::printf("%s: 5 steps, rank 0 compared %zu parameters\n", what.c_str(), compared);
}

template <class Net>
void check_every_schedule(const char* name, const std::vector<std::size_t>& split) {
    for (const auto kind : ps::all_schedule_kinds)
        for (const bool two : {false, true}) check_schedule<Net>(name, split, kind, two);
}

// A long run of 1F1B steps on the small CNN's 4 stages in which rank `victim` fails before step 20 as `how` says
// (throw, stall: tests/mpi/fault.cmake).
void fault_run(const std::string& how, int victim) {
    using executor = ps::schedule_executor<cnn, float>;
    const auto cut = pp::partition_at(cnn::layer_count, {1, 2, 4});
    mpi::transport t(MPI_COMM_WORLD, mpi::contiguous_ranks(cut.size(), mpi::session::size()),
                     std::chrono::seconds(2));
    executor::options_type o;
    o.micro_batches = 4;
    o.max_batch = 8;
    o.remote = &t;
    executor ex(ps::schedule_kind::one_f_one_b, true, cut, o);
    data_stream<cnn> data(8, 3);
    for (std::size_t n = 0; n < 1000000; ++n) {
        if (n == 20 && t.rank() == victim) {
            mpi_test::inject_fault(how, victim);
        }
        (void)ex.step(data.xs(0, 8), data.ys(0, 8), {.learning_rate = 0.01, .momentum = 0.9, .weight_decay = 0});
    }
}

}  // namespace

int main(int argc, char** argv) {
    return mpi_test::main_of("test_mpi_sync", argc, argv, fault_run, [](pipeprop::mpi::session& session) {
        // the small CNN: 4 stages (GPipe, 1F1B, ZB-H1, ZB-H2), 6 stages = 3 devices (interleaved 1F1B, ZB-V)
        check_every_schedule<cnn>("small CNN split_at<1, 2, 4>", {1, 2, 4});
        check_every_schedule<cnn>("small CNN split_at<1, 2, 3, 4, 5>", {1, 2, 3, 4, 5});
        // the small ResNet cut inside both residual blocks (nodes 5, 8: the identity block's body; 13: the
        // projection block's body)
        check_every_schedule<small_resnet>("small ResNet split_at<5, 8, 13, 22>", {5, 8, 13, 22});
        int mine = failures, all = 0, ran = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&cases, &ran, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        // P = 2: 8 + 4 + 12 + 8; P = 3: 8 + 12 + 8 (interleaved 1F1B and ZB-V on 4 stages have 2 devices only)
        if (ran != (session.size() == 2 ? 32 : 28)) {
            if (session.rank() == 0) std::printf("FAIL: only %d schedule cases ran on every rank\n", ran);
            return 1;
        }
        if (session.rank() == 0)
            std::printf("%s: %d cases, %d failure(s) over all ranks\n", all == 0 ? "PASS" : "FAIL", ran, all);
        return all == 0 ? 0 : 1;
    });
}
