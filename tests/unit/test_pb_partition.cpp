// PB partitions (pb::pipeline over pipeline_layout, pb::runtime_partition, pb::check_partition): cutting L layers
// into S stages never drops or duplicates a layer (docs/pitfalls.md item 9), whatever L mod S is; bad
// runtime split points are rejected with the offending point named; static and runtime cuts equal boundaries and
// delays listed by hand (CNN, MLP, and a ResNet whose projection shortcut must share its add's stage); a runtime
// partition trains bit-identically to the static pipeline of the same cut (and a cut one node off does not); the
// concurrent executor stays bit-identical under oversubscription. Lane plans (pb/lane_plan.hpp): checked, cut by
// measured costs where the work is, and an explicit plan is used as given with the same bits.
#include <catch2/catch.hpp>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "unit/small_resnet.hpp"
#include "unit/test_pb_support.hpp"

#include <type_traits>
#include <vector>

using namespace pb_test;

namespace {

/// Every layer in exactly one stage, stages contiguous and non-empty, in order.
template <class Pipe>
constexpr bool covers_each_layer_once() {
    constexpr std::size_t L = Pipe::layout::layer_count;
    std::array<std::size_t, L> owner_count{};
    for (std::size_t s = 0; s < Pipe::stage_count; ++s) {
        if (Pipe::boundaries[s] >= Pipe::boundaries[s + 1]) return false;
        for (std::size_t i = Pipe::boundaries[s]; i < Pipe::boundaries[s + 1]; ++i) ++owner_count[i];
    }
    for (std::size_t c : owner_count)
        if (c != 1) return false;
    return Pipe::boundaries[0] == 0 && Pipe::boundaries[Pipe::stage_count] == L;
}

template <class Net, class Partition>
using pipe_of = pb::pipeline<Net, Partition, pb::policy::none>;

static_assert(covers_each_layer_once<pipe_of<cnn, pp::fine_grained<>>>());
static_assert(covers_each_layer_once<pipe_of<cnn, pp::fine_grained<pp::parameter_free::own_stage>>>());
static_assert(covers_each_layer_once<pipe_of<cnn, pp::split_at<3>>>());
static_assert(covers_each_layer_once<pipe_of<cnn, pp::split_at<1, 2, 3, 4, 5, 6, 7, 8, 9>>>());
static_assert(covers_each_layer_once<pipe_of<cnn, pp::split_at<>>>());
static_assert(covers_each_layer_once<pipe_of<mlp, pp::fine_grained<>>>());
static_assert(covers_each_layer_once<pipe_of<mlp, pp::split_at<2, 5>>>());
static_assert(pipe_of<cnn, pp::fine_grained<pp::parameter_free::own_stage>>::stage_count == 10);
static_assert(pipe_of<cnn, pp::split_at<3>>::delays == std::array<std::size_t, 2>{2, 0});
static_assert(pipe_of<mlp, pp::fine_grained<>>::boundaries == std::array<std::size_t, 4>{0, 3, 5, 6});

}  // namespace

TEST_CASE("fine-grained attach: every stage holds exactly one parametric layer", "[pb][partition]") {
    using pipe = pipe_of<cnn, pp::fine_grained<>>;
    using stack = pp::layer_stack<cnn, float>;
    for (std::size_t s = 0; s < pipe::stage_count; ++s) {
        std::size_t parametric = 0;
        for (std::size_t i = pipe::boundaries[s]; i < pipe::boundaries[s + 1]; ++i)
            parametric += stack::has_parameters[i];
        CHECK(parametric == 1);
    }
}

