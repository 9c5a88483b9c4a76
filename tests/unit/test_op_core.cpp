// The executor core both engines share: PB's op streams (pb/op_stream.hpp) against the clocked
// model written out tick by tick, and the lane graph (lane_graph.hpp) driving a toy runner whose results depend on
// the order of every stage's ops: equal for every lane plan, equal to a one-thread replay, an exception leaves
// wait() and reset() makes the graph usable again.
#include <catch2/catch.hpp>

#include <pipeprop/lane_graph.hpp>
#include <pipeprop/pb/op_stream.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;

/// The ops of stage s of S, tick by tick (docs/pb-semantics.md §1), for the micro-batches [n0, end): micro-batch n enters
/// at tick n - n0; at tick t the stage runs the forward of the one with tau + s == t, then the backward and update
/// of the one with tau + 2S - 2 - s == t.
std::vector<pp::op> clocked_ops(std::size_t S, std::size_t s, std::size_t n0, std::size_t end) {
    std::vector<pp::op> ops;
    const std::size_t count = end - n0;
    for (std::size_t t = 0; t < count + 2 * S; ++t) {
        for (std::size_t i = 0; i < count; ++i)
            if (i + s == t) ops.push_back({pp::op_kind::forward, n0 + i});
        for (std::size_t i = 0; i < count; ++i)
            if (i + 2 * S - 2 - s == t) {
                ops.push_back({pp::op_kind::backward_fused, n0 + i});
                ops.push_back({pp::op_kind::update, n0 + i});
            }
    }
    return ops;
}

std::vector<pp::op> stream_ops(pb::op_stream& st, std::size_t max_ops) {
    std::vector<pp::op> ops;
    while (const std::optional<pp::op> o = st.current()) {
        ops.push_back(*o);
        st.advance();
        if (ops.size() > max_ops) break;
    }
    return ops;
}

}  // namespace

TEST_CASE("pb::op_stream: a stage's ops are the clocked model's, tick by tick, across segments", "[pb][op_core]") {
    for (std::size_t S = 1; S <= 5; ++S)
        for (std::size_t s = 0; s < S; ++s)
            for (const auto& [n0, end] : {std::pair<std::size_t, std::size_t>{0, 1}, {0, 7}, {13, 14}, {5, 40}}) {
                INFO("S = " << S << ", stage " << s << ", micro-batches [" << n0 << ", " << end << ")");
                pb::op_stream st(2 * (S - 1 - s));
                CHECK(st.done());
                CHECK_FALSE(st.current().has_value());
                st.open(n0);
                // While open: the forwards of every pushed micro-batch, interleaved as the clock says.
                std::vector<pp::op> ops;
                const std::vector<pp::op> expected = clocked_ops(S, s, n0, end);
                while (true) {
                    const pp::op o = *st.current();
                    if (o.kind == pp::op_kind::forward && o.micro_batch == end) break;  // the next push's forward
                    ops.push_back(o);
                    st.advance();
                    REQUIRE(ops.size() <= expected.size());
                }
                CHECK_FALSE(st.done());
                st.close(end);  // a drain: the backwards still due
                for (const pp::op& o : stream_ops(st, expected.size())) ops.push_back(o);
                CHECK(st.done());
                CHECK(ops == expected);
            }
}

namespace {

/// A toy pipeline on the lane graph: stage s runs the PB op stream of S stages; a forward message carries a value
/// that each stage mixes into its own state (an order-sensitive hash), a backward one the state of the sender.
/// Every result depends on the order in which each stage ran its ops and on every message's value.
struct toy_runner {
    explicit toy_runner(std::size_t S, std::size_t throw_at_stage = SIZE_MAX) : throw_at(throw_at_stage) {
        for (std::size_t s = 0; s < S; ++s) {
            stages.push_back({pb::op_stream(2 * (S - 1 - s)), {}, {}, 1469598103934665603ull});
        }
    }
    struct stage {
        pb::op_stream stream;
        std::map<std::size_t, std::uint64_t> forward_in, backward_in;  // arrived values by micro-batch
        std::uint64_t state;
    };
    std::vector<stage> stages;
    std::size_t throw_at;

    static std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

