// pipeprop/balanced_partition.hpp: cut L layers with per-layer costs into p contiguous stages so that the
// most expensive stage is as cheap as possible (the pipeline's pace is set by its slowest stage). Used by the
// synchronous executors' --stages balanced and by PB's lane planner (pb/lane_plan.hpp: stages into lanes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipeprop {

/// Split points (p - 1 of them, strictly increasing in (0, L); pass them to partition_at) of the contiguous cut of
/// layers with costs[0..L) into p non-empty stages that minimizes the largest stage cost (sum of its layers'
/// costs; any unit). Exact (dynamic programming, O(L^2 p)); ties between optimal cuts are broken the same way
/// every time (each last stage starts as early as possible), so the result is deterministic. Every layer lands in
/// exactly one stage (docs/pitfalls.md item 9).
/// cut_allowed (optional, L entries): cut_allowed[i] == false forbids a stage starting at layer i (e.g.
/// layer_stack::cut_allowed_before: a projection shortcut shares its add's stage).
/// Throws std::invalid_argument when p == 0, p > L, a cost is negative or not finite, or no cut into p stages
/// respects cut_allowed.
[[nodiscard]] inline std::vector<std::size_t> balanced_partition(const std::vector<double>& costs, std::size_t p,
                                                                 std::span<const bool> cut_allowed = {}) {
    const std::size_t L = costs.size();
    if (!cut_allowed.empty() && cut_allowed.size() != L)
        throw std::invalid_argument("pipeprop::balanced_partition: cut_allowed has " +
                                    std::to_string(cut_allowed.size()) + " entries for " + std::to_string(L) +
                                    " layers");
    if (p == 0 || p > L)
        throw std::invalid_argument("pipeprop::balanced_partition: cannot cut " + std::to_string(L) +
                                    " layers into " + std::to_string(p) + " non-empty stages");
    for (std::size_t i = 0; i < L; ++i)
        if (!(costs[i] >= 0) || !std::isfinite(costs[i]))
            throw std::invalid_argument("pipeprop::balanced_partition: cost of layer " + std::to_string(i) +
                                        " is negative or not finite");
    std::vector<double> prefix(L + 1, 0);
    for (std::size_t i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + costs[i];
    constexpr double inf = std::numeric_limits<double>::infinity();
    // best[k][i]: smallest max-stage cost of cutting the first i layers into k stages; cut[k][i]: start of stage k-1.
    std::vector<std::vector<double>> best(p + 1, std::vector<double>(L + 1, inf));
    std::vector<std::vector<std::size_t>> cut(p + 1, std::vector<std::size_t>(L + 1, 0));
    best[0][0] = 0;
    for (std::size_t k = 1; k <= p; ++k)
        for (std::size_t i = k; i <= L; ++i)
            for (std::size_t j = k - 1; j < i; ++j) {  // last stage = layers [j, i)
                if (j > 0 && !cut_allowed.empty() && !cut_allowed[j]) continue;
                const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
                if (v < best[k][i]) {
                    best[k][i] = v;
                    cut[k][i] = j;
                }
            }
    if (best[p][L] == inf)
        throw std::invalid_argument("pipeprop::balanced_partition: no cut of the " + std::to_string(L) +
                                    " layers into " + std::to_string(p) + " stages respects the allowed cut points");
    std::vector<std::size_t> points(p - 1);
    std::size_t i = L;
    for (std::size_t k = p; k > 1; --k) {
        i = cut[k][i];
        points[k - 2] = i;
    }
    return points;
}

}  // namespace pipeprop
