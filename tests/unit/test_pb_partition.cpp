// PB partitions (pb::pipeline over pipeline_layout, pb::runtime_partition, pb::check_partition): cutting L layers
// into S stages never drops or duplicates a layer (shared/docs/pitfalls.md item 9), whatever L mod S is; bad
// runtime split points are rejected with the offending point named; a runtime partition runs exactly the code of
// the static one (bit-identical results); the concurrent executor stays bit-identical under oversubscription.
#include <catch2/catch.hpp>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "unit/test_pb_support.hpp"

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

TEST_CASE("a runtime partition runs the same code as the static pipeline", "[pb][partition]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using fixed = pb::pipeline<cnn, pp::split_at<2, 5, 8>, policy>;
    using rt = pb::pipeline<cnn, pb::runtime_partition, policy>;
    pb::options<policy> o;
    o.push_buffer = 5;
    fixed a(o);
    rt b(std::vector<std::size_t>{2, 5, 8}, o);
    REQUIRE(b.number_of_stages() == fixed::stage_count);
    for (std::size_t s = 0; s < fixed::stage_count; ++s) {
        CHECK(b.stage_delay(s) == fixed::delays[s]);
        CHECK(b.stage_range(s) == fixed::layout::stage(s));
    }
    const run_record ra = drive(a, 90, 1, 0, 40), rb = drive(b, 90, 1, 0, 40);
    CHECK(bitwise_equal(ra.weights, rb.weights));
    CHECK(bitwise_equal(ra.losses, rb.losses));
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
