// examples/train/rank_evaluation.hpp: evaluation of a pipeline whose stages run on several ranks (--transport mpi):
// every rank sends its own stages' parameters and running state to rank 0 (in stage order; a rank
// may hold stages that are not consecutive: a virtual-stage schedule's device), rank 0 puts them into whole-network
// blocks (layers in order: layer_stack's parameter_offset / state_offset), evaluates, and sends the result to every
// rank. Collective: every rank calls it at the same point.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/evaluation.hpp"
#include "pipeprop/layer_stack.hpp"
#include "train/cluster.hpp"
#include "train/rank_checkpoints.hpp"

namespace train {

/// Stage s runs on rank rank_of[s] and covers layers ranges[s]; params_of(s) / state_of(s) give a local stage's
/// parameter and running-state blocks (std::span<const float>). evaluate(parameters, state) runs on rank 0 with the
/// whole network's blocks and returns the evaluation every rank gets.
template <class Stack, class ParamsOf, class StateOf, class Evaluate>
pipeprop::evaluation evaluate_on_rank0(cluster& c, const std::vector<pipeprop::layer_range>& ranges,
                                       const std::vector<int>& rank_of, ParamsOf params_of, StateOf state_of,
                                       Evaluate evaluate) {
    std::vector<float> mine_w, mine_s;
    for (std::size_t s = 0; s < ranges.size(); ++s)
        if (rank_of[s] == c.rank()) {
            const std::span<const float> w = params_of(s), st = state_of(s);
            mine_w.insert(mine_w.end(), w.begin(), w.end());
            mine_s.insert(mine_s.end(), st.begin(), st.end());
        }
    const bool root = c.rank() == 0;
    std::vector<float> got_w(root ? Stack::parameter_count : 0), got_s(root ? Stack::state_count : 0);
    c.gather(mine_w, got_w);
    c.gather(mine_s, got_s);
    pipeprop::evaluation e{};
    if (root) {  // rank by rank, each rank's stages in stage order: into the layer order of the network's blocks
        std::vector<float> w(Stack::parameter_count), st(Stack::state_count);
        std::size_t pw = 0, ps = 0;
        for (int r = 0; r < c.size(); ++r)
            for (std::size_t s = 0; s < ranges.size(); ++s) {
                if (rank_of[s] != r) continue;
                const std::size_t w0 = Stack::parameter_offset[ranges[s].begin], w1 = Stack::parameter_offset[ranges[s].end];
                const std::size_t s0 = Stack::state_offset[ranges[s].begin], s1 = Stack::state_offset[ranges[s].end];
                std::copy_n(got_w.begin() + static_cast<std::ptrdiff_t>(pw), w1 - w0, w.begin() + static_cast<std::ptrdiff_t>(w0));
                std::copy_n(got_s.begin() + static_cast<std::ptrdiff_t>(ps), s1 - s0, st.begin() + static_cast<std::ptrdiff_t>(s0));
                pw += w1 - w0;
                ps += s1 - s0;
            }
        e = evaluate(std::span<const float>(w), std::span<const float>(st));
    }
    c.broadcast(std::as_writable_bytes(std::span<pipeprop::evaluation>(&e, 1)));
    return e;
}

/// Runs f() (a mode's training); with a transport (--transport mpi), an exception that leaves it is reported to the
/// other ranks first (remote_transport::report_failure: they name this rank and the error, and stop), unless every
/// rank finds it itself (rank_manifest_error: a checkpoint whose manifest or layout does not fit).
template <class F>
auto reporting_failures(pipeprop::remote_transport* transport, F&& f) {
    try {
        return f();
    } catch (const rank_manifest_error&) {
        throw;
    } catch (...) {
        if (transport != nullptr) pipeprop::report_exception(*transport, std::current_exception());
        throw;
    }
}

/// Every stage's layers and rank as text ("[0,3)@0 [3,6)@1 ..."): what a rank's checkpoint records and a resumed run
/// resumes from (train/rank_checkpoints.hpp: load_whole_rank_checkpoint).
[[nodiscard]] inline std::string rank_layout_text(const std::vector<pipeprop::layer_range>& ranges,
                                                  const std::vector<int>& rank_of) {
    std::string text;
    for (std::size_t s = 0; s < ranges.size(); ++s)
        text += (s ? " [" : "[") + std::to_string(ranges[s].begin) + "," + std::to_string(ranges[s].end) + ")@" +
                std::to_string(rank_of.at(s));
    return text;
}

/// Rank r's stages as text for a checkpoint manifest: "a-b" for consecutive stages, otherwise a comma-separated list.
[[nodiscard]] inline std::vector<std::string> stages_by_rank(const std::vector<int>& rank_of, int ranks) {
    std::vector<std::vector<std::size_t>> of(static_cast<std::size_t>(ranks));
    for (std::size_t s = 0; s < rank_of.size(); ++s) of.at(static_cast<std::size_t>(rank_of[s])).push_back(s);
    std::vector<std::string> out;
    for (const auto& list : of) {
        std::string text;
        const bool consecutive = !list.empty() && list.back() - list.front() + 1 == list.size();
        if (consecutive) {
            text = std::to_string(list.front()) + "-" + std::to_string(list.back());
        } else {
            for (std::size_t i = 0; i < list.size(); ++i) text += (i ? "," : "") + std::to_string(list[i]);
        }
        out.push_back(text);
    }
    return out;
}

}  // namespace train