TEST_CASE("runtime partitions: every split of L layers into S stages covers each layer once", "[pb][partition]") {
    constexpr std::size_t L = pp::layer_stack<cnn, float>::layer_count;
    // All 2^(L-1) subsets of split points: whatever L mod S is.
    for (std::size_t mask = 0; mask < (std::size_t{1} << (L - 1)); ++mask) {
        std::vector<std::size_t> points;
        for (std::size_t p = 1; p < L; ++p)
            if (mask & (std::size_t{1} << (p - 1))) points.push_back(p);
        const auto ranges = pp::partition_at(L, points);
        REQUIRE(ranges.size() == points.size() + 1);
        std::vector<int> owners(L, 0);
        for (const auto& r : ranges)
            for (std::size_t i = r.begin; i < r.end; ++i) ++owners[i];
        CHECK(std::all_of(owners.begin(), owners.end(), [](int c) { return c == 1; }));
        CHECK_NOTHROW(pb::check_partition(ranges, L));
    }
}

TEST_CASE("bad runtime partitions are rejected with a precise message", "[pb][partition][errors]") {
    using rt = pb::pipeline<mlp, pb::runtime_partition, pb::policy::none>;
    pb::options<pb::policy::none> o;
    CHECK_THROWS_WITH(rt(std::vector<std::size_t>{0}, o), Catch::Contains("split point 0 (0)"));
    CHECK_THROWS_WITH(rt(std::vector<std::size_t>{4, 2}, o), Catch::Contains("split point 1 (2)"));
    CHECK_THROWS_WITH(rt(std::vector<std::size_t>{6}, o), Catch::Contains("in (0, 6)"));
    CHECK_THROWS_WITH(rt(std::vector<pp::layer_range>{{0, 2}, {3, 6}}, o),
                      Catch::Contains("stage 1 covers layers [3, 6)"));  // layer 2 dropped
    CHECK_THROWS_WITH(rt(std::vector<pp::layer_range>{{0, 3}, {2, 6}}, o),
                      Catch::Contains("stage 1 covers layers [2, 6)"));  // layer 2 duplicated
    CHECK_THROWS_WITH(rt(std::vector<pp::layer_range>{{0, 3}, {3, 5}}, o), Catch::Contains("layers dropped"));
    CHECK_THROWS_AS(rt(std::vector<pp::layer_range>{}, o), std::invalid_argument);
    pb::options<pb::policy::none> zero;
    zero.max_batch = 0;
    CHECK_THROWS_WITH(rt(std::vector<std::size_t>{2}, zero), Catch::Contains("max_batch must be >= 1"));
}

namespace {

/// What a cut must be, written out by hand for a known network (not computed by the library).
struct expected_cut {
    std::vector<std::size_t> boundaries;  // stage s = nodes [boundaries[s], boundaries[s + 1])
    std::vector<std::size_t> delays;      // D_s, listed
};

/// Checks an engine's stages (static or runtime) against the hand-listed cut.
template <class Engine>
void check_stages(const Engine& e, const expected_cut& x) {
    REQUIRE(e.number_of_stages() + 1 == x.boundaries.size());
    for (std::size_t s = 0; s < e.number_of_stages(); ++s) {
        INFO("stage " << s);
        CHECK(e.stage_range(s).begin == x.boundaries[s]);
        CHECK(e.stage_range(s).end == x.boundaries[s + 1]);
        CHECK(e.stage_delay(s) == x.delays[s]);
    }
}

/// Checks a static pipeline type's constexpr cut against the hand-listed one.
template <class Pipe>
void check_constants(const expected_cut& x) {
    REQUIRE(Pipe::stage_count + 1 == x.boundaries.size());
    CHECK(std::vector<std::size_t>(Pipe::boundaries.begin(), Pipe::boundaries.end()) == x.boundaries);
    CHECK(std::vector<std::size_t>(Pipe::delays.begin(), Pipe::delays.end()) == x.delays);
}

/// Split points of a cut (its inner boundaries), as a runtime partition takes them.
std::vector<std::size_t> split_points(const expected_cut& x) {
    return {x.boundaries.begin() + 1, x.boundaries.end() - 1};
}

/// Index of the stage holding node i.
std::size_t stage_of(const expected_cut& x, std::size_t i) {
    std::size_t s = 0;
    while (x.boundaries[s + 1] <= i) ++s;
    return s;
}

}  // namespace

