// examples/train/mpi_cluster.hpp: train::cluster (train/cluster.hpp) over MPI_COMM_WORLD, with the MPI transport of
// pipeprop/mpi/mpi_transport.hpp. Included by pipeprop_train.cpp only when the program is built with MPI
// (-DPIPEPROP_WITH_MPI=ON: PIPEPROP_TRAIN_MPI). Every failed MPI call throws std::runtime_error (pipeprop::mpi::check).
#pragma once

#include <pipeprop/mpi/mpi_transport.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "train/cluster.hpp"

namespace train {

class mpi_cluster final : public cluster {
public:
    /// timeout: how long a rank's executor waits for a message of another rank before it gives up.
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
        pm::check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
        std::size_t total = 0;
        for (std::size_t r = 0; r < counts.size(); ++r) {
            offsets[r] = static_cast<int>(total);
            total += static_cast<std::size_t>(counts[r]);
        }
        if (rank() == 0 && total != all.size())
            throw std::runtime_error("train::mpi_cluster::gather: the ranks sent " + std::to_string(total) +
                                     " values for a block of " + std::to_string(all.size()));
        pm::check(MPI_Gatherv(mine.data(), n, MPI_FLOAT, all.data(), counts.data(), offsets.data(), MPI_FLOAT, 0,
                              MPI_COMM_WORLD),
                  "MPI_Gatherv");
    }
    void broadcast(std::span<std::byte> bytes) override {
        pipeprop::mpi::check(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD),
                             "MPI_Bcast");
    }
    void barrier() override { pipeprop::mpi::check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

private:
    std::chrono::milliseconds timeout_;
};

}  // namespace train
