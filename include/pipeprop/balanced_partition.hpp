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

/// The tables of balanced_partition (prefix sums, the dynamic program's best and cut tables [p + 1][L + 1], the
/// split points). A caller that cuts again and again (PB's lane rebalancing, pb/lane_rebalance.hpp) keeps one and
/// calls reserve(L, p) once: the cuts of at most L layers into at most p stages then allocate nothing.
struct balanced_partition_workspace {
    std::vector<double> prefix;       ///< [L + 1]: prefix sums of the costs.
    std::vector<double> best;         ///< [p + 1][L + 1]: the smallest largest stage cost, first i layers in k stages.
    std::vector<std::size_t> cut;     ///< [p + 1][L + 1]: where the k-th stage of that cut starts.
    std::vector<std::size_t> points;  ///< [p - 1]: the split points of the last cut.
    /// Room for cuts of up to `layers` layers into up to `parts` stages.
    void reserve(std::size_t layers, std::size_t parts) {
        prefix.reserve(layers + 1);
        best.reserve((parts + 1) * (layers + 1));
        cut.reserve((parts + 1) * (layers + 1));
        points.reserve(parts > 0 ? parts - 1 : 0);
    }
};

/// Split points (p - 1 of them, strictly increasing in (0, L); pass them to partition_at) of the contiguous cut of
/// layers with costs[0..L) into p non-empty stages that minimizes the largest stage cost (sum of its layers'
/// costs; any unit). Exact (dynamic programming, O(L^2 p)); ties between optimal cuts are broken the same way
/// every time (each last stage starts as early as possible), so the result is deterministic. Every layer lands in
/// exactly one stage (docs/pitfalls.md item 9). The points are ws.points (valid until ws is used again); ws's
/// tables grow where they are smaller than the cut needs, and nothing is allocated where they are not.
/// cut_allowed (optional, L entries): cut_allowed[i] == false forbids a stage starting at layer i (e.g.
/// layer_stack::cut_allowed_before: a projection shortcut shares its add's stage).
/// Throws std::invalid_argument when p == 0, p > L, a cost is negative or not finite, or no cut into p stages
/// respects cut_allowed.
[[nodiscard]] inline std::span<const std::size_t> balanced_partition(std::span<const double> costs, std::size_t p,
                                                                     balanced_partition_workspace& ws,
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
    ws.prefix.assign(L + 1, 0);
    for (std::size_t i = 0; i < L; ++i) ws.prefix[i + 1] = ws.prefix[i] + costs[i];
    constexpr double inf = std::numeric_limits<double>::infinity();
    const std::size_t row = L + 1;
    ws.best.assign((p + 1) * row, inf);
    ws.cut.assign((p + 1) * row, 0);
    const auto best_at = [&](std::size_t k, std::size_t i) -> double& { return ws.best[k * row + i]; };
    best_at(0, 0) = 0;
    for (std::size_t k = 1; k <= p; ++k)
        for (std::size_t i = k; i <= L; ++i)
            for (std::size_t j = k - 1; j < i; ++j) {  // last stage = layers [j, i)
                if (j > 0 && !cut_allowed.empty() && !cut_allowed[j]) continue;
                const double v = std::max(best_at(k - 1, j), ws.prefix[i] - ws.prefix[j]);
                if (v < best_at(k, i)) {
                    best_at(k, i) = v;
                    ws.cut[k * row + i] = j;
                }
            }
    if (best_at(p, L) == inf)
        throw std::invalid_argument("pipeprop::balanced_partition: no cut of the " + std::to_string(L) +
                                    " layers into " + std::to_string(p) + " stages respects the allowed cut points");
    ws.points.resize(p - 1);
    std::size_t i = L;
    for (std::size_t k = p; k > 1; --k) {
        i = ws.cut[k * row + i];
        ws.points[k - 2] = i;
    }
    return ws.points;
}

/// balanced_partition above with tables of its own: the split points as a new vector (same cut, same errors).
[[nodiscard]] inline std::vector<std::size_t> balanced_partition(const std::vector<double>& costs, std::size_t p,
                                                                 std::span<const bool> cut_allowed = {}) {
    balanced_partition_workspace ws;
    const auto points = balanced_partition(std::span<const double>(costs), p, ws, cut_allowed);
    return {points.begin(), points.end()};
}

}  // namespace pipeprop