TEST_CASE("static and runtime cuts equal hand-listed boundaries and delays", "[pb][partition]") {
    using policy = pb::policy::none;
    using test_nets::small_resnet;
    // cnn: 0 conv 1 gn 2 relu 3 pool 4 conv 5 relu 6 flatten 7 dense 8 relu 9 dense (parametric: 0 1 4 7 9).
    const expected_cut cnn_split{{0, 2, 5, 8, 10}, {6, 4, 2, 0}};
    const expected_cut cnn_fine{{0, 1, 4, 7, 9, 10}, {8, 6, 4, 2, 0}};
    const expected_cut cnn_own{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {18, 16, 14, 12, 10, 8, 6, 4, 2, 0}};
    const expected_cut cnn_one{{0, 10}, {0}};
    // mlp: 0 flatten 1 dense 2 relu 3 dense 4 relu 5 dense: the leading flatten attaches to the first stage.
    const expected_cut mlp_fine{{0, 3, 5, 6}, {4, 2, 0}};
    // small_resnet (small_resnet.hpp): fine_grained starts a stage at every parametric node but the projection
    // shortcut's (17 conv, 18 gn), which share the stage of the add (19) with 16 gn (docs/pb-semantics.md §6).
    const expected_cut res_fine{{0, 1, 4, 5, 7, 8, 12, 13, 15, 16, 22, 23},
                                {20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0}};
    const expected_cut res_own{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23},
                               {38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0}};
    const expected_cut res_split{{0, 5, 13, 16, 23}, {6, 4, 2, 0}};

    check_constants<pipe_of<cnn, pp::split_at<2, 5, 8>>>(cnn_split);
    check_constants<pipe_of<cnn, pp::fine_grained<>>>(cnn_fine);
    check_constants<pipe_of<cnn, pp::fine_grained<pp::parameter_free::own_stage>>>(cnn_own);
    check_constants<pipe_of<cnn, pp::split_at<>>>(cnn_one);
    check_constants<pipe_of<mlp, pp::fine_grained<>>>(mlp_fine);
    check_constants<pipe_of<small_resnet, pp::fine_grained<>>>(res_fine);
    check_constants<pipe_of<small_resnet, pp::fine_grained<pp::parameter_free::own_stage>>>(res_own);
    check_constants<pipe_of<small_resnet, pp::split_at<5, 13, 16>>>(res_split);
    for (const auto* x : {&res_fine, &res_own}) {
        CHECK(stage_of(*x, 17) == stage_of(*x, 19));
        CHECK(stage_of(*x, 18) == stage_of(*x, 19));
        CHECK(stage_of(*x, 16) == stage_of(*x, 19));  // with f's last parametric node
    }

    // The engines built from them: static (stage programs instantiated per stage type) and runtime (from the
    // hand-listed split points) report the listed ranges and delays.
    check_stages(pipe_of<cnn, pp::split_at<2, 5, 8>>(), cnn_split);
    check_stages(pipe_of<cnn, pp::fine_grained<>>(), cnn_fine);
    check_stages(pipe_of<small_resnet, pp::fine_grained<>>(), res_fine);
    check_stages(pipe_of<small_resnet, pp::fine_grained<pp::parameter_free::own_stage>>(), res_own);
    pb::options<policy> o;
    for (const auto* x : {&cnn_split, &cnn_fine, &cnn_own, &cnn_one})
        check_stages(pb::pipeline<cnn, pb::runtime_partition, policy>(split_points(*x), o), *x);
    check_stages(pb::pipeline<mlp, pb::runtime_partition, policy>(split_points(mlp_fine), o), mlp_fine);
    for (const auto* x : {&res_fine, &res_own, &res_split})
        check_stages(pb::pipeline<small_resnet, pb::runtime_partition, policy>(split_points(*x), o), *x);
}