    void deliver(std::size_t s, const pp::boundary_message& m) {
        (m.dir == pp::direction::forward ? stages[s].forward_in : stages[s].backward_in)[m.micro_batch] = m.sequence;
    }
    bool ready(std::size_t s) const {
        const auto o = stages[s].stream.current();
        if (!o) return false;
        if (o->kind == pp::op_kind::forward) return stages[s].forward_in.count(o->micro_batch) > 0;
        if (o->kind == pp::op_kind::backward_fused)
            return s + 1 == stages.size() || stages[s].backward_in.count(o->micro_batch) > 0;
        return true;
    }
    template <class Send>
    void run_next(std::size_t s, Send& send) {
        stage& st = stages[s];
        const pp::op o = *st.stream.current();
        if (s == throw_at && o.micro_batch == 5) throw std::runtime_error("toy failure");
        if (o.kind == pp::op_kind::forward) {
            st.state = mix(st.state, st.forward_in.at(o.micro_batch));
            st.forward_in.erase(o.micro_batch);
            if (s + 1 < stages.size()) send(s + 1, pp::boundary_message{o.micro_batch, st.state, 1, pp::direction::forward, 0});
        } else if (o.kind == pp::op_kind::backward_fused) {
            if (s + 1 < stages.size()) {
                st.state = mix(st.state, 3 * st.backward_in.at(o.micro_batch));
                st.backward_in.erase(o.micro_batch);
            }
            if (s > 0) send(s - 1, pp::boundary_message{o.micro_batch, st.state, 1, pp::direction::backward, 0});
        } else {
            st.state = mix(st.state, 7);
        }
        st.stream.advance();
    }
};

/// Runs `pushes` micro-batches through a toy pipeline of S stages on lanes `first_stage` (two segments: a drain
/// after the first `drain_after`); returns every stage's final state.
std::vector<std::uint64_t> run_toy(std::size_t S, const std::vector<std::size_t>& first_stage, std::size_t pushes,
                                   std::size_t drain_after) {
    toy_runner r(S);
    pp::lane_graph<toy_runner> g(r, S, first_stage);
    auto segment = [&](std::size_t n0, std::size_t end) {
        for (auto& st : r.stages) st.stream.open(n0);
        for (std::size_t n = n0; n < end; ++n) g.put(0, pp::boundary_message{n, 1000 + n, 1, pp::direction::forward, 0});
        g.wait();
        for (auto& st : r.stages) st.stream.close(end);
        g.wake_all();
        g.wait();
        for (auto& st : r.stages) REQUIRE(st.stream.done());
    };
    segment(0, drain_after);
    segment(drain_after, pushes);
    std::vector<std::uint64_t> out;
    for (const auto& st : r.stages) out.push_back(st.state);
    return out;
}

/// The same on one thread: stages visited round-robin, each running what is ready (a valid interleaving).
std::vector<std::uint64_t> replay_toy(std::size_t S, std::size_t pushes, std::size_t drain_after) {
    toy_runner r(S);
    auto segment = [&](std::size_t n0, std::size_t end) {
        for (auto& st : r.stages) st.stream.open(n0);
        for (std::size_t n = n0; n < end; ++n) r.deliver(0, pp::boundary_message{n, 1000 + n, 1, pp::direction::forward, 0});
        auto send = [&](std::size_t to, const pp::boundary_message& m) { r.deliver(to, m); };
        auto run_all = [&] {
            for (bool progress = true; progress;) {
                progress = false;
                for (std::size_t s = S; s-- > 0;)
                    while (r.ready(s)) {
                        r.run_next(s, send);
                        progress = true;
                    }
            }
        };
        run_all();
        for (auto& st : r.stages) st.stream.close(end);
        run_all();
    };
    segment(0, drain_after);
    segment(drain_after, pushes);
    std::vector<std::uint64_t> out;
    for (const auto& st : r.stages) out.push_back(st.state);
    return out;
}

}  // namespace

TEST_CASE("lane_graph: results do not depend on the lanes; they equal a one-thread replay", "[op_core]") {
    for (std::size_t S : {1, 2, 3, 6}) {
        const auto expected = replay_toy(S, 40, 11);
        std::vector<std::vector<std::size_t>> plans{{0}};
        std::vector<std::size_t> each;
        for (std::size_t s = 0; s < S; ++s) each.push_back(s);
        plans.push_back(each);
        if (S > 2) plans.push_back({0, 1});
        if (S > 3) plans.push_back({0, 2, S - 1});
        for (const auto& plan : plans) {
            INFO("S = " << S << ", " << plan.size() << " lanes");
            for (int repeat = 0; repeat < 5; ++repeat) CHECK(run_toy(S, plan, 40, 11) == expected);
        }
    }
}

TEST_CASE("lane_graph: a bad lane plan throws; an exception leaves wait() and reset() recovers", "[op_core]") {
    toy_runner ok(3);
    CHECK_THROWS_WITH(pp::lane_graph<toy_runner>(ok, 3, {1}), Catch::Contains("start at stage 0"));
    CHECK_THROWS_WITH(pp::lane_graph<toy_runner>(ok, 3, {0, 3}), Catch::Contains("lane 1 starts at stage 3"));

    toy_runner r(3, /*throw_at_stage=*/1);
    pp::lane_graph<toy_runner> g(r, 3, {0, 1, 2});
    for (auto& st : r.stages) st.stream.open(0);
    for (std::size_t n = 0; n < 10; ++n) g.put(0, pp::boundary_message{n, n, 1, pp::direction::forward, 0});
    CHECK_THROWS_WITH(g.wait(), "toy failure");
    g.reset();
    // A fresh pipeline on the same graph runs to the end.
    toy_runner fresh(3);
    r.stages = fresh.stages;
    r.throw_at = SIZE_MAX;
    for (auto& st : r.stages) st.stream.open(0);
    for (std::size_t n = 0; n < 10; ++n) g.put(0, pp::boundary_message{n, 1000 + n, 1, pp::direction::forward, 0});
    g.wait();
    for (auto& st : r.stages) st.stream.close(10);
    g.wake_all();
    g.wait();
    for (const auto& st : r.stages) CHECK(st.stream.done());
}
