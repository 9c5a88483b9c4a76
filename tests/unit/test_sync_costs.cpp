// Cost inputs of the simulator (sync/cost_measurement.hpp) and the balanced cut (sync/balanced_partition.hpp):
// the cut is optimal (checked against all cuts by brute force), covers every layer once and rejects impossible
// requests; measured costs are positive where work is done and zero where there is none; span medians are exact.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/sync/balanced_partition.hpp>
#include <pipeprop/sync/cost_measurement.hpp>

#include <cblas.h>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;

namespace {
// Smallest largest-stage cost over all cuts of costs into p stages (brute force).
double brute_force(const std::vector<double>& costs, std::size_t p) {
    double best = std::numeric_limits<double>::infinity();
    std::vector<std::size_t> pts;
    std::function<void(std::size_t, std::size_t)> rec = [&](std::size_t from, std::size_t left) {
        if (left == 0) {
            std::size_t b = 0;
            double worst = 0;
            for (std::size_t i = 0; i <= pts.size(); ++i) {
                const std::size_t e = i < pts.size() ? pts[i] : costs.size();
                double s = 0;
                for (std::size_t k = b; k < e; ++k) s += costs[k];
                worst = std::max(worst, s);
                b = e;
            }
            best = std::min(best, worst);
            return;
        }
        for (std::size_t q = from; q + left <= costs.size() - 1 + 1 && q < costs.size(); ++q) {
            pts.push_back(q);
            rec(q + 1, left - 1);
            pts.pop_back();
        }
    };
    rec(1, p - 1);
    return best;
}
}  // namespace

TEST_CASE("balanced_partition: optimal contiguous cut, every layer exactly once", "[sync][partition]") {
    std::mt19937_64 rng(3);
    for (int trial = 0; trial < 200; ++trial) {
        const std::size_t L = 1 + trial % 9, p = 1 + (trial / 9) % L;
        std::vector<double> c(L);
        for (auto& v : c) v = static_cast<double>(rng() % 20) / 4.0;
        const auto pts = ps::balanced_partition(c, p);
        REQUIRE(pts.size() == p - 1);
        const auto ranges = pp::partition_at(L, pts);  // throws unless strictly increasing inside (0, L)
        REQUIRE(ranges.size() == p);
        double worst = 0;
        std::size_t covered = 0;
        for (const auto r : ranges) {
            double s = 0;
            for (std::size_t k = r.begin; k < r.end; ++k) s += c[k];
            worst = std::max(worst, s);
            covered += r.size();
        }
        CHECK(covered == L);
        CHECK(worst == brute_force(c, p));
    }
    CHECK(ps::balanced_partition({1, 1, 1, 1}, 4) == std::vector<std::size_t>{1, 2, 3});
    CHECK(ps::balanced_partition({5, 1, 1, 1, 1, 1}, 2) == std::vector<std::size_t>{1});
    CHECK_THROWS_WITH(ps::balanced_partition({1, 2}, 3), Catch::Contains("2 layers into 3"));
    CHECK_THROWS_AS(ps::balanced_partition({1, -2}, 1), std::invalid_argument);
}

TEST_CASE("measured costs: per layer and per stage as the executor runs them", "[sync][costs]") {
    openblas_set_num_threads(1);
    using net = pp::network<pp::shape<12>, pp::dense<16>, pp::relu, pp::dense<5>>;
    const auto lc = ps::measure_layer_costs<net>(8, 3);
    REQUIRE(lc.size() == 3);
    for (const auto& c : lc) {
        CHECK(c.forward > 0);
        CHECK(c.backward_input > 0);
    }
    CHECK(lc[0].backward_weight > 0);
    CHECK(lc[1].backward_weight == 0);  // relu has no weights
    const auto sc = ps::measure_stage_costs<net>(pp::partition_at(3, {2}), 4, 3, 2);
    REQUIRE(sc.size() == 2);
    for (const auto& c : sc) {
        CHECK(c.forward > 0);
        CHECK(c.backward_input > 0);
        CHECK(c.backward_weight > 0);
        CHECK(c.backward_fused > 0);
        CHECK(c.optimizer >= 0);
    }
    CHECK_THROWS_AS(ps::measure_stage_costs<net>(pp::partition_at(3, {2}), 4, 3, 1), std::invalid_argument);
}

TEST_CASE("costs_from_spans: medians per stage and kind", "[sync][costs]") {
    using ps::span_kind;
    const std::vector<ps::op_span> spans{
        {0, span_kind::forward, 0, 0, 1},          {0, span_kind::forward, 1, 1, 4},
        {0, span_kind::forward, 2, 4, 6},          {0, span_kind::backward_fused, 0, 6, 9},
        {1, span_kind::backward_input, 0, 0, 0.5}, {1, span_kind::backward_weight, 0, 1, 3},
        {1, span_kind::optimizer, 0, 3, 3.25}};
    const auto c = ps::costs_from_spans(spans, 2);
    CHECK(c[0].forward == 2);
    CHECK(c[0].backward_fused == 3);
    CHECK(c[0].fused() == 3);
    CHECK(c[1].backward_input == 0.5);
    CHECK(c[1].backward_weight == 2);
    CHECK(c[1].optimizer == 0.25);
    CHECK(c[1].forward == 1);  // absent: the default
}

TEST_CASE("message_latency_from_spans recovers the latency of a simulated step", "[sync][costs]") {
    for (auto k : {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b, ps::schedule_kind::zb_h1})
        for (bool two : {false, true}) {
            const auto sc = ps::make_schedule(k, 3, 5, two);
            const auto sim = ps::simulate(sc, {{1, 2, 1, -1, 0.5}}, {.message_latency = 0.25});
            CHECK(ps::message_latency_from_spans(sc, sim.spans) == Approx(0.25));
            const auto none = ps::simulate(sc, {{1, 2, 1}});
            CHECK(ps::message_latency_from_spans(sc, none.spans) == 0);
        }
    const auto sc = ps::gpipe(2, 2, false);
    CHECK_THROWS_AS(ps::message_latency_from_spans(sc, {}), std::invalid_argument);
}
