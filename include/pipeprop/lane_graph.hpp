// pipeprop/lane_graph.hpp: the one flow graph on which both engines' concurrent executors run their stages' op lists
// (PB: pb/concurrent_executor.hpp, the op streams of pb/op_stream.hpp; synchronous schedules:
// sync/schedule_executor.hpp, the op lists of sync/schedule.hpp).
//
// The stages are grouped into lanes: runs of consecutive stages (PB's lane plans, one stage per lane for the
// synchronous schedules), or any sets of stages (the devices of virtual-stage schedules, sync/schedule.hpp:
// interleaved 1F1B, ZB-V); each lane is one serial oneTBB function_node, so a lane's stages never run at the same
// time and their weights and activations stay on the core that runs the lane. A node is woken by a boundary message
// (boundary_channel.hpp) addressed to one of its stages, from another lane, or by an empty message from the caller
// (start, drain). It then hands the message to the runner and runs, stage after stage, every op whose input is
// there, until none is: a message a stage sends to a stage of the same lane is handed over directly, one to another
// lane is put to that lane's node.
//
// The runner (the executor's op interpreter) provides
//   void deliver(std::size_t stage, const boundary_message&)   records an arrived message for `stage`;
//   bool ready(std::size_t stage)                               whether the stage's next op can run now;
//   void run_next(std::size_t stage, Send& send)                runs it; send(to_stage, message) passes each message
//                                                               the op produces on.
// Every stage runs its own op list in order and an op reads only its stage's state and the messages it receives, so
// the results never depend on the lanes, on the threads or on timing: that is why every executor is bit-identical to
// its sequential reference (the tests run every lane plan they can).
// Exceptions: an exception thrown by the runner cancels the graph; wait() rethrows it (no hang: wait_for_all returns
// when the running bodies end). reset() makes the graph usable again (the caller resets its own state).
#pragma once

#include <oneapi/tbb/flow_graph.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"

namespace pipeprop {

/// Throws std::invalid_argument naming the problem unless `first_stage` lists the first stage of each lane of S
/// stages: 0, then strictly increasing stage indices below S. who: the caller, for the message. Allocates nothing
/// unless it throws (PB's lane rebalancing checks plans between graph runs).
inline void check_lanes(const std::vector<std::size_t>& first_stage, std::size_t stages, const char* who) {
    const auto bad = [&](const std::string& why) {
        throw std::invalid_argument(std::string(who) + ": " + why +
                                    " (a lane plan lists the first stage of each lane: 0, then strictly increasing "
                                    "stage indices below S = " +
                                    std::to_string(stages) + ")");
    };
    if (first_stage.empty() || first_stage.front() != 0) bad("the first lane must start at stage 0");
    for (std::size_t l = 1; l < first_stage.size(); ++l) {
        if (first_stage[l] <= first_stage[l - 1])
            bad("lane " + std::to_string(l) + " starts at stage " + std::to_string(first_stage[l]) +
                ", not after lane " + std::to_string(l - 1) + "'s start " + std::to_string(first_stage[l - 1]));
        if (first_stage[l] >= stages)
            bad("lane " + std::to_string(l) + " starts at stage " + std::to_string(first_stage[l]));
    }
}

/// The first stages of one lane per stage (S serial nodes): 0, 1, ..., S - 1.
[[nodiscard]] inline std::vector<std::size_t> one_lane_per_stage_starts(std::size_t stages) {
    std::vector<std::size_t> first(stages);
    for (std::size_t s = 0; s < stages; ++s) first[s] = s;
    return first;
}

/// The flow graph over `stage_count` stages in the lanes whose first stages are `first_stage` (check_lanes), driving
/// `runner` (see the file comment). Not copyable or movable (the nodes refer to it); the runner must outlive it.
template <class Runner>
class lane_graph {
public:
    /// Lanes of consecutive stages starting at first_stage. Throws std::invalid_argument for a plan that is not one
    /// for stage_count stages.
    lane_graph(Runner& runner, std::size_t stage_count, const std::vector<std::size_t>& first_stage)
        : lane_graph(runner, lanes_from_starts(first_stage, stage_count)) {}

    /// lane_of[s] for a stage that another process runs (remote_transport.hpp): a message to it is handed to the
    /// runner's send_remote(stage, message), which forwards it to that process.
    static constexpr std::size_t remote_lane = static_cast<std::size_t>(-1);

