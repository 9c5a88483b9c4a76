// pipeprop/remote_seam.hpp: what the PB concurrent executor (pb/remote_part.hpp) and the synchronous schedule
// executor (sync/remote_part.hpp) share of the seam to their exchange with stages in other processes: the members
// every exchange reads of its executor (remote_host_base), and how an executor finds the exchange without compiling
// it into every program. Each executor declares an interface Part<T> (what the executor calls) with
// `using host_type = ...` (what the exchange reads of it, a remote_host_base); pb/remote_stages.hpp and
// sync/remote_stages.hpp implement it and register a factory here for float and double. Registration is a dynamic
// initialization of an inline variable, done before main() runs, so an executor made inside main() finds it; a
// program that includes neither header (nor pipeprop/mpi/mpi_transport.hpp, which includes both) compiles no
// exchange at all.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::detail {

/// What every exchange reads and drives of its executor (each executor's remote_host adds its own members).
class remote_host_base {
public:
    /// The transport the executor was given.
    [[nodiscard]] virtual remote_transport& transport() const = 0;
    /// The executor's name, for messages.
    [[nodiscard]] virtual const char* who() const = 0;
    [[nodiscard]] virtual std::size_t stage_count() const = 0;
    /// Samples per micro-batch at most, and targets (labels) per sample.
    [[nodiscard]] virtual std::size_t max_batch() const = 0;
    [[nodiscard]] virtual std::size_t targets_per_sample() const = 0;
    /// Values per sample of a message in direction dir to stage `to` (its input boundary forward, output backward).
    [[nodiscard]] virtual std::size_t message_size(direction dir, std::size_t to) const = 0;
    /// Puts a message for stage `to` into the flow graph; wait() returns when the graph is idle.
    virtual void put(std::size_t to, const boundary_message& m) const = 0;
    virtual void wait() const = 0;

protected:
    ~remote_host_base() = default;
};

/// The factory of Part's exchange: null until a remote_stages header registers one.
template <class Part>
inline std::unique_ptr<Part> (*remote_part_maker)(const typename Part::host_type&) = nullptr;

/// The exchange for `host` (an executor that was given a transport). Throws std::invalid_argument naming `header`
/// when no translation unit of the program registered one.
template <class Part>
[[nodiscard]] std::unique_ptr<Part> make_remote_part(const typename Part::host_type& host, const char* header) {
    if (remote_part_maker<Part> == nullptr)
        throw std::invalid_argument(std::string(host.who()) + ": stages in other processes (options::remote) need " +
                                    header + " (or pipeprop/mpi/mpi_transport.hpp) included in the program");
    return remote_part_maker<Part>(host);
}

/// Makes the exchange Stages (a final class deriving from Part) for `host`: the factory register_remote_part stores.
template <class Part, class Stages>
std::unique_ptr<Part> make_stages(const typename Part::host_type& host) {
    return std::make_unique<Stages>(host);
}

/// Registers Stages<T> (a final class deriving from Part<T>, constructed from a const Part<T>::host_type&) as the
/// exchange of the float and double executors. Returns true, for an inline variable's initializer.
template <template <class> class Part, template <class> class Stages>
bool register_remote_part() {
    remote_part_maker<Part<float>> = &make_stages<Part<float>, Stages<float>>;
    remote_part_maker<Part<double>> = &make_stages<Part<double>, Stages<double>>;
    return true;
}

}  // namespace pipeprop::detail
