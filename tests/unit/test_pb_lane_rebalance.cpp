// The concurrent PB executor's lane rebalancing (pb/lane_rebalance.hpp): slowest_lane_cost against sums by hand;
// the rebalancer cuts anew only every `period` measured runs, only when two looks in a row find the same cut whose
// slowest lane is at least 3% less busy, over the busy time of the runs since its last look (not of the whole run),
// and rejects wrong input;
// in an engine whose given plan leaves one lane almost idle, the lanes are cut anew, the stage statistics show the
// new plan, and every bit equals the sequential reference's.
#include <catch2/catch.hpp>

#include <pipeprop/pb/lane_rebalance.hpp>

#include "unit/test_pb_support.hpp"

#include <limits>
#include <optional>
#include <vector>

using namespace pb_test;

namespace {

using starts = std::vector<std::size_t>;

// One measured run in which stage s was busy busy[s] seconds, on top of the times so far (`so_far`, updated).
std::optional<pb::lane_plan> one_run(pb::lane_rebalancer& r, std::vector<double>& so_far,
                                     const std::vector<double>& busy) {
    r.run_starts(so_far);
    for (std::size_t s = 0; s < busy.size(); ++s) so_far[s] += busy[s];
    return r.run_ended(so_far);
}

}  // namespace

TEST_CASE("slowest_lane_cost: the largest lane sum", "[pb][lanes][rebalance]") {
    const std::vector<double> c{1.0, 2.0, 3.0, 4.0, 0.5};
    CHECK(pb::slowest_lane_cost(pb::lane_plan{starts{0}}, c) == 10.5);
    CHECK(pb::slowest_lane_cost(pb::lane_plan{starts{0, 3}}, c) == 6.0);        // 6 | 4.5
    CHECK(pb::slowest_lane_cost(pb::lane_plan{starts{0, 2, 4}}, c) == 7.0);     // 3 | 7 | 0.5
    CHECK(pb::slowest_lane_cost(pb::lane_plan{starts{0, 1, 2, 3, 4}}, c) == 4.0);
    CHECK_THROWS_AS(pb::slowest_lane_cost(pb::lane_plan{starts{0, 5}}, c), std::invalid_argument);
}

TEST_CASE("lane_rebalancer: a new cut every period runs, with a 3% gain found by two looks in a row, over the runs "
          "since the last look", "[pb][lanes][rebalance]") {
    std::vector<double> t(4, 0.0);
    pb::lane_rebalancer r(2, pb::lane_plan{starts{0, 1}}, 4);  // lanes: stage 0 | stages 1-3
    REQUIRE(r.enabled());
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));  // first run of the period: no look yet
    CHECK(r.stats().checks == 0);
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));  // look 1 finds 1 | 3 -> 2 | 2, and waits for a second look
    CHECK(r.stats().checks == 1);
    CHECK(r.plan().first_stage == starts{0, 1});
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));
    const std::optional<pb::lane_plan> cut = one_run(r, t, {1, 1, 1, 1});  // look 2 agrees
    REQUIRE(cut);
    CHECK(cut->first_stage == starts{0, 2});
    CHECK(r.plan().first_stage == starts{0, 2});
    CHECK(r.stats().checks == 2);
    CHECK(r.stats().replans == 1);
    CHECK(r.stats().first_stage == starts{0, 2});
    // Balanced: looked at, kept.
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));
    CHECK(r.stats().checks == 3);
    CHECK(r.stats().replans == 1);
    // A better cut that gains less than 3%, found by two looks in a row: 1.0 | 1.01 against 1.02 | 0.99 (1%): kept.
    for (int k = 0; k < 2; ++k) {
        CHECK_FALSE(one_run(r, t, {1.0, 0.02, 0.49, 0.5}));
        CHECK_FALSE(one_run(r, t, {0, 0, 0, 0}));
    }
    CHECK(r.stats().checks == 5);
    CHECK(r.plan().first_stage == starts{0, 2});
    // One look that finds a better cut, then one that finds the plan in use best: the plan stays.
    CHECK_FALSE(one_run(r, t, {0.1, 0.1, 0.1, 2.0}));
    CHECK_FALSE(one_run(r, t, {0.1, 0.1, 0.1, 2.0}));
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));
    CHECK_FALSE(one_run(r, t, {1, 1, 1, 1}));
    CHECK(r.stats().checks == 7);
    CHECK(r.plan().first_stage == starts{0, 2});
    // Each look sees only the runs since the last one: two periods in which stage 3 is long move the cut to {0, 3}
    // (0.4 | 2.8 -> 0.6 | 2.6), though over the whole run {0, 2} would still be the better cut.
    for (int k = 0; k < 3; ++k) CHECK_FALSE(one_run(r, t, {0.1, 0.1, 0.1, 1.3}));
    const std::optional<pb::lane_plan> again = one_run(r, t, {0.1, 0.1, 0.1, 1.3});
    REQUIRE(again);
    CHECK(again->first_stage == starts{0, 3});
    CHECK(pb::slowest_lane_cost(pb::lane_plan{starts{0, 2}}, t) < pb::slowest_lane_cost(*again, t));
    CHECK(r.stats().checks == 9);
    CHECK(r.stats().replans == 2);
}