TEST_CASE("a runtime partition trains bitwise like the static pipeline of the same cut", "[pb][partition]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using test_nets::small_resnet;
    pb::options<policy> o;
    o.push_buffer = 5;
    o.executor = pb::executor_kind::sequential;
    auto initial = [&](auto& e) {
        std::vector<float> w(std::remove_reference_t<decltype(e)>::stack_type::parameter_count);
        e.copy_parameters(w);
        return w;
    };
    {  // cnn, split_at<2, 5, 8> against the runtime split points {2, 5, 8}; another cut as the control
        pb::pipeline<cnn, pp::split_at<2, 5, 8>, policy> fixed(o);
        pb::pipeline<cnn, pb::runtime_partition, policy> rt(std::vector<std::size_t>{2, 5, 8}, o);
        pb::pipeline<cnn, pb::runtime_partition, policy> other(std::vector<std::size_t>{2, 5, 7}, o);
        const auto w0 = initial(fixed);
        const run_record ra = drive(fixed, 90, 1, 0, 40), rb = drive(rt, 90, 1, 0, 40), rc = drive(other, 90, 1, 0, 40);
        CHECK_FALSE(bitwise_equal(ra.weights, w0));  // it trained
        CHECK(bitwise_equal(ra.weights, rb.weights));
        CHECK(bitwise_equal(ra.velocities, rb.velocities));
        CHECK(bitwise_equal(ra.losses, rb.losses));
        // The control: a cut one node off changes the delays of stage 2's layers and so the run.
        CHECK_FALSE(bitwise_equal(ra.weights, rc.weights));
        CHECK_FALSE(bitwise_equal(ra.losses, rc.losses));
    }
    {  // small ResNet fine_grained (cuts inside both blocks, shortcut in the add's stage) against the runtime cut at
       // the hand-listed points; the control moves the shortcut's stage start from 16 to 15
        pb::pipeline<small_resnet, pp::fine_grained<>, policy> fixed(o);
        const std::vector<std::size_t> points{1, 4, 5, 7, 8, 12, 13, 15, 16, 22};
        pb::pipeline<small_resnet, pb::runtime_partition, policy> rt(points, o);
        pb::pipeline<small_resnet, pb::runtime_partition, policy> other(
            std::vector<std::size_t>{1, 4, 5, 7, 8, 12, 13, 14, 15, 22}, o);
        const auto w0 = initial(fixed);
        const run_record ra = drive(fixed, 70, 1, 0, 30), rb = drive(rt, 70, 1, 0, 30), rc = drive(other, 70, 1, 0, 30);
        CHECK_FALSE(bitwise_equal(ra.weights, w0));
        CHECK(bitwise_equal(ra.weights, rb.weights));
        CHECK(bitwise_equal(ra.velocities, rb.velocities));
        CHECK(bitwise_equal(ra.losses, rb.losses));
        CHECK_FALSE(bitwise_equal(ra.weights, rc.weights));
    }
}

TEST_CASE("the initial weights do not depend on the cut", "[pb][partition]") {
    using policy = pb::policy::none;
    pb::pipeline<cnn, pp::fine_grained<pp::parameter_free::own_stage>, policy> a;
    pb::pipeline<cnn, pp::split_at<4>, policy> b;
    std::vector<float> wa(pp::layer_stack<cnn, float>::parameter_count), wb(wa.size()), w(wa.size());
    a.copy_parameters(wa);
    b.copy_parameters(wb);
    pp::layer_stack<cnn, float>().init_parameters(w, 1);
    CHECK(bitwise_equal(wa, w));
    CHECK(bitwise_equal(wb, w));
}

