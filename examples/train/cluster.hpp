// examples/train/cluster.hpp: what the main program's `--transport mpi` gives the modes: this
// process's rank among P, a boundary transport for a stage cut, and the few collectives the training loop needs
// (evaluation gathers every rank's stages to rank 0; rank 0 broadcasts the data sizes and the evaluation; the ranks
// meet before a checkpoint's manifest is written). An interface without MPI, so that the per-network units of the
// program compile without it; the MPI implementation is train/mpi_cluster.hpp, used by pipeprop_train.cpp only.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "pipeprop/remote_transport.hpp"

namespace train {

class cluster {
public:
    virtual ~cluster() = default;
    /// This process's rank, 0 <= rank() < size(); rank 0 reads the data, evaluates and prints the result.
    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    /// The boundary transport of a pipeline whose stage s runs on rank rank_of[s] (collective: every rank calls it
    /// with the same map). Throws std::runtime_error when the transport cannot be set up.
    [[nodiscard]] virtual std::unique_ptr<pipeprop::remote_transport> make_transport(std::vector<int> rank_of) = 0;
    /// The collectives throw pipeprop::remote_timeout_error when the other ranks do not join within the run's
/// --remote-timeout (a rank that hangs must not hang the others).
/// Concatenates every rank's `mine` in rank order into `all` on rank 0 (collective; `all` is read only on rank 0
    /// and must hold the sum of the sizes there).
    virtual void gather(std::span<const float> mine, std::span<float> all) = 0;
    /// Copies rank 0's bytes to every rank (collective, same size everywhere).
    virtual void broadcast(std::span<std::byte> bytes) = 0;
    /// Returns when every rank has called it.
    virtual void barrier() = 0;
    /// The smallest of every rank's `value` (collective).
    [[nodiscard]] virtual int min_over_ranks(int value) = 0;
};

}  // namespace train
