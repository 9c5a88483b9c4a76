// examples/train/mpi_cluster.hpp: train::cluster (train/cluster.hpp) over MPI_COMM_WORLD, with the MPI transport of
// pipeprop/mpi/mpi_transport.hpp. Included by pipeprop_train.cpp only when the program is built with MPI
// (-DPIPEPROP_WITH_MPI=ON: PIPEPROP_TRAIN_MPI). Every failed MPI call throws std::runtime_error (pipeprop::mpi::check).
#pragma once

#include <pipeprop/mpi/mpi_transport.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "train/cluster.hpp"

namespace train {

class mpi_cluster final : public cluster {
public:
    /// timeout: how long a rank's executor waits for a message of another rank before it gives up, and how long a
    /// collective of the training loop (gather, broadcast, barrier) may take.
    explicit mpi_cluster(std::chrono::milliseconds timeout) : timeout_(timeout) {}
    [[nodiscard]] int rank() const override { return pipeprop::mpi::session::rank(); }
    [[nodiscard]] int size() const override { return pipeprop::mpi::session::size(); }
    [[nodiscard]] std::unique_ptr<pipeprop::remote_transport> make_transport(std::vector<int> rank_of) override {
        return std::make_unique<pipeprop::mpi::transport>(MPI_COMM_WORLD, std::move(rank_of), timeout_);
    }
    void gather(std::span<const float> mine, std::span<float> all) override {
        namespace pm = pipeprop::mpi;
        const int n = static_cast<int>(mine.size()), p = size();
        std::vector<int> counts(static_cast<std::size_t>(p)), offsets(static_cast<std::size_t>(p));
        MPI_Request q = MPI_REQUEST_NULL;
        pm::check(MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &q), "MPI_Igather");
        wait(q, "gathering the stages' sizes");
        std::size_t total = 0;
        for (std::size_t r = 0; r < counts.size(); ++r) {
            offsets[r] = static_cast<int>(total);
            total += static_cast<std::size_t>(counts[r]);
        }
        if (rank() == 0 && total != all.size())
            throw std::runtime_error("train::mpi_cluster::gather: the ranks sent " + std::to_string(total) +
                                     " values for a block of " + std::to_string(all.size()));
        pm::check(MPI_Igatherv(mine.data(), n, MPI_FLOAT, all.data(), counts.data(), offsets.data(), MPI_FLOAT, 0,
                               MPI_COMM_WORLD, &q),
                  "MPI_Igatherv");
        wait(q, "gathering the stages for the evaluation");
    }
    void broadcast(std::span<std::byte> bytes) override {
        MPI_Request q = MPI_REQUEST_NULL;
        pipeprop::mpi::check(
            MPI_Ibcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD, &q), "MPI_Ibcast");
        wait(q, "a broadcast from rank 0");
    }
    void barrier() override {
        MPI_Request q = MPI_REQUEST_NULL;
        pipeprop::mpi::check(MPI_Ibarrier(MPI_COMM_WORLD, &q), "MPI_Ibarrier");
        wait(q, "a barrier of every rank");
    }

    [[nodiscard]] int min_over_ranks(int value) override {
        int out = value;
        MPI_Request q = MPI_REQUEST_NULL;
        pipeprop::mpi::check(MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &q), "MPI_Iallreduce");
        wait(q, "a reduction over every rank");
        return out;
    }

private:
    // Waits for a non-blocking collective at most timeout_ (a rank that hangs must not hang the others): throws
    // pipeprop::remote_timeout_error naming this rank and what it waited for.
    void wait(MPI_Request& q, const char* what) {
        const auto end = std::chrono::steady_clock::now() + timeout_;
        for (int done = 0;;) {
            pipeprop::mpi::check(MPI_Test(&q, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (done) return;
            if (std::chrono::steady_clock::now() > end)
                throw pipeprop::remote_timeout_error(
                    "pipeprop_train: rank " + std::to_string(rank()) + ": " + what + " did not complete within " +
                    std::to_string(timeout_.count()) + " ms (another rank failed or hangs; --remote-timeout)");
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }

    std::chrono::milliseconds timeout_;
};

}  // namespace train