TEST_CASE("lane_rebalancer: off with period 0 or one lane; wrong input is rejected", "[pb][lanes][rebalance]") {
    std::vector<double> t(3, 0.0);
    pb::lane_rebalancer off(0, pb::lane_plan{starts{0, 1}}, 3);
    CHECK_FALSE(off.enabled());
    CHECK_FALSE(off.stats().enabled);
    CHECK_FALSE(one_run(off, t, {5, 0, 0}));
    pb::lane_rebalancer one_lane(1, pb::lane_plan{starts{0}}, 3);
    CHECK_FALSE(one_lane.enabled());
    CHECK_FALSE(one_run(one_lane, t, {5, 0, 0}));
    CHECK_FALSE(pb::lane_rebalancer().enabled());
    // Stages that were never busy: every cut is as good as the plan in use, which stays.
    REQUIRE(pb::plan_lanes(std::vector<double>(3, 0.0), 2).first_stage != starts{0, 2});
    pb::lane_rebalancer idle(1, pb::lane_plan{starts{0, 2}}, 3);
    CHECK_FALSE(one_run(idle, t, {0, 0, 0}));
    CHECK_FALSE(one_run(idle, t, {0, 0, 0}));
    CHECK(idle.stats().checks == 2);
    CHECK(idle.stats().replans == 0);
    CHECK_THROWS_AS(pb::lane_rebalancer(1, pb::lane_plan{starts{0, 3}}, 3), std::invalid_argument);

    pb::lane_rebalancer r(1, pb::lane_plan{starts{0, 2}}, 3);
    CHECK_THROWS_WITH(r.run_starts(std::vector<double>(2, 0.0)), Catch::Contains("2 busy times for 3 stages"));
    CHECK_THROWS_WITH(r.run_starts(std::vector<double>{0, -1, 0}), Catch::Contains("stage 1's busy time"));
    CHECK_THROWS_WITH(r.run_starts(std::vector<double>{0, 0, std::numeric_limits<double>::quiet_NaN()}),
                      Catch::Contains("stage 2's busy time is negative or not finite"));
    CHECK_THROWS_WITH(r.run_ended(std::vector<double>(3, 1.0)), Catch::Contains("a run ended unannounced"));
    r.run_starts(std::vector<double>{1, 1, 1});
    CHECK_THROWS_WITH(r.run_ended(std::vector<double>{1, 0.5, 1}), Catch::Contains("stage 1's busy time went back"));
}

TEST_CASE("an engine whose given plan leaves a lane almost idle cuts its lanes anew, with the reference's bits",
          "[pb][executors][lanes][rebalance]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<cnn, pp::fine_grained<pp::parameter_free::own_stage>, policy>;
    static_assert(pipe::stage_count == 10);
    const std::size_t count = 200, b = 2;
    pb::options<policy> o;
    o.max_batch = b;
    o.seed = 5;
    o.executor = pb::executor_kind::sequential;
    pipe seq(o);
    const run_record rs = drive(seq, count, b, 1, 83);
    o.executor = pb::executor_kind::concurrent;
    o.push_buffer = 4;
    o.lane_starts = {0, 9};      // nine stages on lane 0, the last (cheapest) alone on lane 1
    o.lane_rebalance_period = 1;  // a look after every measured run
    o.load_probe_period = 0;      // every run on the lanes
    pipe con(o);
    const run_record rc = drive(con, count, b, 1, 83);
    CHECK(rc.ids == rs.ids);
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    const pb::run_stats st = con.stats();
    CHECK(st.lanes.enabled);
    CHECK(st.lanes.checks > 10);
    CHECK(st.lanes.replans >= 1);
    REQUIRE(st.lanes.first_stage.size() == 2);
    CHECK(st.lanes.first_stage[1] < 9);  // lane 1 took stages from lane 0
    for (std::size_t s = 0; s < pipe::stage_count; ++s)
        CHECK(st.stages[s].lane == (s < st.lanes.first_stage[1] ? 0u : 1u));
    // The sequential executor, and a plan kept as given: nothing to report.
    CHECK_FALSE(seq.stats().lanes.enabled);
    o.lane_rebalance_period = 0;
    pipe kept(o);
    drive(kept, 60, b, 0, 0);
    CHECK_FALSE(kept.stats().lanes.enabled);
    CHECK(kept.stats().stages[8].lane == 0);
    CHECK(kept.stats().stages[9].lane == 1);
}
