// pipeprop/lane_graph.hpp: the one flow graph on which both engines' concurrent executors run their stages' op lists
// (PB: pb/concurrent_executor.hpp, the op streams of pb/op_stream.hpp; synchronous schedules:
// sync/schedule_executor.hpp, the op lists of sync/schedule.hpp).
//
// The stages are grouped into lanes, runs of consecutive stages; each lane is one serial oneTBB multifunction_node, so
// a lane's stages never run at the same time and their weights and activations stay on the core that runs the lane.
// A node is woken by a boundary message (boundary_channel.hpp) from a neighbouring lane (a forward message is for the
// lane's first stage, a backward one for its last) or by an empty message from the caller (start, drain). It then
// hands the message to the runner and runs, stage after stage, every op whose input is there, until none is:
// a message a stage sends to a stage of the same lane is handed over directly, one to another lane travels along a
// graph edge (port 0: the next lane, port 1: the previous lane).
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

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pipeprop/boundary_channel.hpp"

namespace pipeprop {

/// Throws std::invalid_argument naming the problem unless `first_stage` lists the first stage of each lane of S
/// stages: 0, then strictly increasing stage indices below S. who: the caller, for the message.
inline void check_lanes(const std::vector<std::size_t>& first_stage, std::size_t stages, const std::string& who) {
    const auto bad = [&](const std::string& why) {
        throw std::invalid_argument(who + ": " + why + " (a lane plan lists the first stage of each lane: 0, then " +
                                    "strictly increasing stage indices below S = " + std::to_string(stages) + ")");
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
    /// Throws std::invalid_argument for a plan that is not one for stage_count stages.
    lane_graph(Runner& runner, std::size_t stage_count, const std::vector<std::size_t>& first_stage)
        : runner_(runner) {
        check_lanes(first_stage, stage_count, "pipeprop::lane_graph");
        lane_of_.assign(stage_count, 0);
        for (std::size_t l = 0; l < first_stage.size(); ++l) {
            const std::size_t end = l + 1 < first_stage.size() ? first_stage[l + 1] : stage_count;
            lanes_.push_back({first_stage[l], end});
            for (std::size_t s = first_stage[l]; s < end; ++s) lane_of_[s] = l;
        }
        for (std::size_t l = 0; l < lanes_.size(); ++l)
            nodes_.push_back(std::make_unique<node_type>(
                graph_, tbb::flow::serial,
                [this, l](const boundary_message& msg, ports_type& ports) { body(l, msg, ports); }));
        for (std::size_t l = 0; l + 1 < lanes_.size(); ++l) {
            tbb::flow::make_edge(tbb::flow::output_port<0>(*nodes_[l]), *nodes_[l + 1]);
            tbb::flow::make_edge(tbb::flow::output_port<1>(*nodes_[l + 1]), *nodes_[l]);
        }
    }

    lane_graph(const lane_graph&) = delete;
    lane_graph& operator=(const lane_graph&) = delete;

    ~lane_graph() {
        try {
            graph_.wait_for_all();
        } catch (...) {
        }
    }

    /// Puts a message for `stage`'s lane into the graph (a forward one is delivered to the lane's first stage, a
    /// backward one to its last); an empty message only wakes the lane. Does not wait.
    void put(std::size_t stage, const boundary_message& msg) { nodes_.at(lane_of_.at(stage))->try_put(msg); }
    /// Wakes every lane (an empty message each): each runs whatever its stages can run.
    void wake_all() {
        for (auto& n : nodes_) n->try_put(boundary_message{});
    }
    /// Waits (the caller's thread joins the work) until the graph is idle: every stage waits for a message that no
    /// stage will send. Rethrows the first exception a runner call threw (the graph is then cancelled).
    void wait() { graph_.wait_for_all(); }
    /// After an exception: clears the graph's cancelled state and the queued messages.
    void reset() { graph_.reset(); }

    [[nodiscard]] std::size_t lane_count() const noexcept { return lanes_.size(); }
    /// The lane that runs `stage`. Throws std::out_of_range for stage >= S.
    [[nodiscard]] std::size_t lane_of(std::size_t stage) const { return lane_of_.at(stage); }

private:
    using node_type = tbb::flow::multifunction_node<boundary_message, std::tuple<boundary_message, boundary_message>,
                                                    tbb::flow::queueing>;
    using ports_type = typename node_type::output_ports_type;
    struct lane {
        std::size_t first = 0;
        std::size_t end = 0;
    };

    void body(std::size_t l, const boundary_message& msg, ports_type& ports) {
        const lane ln = lanes_[l];
        if (!msg.empty()) runner_.deliver(msg.dir == direction::forward ? ln.first : ln.end - 1, msg);
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t s = ln.first; s < ln.end; ++s) {
                auto send = [&](std::size_t to, const boundary_message& out) {
                    if (to >= ln.first && to < ln.end)
                        runner_.deliver(to, out);
                    else if (to > s)
                        std::get<0>(ports).try_put(out);
                    else
                        std::get<1>(ports).try_put(out);
                };
                while (runner_.ready(s)) {
                    runner_.run_next(s, send);
                    progress = true;
                }
            }
        }
    }

    Runner& runner_;
    std::vector<lane> lanes_;
    std::vector<std::size_t> lane_of_;
    // Declared last: destroyed first (nodes before the graph they belong to).
    tbb::flow::graph graph_;
    std::vector<std::unique_ptr<node_type>> nodes_;
};

}  // namespace pipeprop