TEST_CASE("concurrent stays bit-identical when four threads share two cores", "[pb][executors][stress]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<cnn, pp::fine_grained<pp::parameter_free::own_stage>, policy>;
    pb::options<policy> o;
    o.executor = pb::executor_kind::sequential;
    o.max_batch = 2;
    pipe seq(o);
    const run_record rs = drive(seq, 300, 2, 1, 150);
    tbb::global_control workers(tbb::global_control::max_allowed_parallelism, 4);
    tbb::task_arena arena(4);
    run_record rc;
    arena.execute([&] {
        pb::options<policy> oc;
        oc.max_batch = 2;
        oc.push_buffer = 32;
        pipe con(oc);  // its flow graph runs in this 4-thread arena
        rc = drive(con, 300, 2, 1, 150);
    });
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(rc.ids == rs.ids);
}

TEST_CASE("lane plans: checked, balanced by cost, and an explicit plan is used as given", "[pb][partition][lanes]") {
    openblas_set_num_threads(1);
    CHECK_THROWS_WITH(pb::check_lane_plan({}, 4), Catch::Contains("start at stage 0"));
    CHECK_THROWS_WITH(pb::check_lane_plan({1, 2}, 4), Catch::Contains("start at stage 0"));
    CHECK_THROWS_WITH(pb::check_lane_plan({0, 2, 2}, 4), Catch::Contains("lane 2 starts at stage 2, not after"));
    CHECK_THROWS_WITH(pb::check_lane_plan({0, 4}, 4), Catch::Contains("lane 1 starts at stage 4"));
    CHECK_NOTHROW(pb::check_lane_plan({0, 1, 3}, 4));
    CHECK(pb::plan_lanes({5, 1, 1, 1, 1, 1}, 2).first_stage == std::vector<std::size_t>{0, 1});
    CHECK(pb::plan_lanes({1, 1, 1, 1, 1, 5}, 2).first_stage == std::vector<std::size_t>{0, 5});
    CHECK(pb::plan_lanes({1, 1, 1}, 7).first_stage == std::vector<std::size_t>{0, 1, 2});  // at most one per stage
    CHECK(pb::plan_lanes({1, 1, 1}, 1).lane_count() == 1);
    CHECK_THROWS_AS(pb::plan_lanes({1, 1}, 0), std::invalid_argument);

    // Measured costs put the lane cut where the work is: a wide dense layer dwarfs the others.
    using lopsided = pp::network<shape<256>, pp::dense<4>, pp::relu, pp::dense<4>, pp::relu, pp::dense<1024>,
                                 pp::dense<3>>;
    const auto ranges = pp::stage_ranges<pp::pipeline_layout<lopsided, pp::fine_grained<>>>();
    REQUIRE(ranges.size() == 4);
    const auto costs = pb::measure_tick_costs<lopsided>(ranges, 1);
    REQUIRE(costs.size() == 4);
    for (double c : costs) CHECK(c > 0);
    CHECK(costs[2] > costs[1]);  // dense 4 -> 1024 (and its 4k-parameter update) against dense 4 -> 4
    CHECK(costs[3] > costs[1]);  // dense 1024 -> 3

    // An explicit plan: the stats show it, the bits are the sequential reference's; a bad plan is refused.
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<cnn, pp::fine_grained<pp::parameter_free::own_stage>, policy>;
    pb::options<policy> o;
    o.executor = pb::executor_kind::sequential;
    o.max_batch = 2;
    pipe seq(o);
    const run_record rs = drive(seq, 80, 2, 1, 40);
    o.executor = pb::executor_kind::concurrent;
    o.push_buffer = 9;
    o.lanes = 1;  // not read when lane_starts is given
    o.lane_starts = {0, 3, 4, 8};
    o.lane_rebalance_period = 0;  // the plan as given for the whole run (no second cut from the busy time)
    pipe con(o);
    const run_record rc = drive(con, 80, 2, 1, 40);
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.losses, rs.losses));
    const auto st = con.stats();
    const std::vector<std::size_t> want{0, 0, 0, 1, 2, 2, 2, 2, 3, 3};
    for (std::size_t s = 0; s < want.size(); ++s) CHECK(st.stages[s].lane == want[s]);
    o.lane_starts = {0, 10};
    CHECK_THROWS_WITH(pipe(o), Catch::Contains("lane 1 starts at stage 10"));
}
