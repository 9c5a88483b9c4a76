// pipeprop/data/epoch_permutation.hpp: seeded per-epoch shuffling.
//
// The order of epoch e is a pure function of (seed, e): a resumed run that knows the epoch and its position in it
// sees exactly the samples an uninterrupted run would (docs/pitfalls.md items 5 and 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/seed.hpp"

namespace pipeprop::data {

/// Stream index of the shuffling streams in derive_seed, kept apart from the layer-initialization streams
/// (layer positions 0, 1, ...).
inline constexpr std::uint64_t shuffle_stream_base = 0x5348'5546'0000'0000ull;  // "SHUF"

/// Writes the permutation of epoch `epoch` into order[0, n): a Fisher-Yates shuffle of 0..n-1 driven by
/// std::mt19937_64(derive_seed(seed, shuffle_stream_base + epoch)); the bounded draws use a 128-bit multiply
/// (platform-independent, unlike std::uniform_int_distribution). No allocation. Throws std::invalid_argument when
/// n does not fit the index type.
inline void fill_epoch_permutation(std::uint64_t seed, std::uint64_t epoch, std::span<std::uint32_t> order) {
    if (order.size() > std::size_t(UINT32_MAX))
        throw std::invalid_argument("pipeprop::data::fill_epoch_permutation: " + std::to_string(order.size()) +
                                    " samples exceed the 32-bit index range");
    std::iota(order.begin(), order.end(), std::uint32_t(0));
    std::mt19937_64 rng(derive_seed(seed, shuffle_stream_base + epoch));
    for (std::size_t i = order.size(); i > 1; --i) {
        // j uniform in [0, i): high 64 bits of a 64x64-bit product.
        const auto j = static_cast<std::size_t>((static_cast<unsigned __int128>(rng()) * i) >> 64);
        std::swap(order[i - 1], order[j]);
    }
}

/// The permutation of epoch `epoch` of n samples, [n] (see fill_epoch_permutation). Allocates.
[[nodiscard]] inline std::vector<std::uint32_t> epoch_permutation(std::uint64_t seed, std::uint64_t epoch,
                                                                  std::size_t n) {
    std::vector<std::uint32_t> order(n);
    fill_epoch_permutation(seed, epoch, order);
    return order;
}

}  // namespace pipeprop::data