    /// Lanes of any stages: lane_of[s] is the lane of stage s (every lane in [0, max + 1) holds a stage; a lane runs
    /// its stages in increasing order), or remote_lane. Throws std::invalid_argument for an empty map, a map without
    /// a local stage or a lane without stages.
    struct lane_map {
        std::vector<std::size_t> lane_of;  ///< [S]: the lane of stage s, or remote_lane.
    };
    /// A graph of one task per lane, running `runner`'s stages. Throws std::invalid_argument as said at lane_map.
    lane_graph(Runner& runner, lane_map map) : runner_(runner), lane_of_(std::move(map.lane_of)) {
        if (lane_of_.empty()) throw std::invalid_argument("pipeprop::lane_graph: no stages");
        std::size_t lanes = 0;
        for (const std::size_t l : lane_of_)
            if (l != remote_lane) lanes = std::max(lanes, l + 1);
        if (lanes == 0) throw std::invalid_argument("pipeprop::lane_graph: no stage runs in this process");
        stages_of_.resize(lanes);
        for (std::size_t s = 0; s < lane_of_.size(); ++s)
            if (lane_of_[s] != remote_lane) stages_of_[lane_of_[s]].push_back(s);
        for (std::size_t l = 0; l < lanes; ++l)
            if (stages_of_[l].empty())
                throw std::invalid_argument("pipeprop::lane_graph: lane " + std::to_string(l) + " has no stage");
        for (std::size_t l = 0; l < lanes; ++l)
            nodes_.push_back(std::make_unique<node_type>(graph_, tbb::flow::serial, [this, l](const routed& msg) {
                body(l, msg);
                return tbb::flow::continue_msg{};
            }));
    }

    lane_graph(const lane_graph&) = delete;
    lane_graph& operator=(const lane_graph&) = delete;

    ~lane_graph() {
        try {
            graph_.wait_for_all();
        } catch (...) {
        }
    }

    /// Puts a message for `stage` into the graph (its lane's node delivers it); an empty message only wakes the
    /// lane. Does not wait.
    void put(std::size_t stage, const boundary_message& msg) { nodes_.at(lane_of_.at(stage))->try_put({stage, msg}); }
    /// Whether `stage` runs in another process.
    [[nodiscard]] bool is_remote(std::size_t stage) const { return lane_of_.at(stage) == remote_lane; }
    /// Wakes every lane (an empty message each): each runs whatever its stages can run.
    void wake_all() {
        for (auto& n : nodes_) n->try_put(routed{});
    }
    /// Waits (the caller's thread joins the work) until the graph is idle: every stage waits for a message that no
    /// stage will send. Rethrows the first exception a runner call threw (the graph is then cancelled).
    void wait() { graph_.wait_for_all(); }
    /// After an exception: clears the graph's cancelled state and the queued messages.
    void reset() { graph_.reset(); }

    [[nodiscard]] std::size_t lane_count() const noexcept { return stages_of_.size(); }  ///< Number of lanes (tasks).
    /// The lane that runs `stage` (remote_lane: another process). Throws std::out_of_range for stage >= S.
    [[nodiscard]] std::size_t lane_of(std::size_t stage) const { return lane_of_.at(stage); }

private:
    struct routed {  // a message and the stage it is for
        std::size_t to = 0;
        boundary_message msg{};
    };
    using node_type = tbb::flow::function_node<routed, tbb::flow::continue_msg, tbb::flow::queueing>;

    static lane_map lanes_from_starts(const std::vector<std::size_t>& first_stage, std::size_t stage_count) {
        check_lanes(first_stage, stage_count, "pipeprop::lane_graph");
        lane_map map{std::vector<std::size_t>(stage_count, 0)};
        for (std::size_t l = 0; l < first_stage.size(); ++l) {
            const std::size_t end = l + 1 < first_stage.size() ? first_stage[l + 1] : stage_count;
            for (std::size_t s = first_stage[l]; s < end; ++s) map.lane_of[s] = l;
        }
        return map;
    }

    void body(std::size_t l, const routed& in) {
        if (!in.msg.empty()) runner_.deliver(in.to, in.msg);
        auto send = [&](std::size_t to, const boundary_message& out) {
            if (lane_of_[to] == l)
                runner_.deliver(to, out);
            else if (lane_of_[to] == remote_lane) {
                if constexpr (requires { runner_.send_remote(to, out); })
                    runner_.send_remote(to, out);
                else
                    throw std::logic_error("pipeprop::lane_graph: this runner cannot send to another process");
            } else
                nodes_[lane_of_[to]]->try_put({to, out});
        };
        for (bool progress = true; progress;) {
            progress = false;
            for (const std::size_t s : stages_of_[l])
                while (runner_.ready(s)) {
                    runner_.run_next(s, send);
                    progress = true;
                }
        }
    }

    Runner& runner_;
    std::vector<std::size_t> lane_of_;
    std::vector<std::vector<std::size_t>> stages_of_;
    // Declared last: destroyed first (nodes before the graph they belong to).
    tbb::flow::graph graph_;
    std::vector<std::unique_ptr<node_type>> nodes_;
};

}  // namespace pipeprop
