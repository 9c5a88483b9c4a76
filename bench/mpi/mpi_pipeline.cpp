// bench/mpi/mpi_pipeline.cpp: PB throughput with the stages in P = 2 processes (MPI, pipeprop/mpi/mpi_transport.hpp)
// against one process with 2 lanes, the same two stages. Run under `mpirun -np 2`
// (bench/mpi_pipeline.sh). The small CNN of bench/small_cnn.hpp (the main program's), cut before its dense layer
// block (stage 0: both conv blocks; stage 1: flatten, dense 128, relu, dense 10), policy sc_lwp, b = 1, random data.
// Rounds alternate: rank 0 alone trains with the concurrent executor on 2 lanes (rank 1 waits without spinning),
// then both ranks train the same micro-batches with one stage each. Printed: samples/s of each per round, the
// median of the per-round ratios P2 / lanes2, the MPI round trip of an 8-byte message, and the bytes that cross the
// boundary per micro-batch (from the stage types).
#include <pipeprop/mpi/mpi_transport.hpp>
#include <pipeprop/pb/pipeline.hpp>
#include <pipeprop/pipeprop.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "small_cnn.hpp"

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
namespace mpi = pipeprop::mpi;
using net = pp::bench::small_cnn;
using policy = pb::policy::sc_lwp<>;
using cnn_pipe = pb::pipeline<net, pp::split_at<8>, policy>;  // layer 8: flatten
using clock_type = std::chrono::steady_clock;

// Waits for every rank without spinning (the other rank's core stays free for the 2-lane run).
void quiet_barrier() {
    MPI_Request r{};
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    for (int done = 0; !done;) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

double train_pb(cnn_pipe& e, const std::vector<float>& x, const std::vector<std::int32_t>& y, std::size_t n) {
    constexpr std::size_t in = net::input_shape::size;
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = i % y.size();
        (void)e.push(std::span<const float>(x.data() + k * in, in), std::span<const std::int32_t>(&y[k], 1), 1);
    }
    (void)e.drain();
    return static_cast<double>(n) / std::chrono::duration<double>(clock_type::now() - t0).count();
}

double round_trip_us() {
    const int rank = mpi::session::rank();
    double x = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock_type::now();
    constexpr int n = 2000;
    for (int i = 0; i < n; ++i) {
        if (rank == 0) {
            MPI_Send(&x, 1, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(&x, 1, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&x, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
        }
    }
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
    mpi::session session(argc, argv);
    openblas_set_num_threads(1);
    if (session.size() != 2) {
        if (session.rank() == 0) std::fprintf(stderr, "mpi_pipeline: run it with mpirun -np 2\n");
        return 2;
    }
    const std::size_t samples = argc > 1 ? std::stoul(argv[1]) : 3000;
    const int rounds = argc > 2 ? std::stoi(argv[2]) : 5;
    constexpr std::size_t in = net::input_shape::size;
    std::vector<float> x(256 * in);
    std::vector<std::int32_t> y(256);
    std::mt19937 rng(3);
    for (auto& v : x) v = std::uniform_real_distribution<float>(0.f, 1.f)(rng);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 10);

    using stack = cnn_pipe::stack_type;
    constexpr std::size_t boundary = stack::activation_size[8];
    if (session.rank() == 0) {
        std::printf("stages: [0, 8) and [8, %zu) of the small CNN; boundary tensor [b, %zu] floats\n",
                    stack::layer_count, boundary);
        std::printf("bytes per micro-batch of b samples across the boundary: forward 96 + %zu b, backward 96 + %zu b "
                    "(b = 1: %zu + %zu)\n",
                    boundary * 4 + 4, boundary * 4, 96 + boundary * 4 + 4, 96 + boundary * 4);
    }
    const double rt = round_trip_us();
    if (session.rank() == 0) std::printf("MPI round trip (8 bytes): %.2f us\n", rt);

    pb::options<policy> o;
    o.lanes = 2;
    mpi::transport t(MPI_COMM_WORLD, {0, 1});
    pb::options<policy> om;
    om.remote = &t;
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) {
        double lanes2 = 0;
        if (session.rank() == 0) {
            cnn_pipe e(o);
            lanes2 = train_pb(e, x, y, samples);
        }
        quiet_barrier();
        cnn_pipe e(om);
        MPI_Barrier(MPI_COMM_WORLD);
        const double p2 = train_pb(e, x, y, samples);
        quiet_barrier();
        if (session.rank() == 0) {
            ratios.push_back(p2 / lanes2);
            std::printf("round %d: one process, 2 lanes %.0f samples/s; 2 ranks %.0f samples/s; ratio %.3f\n", r + 1,
                        lanes2, p2, p2 / lanes2);
        }
    }
    if (session.rank() == 0) {
        std::sort(ratios.begin(), ratios.end());
        std::printf("median ratio 2 ranks / 2 lanes: %.3f (%d rounds of %zu samples)\n", ratios[ratios.size() / 2],
                    rounds, samples);
    }
    return 0;
}
