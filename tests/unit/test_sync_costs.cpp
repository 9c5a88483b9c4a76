// Cost inputs of the simulator (sync/cost_measurement.hpp) and the balanced cut (balanced_partition.hpp):
// the cut is optimal (checked against all cuts by brute force), covers every layer once and rejects impossible
// requests; measured costs follow the work (a layer or stage with 4x the FLOPs costs clearly more than the 1x one
// in the same run, a skipped backward-p1 costs next to nothing, a parameter-free layer has no backward-p2) and,
// fed to balanced_partition, cut a deliberately unbalanced network where its work is; span medians are exact.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/balanced_partition.hpp>
#include <pipeprop/sync/cost_measurement.hpp>

#include "unit/timing_relations.hpp"

#include <cblas.h>
#include <functional>
#include <limits>
#include <random>
#include <span>
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
    pipeprop::balanced_partition_workspace reused_tables;
    for (int trial = 0; trial < 200; ++trial) {
        const std::size_t L = 1 + trial % 9, p = 1 + (trial / 9) % L;
        std::vector<double> c(L);
        for (auto& v : c) v = static_cast<double>(rng() % 20) / 4.0;
        const auto pts = pipeprop::balanced_partition(c, p);
        REQUIRE(pts.size() == p - 1);
        // the form with reused tables (grown and shrunk from trial to trial) gives the same cut
        const auto reused = pipeprop::balanced_partition(std::span<const double>(c), p, reused_tables);
        CHECK(std::vector<std::size_t>(reused.begin(), reused.end()) == pts);
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
    CHECK(pipeprop::balanced_partition({1, 1, 1, 1}, 4) == std::vector<std::size_t>{1, 2, 3});
    CHECK(pipeprop::balanced_partition({5, 1, 1, 1, 1, 1}, 2) == std::vector<std::size_t>{1});
    CHECK_THROWS_WITH(pipeprop::balanced_partition({1, 2}, 3), Catch::Contains("2 layers into 3"));
    CHECK_THROWS_AS(pipeprop::balanced_partition({1, -2}, 1), std::invalid_argument);
}

using timing_relations::clearly_more;
using timing_relations::measure_until;

TEST_CASE("measured layer costs follow the layers' work", "[sync][costs]") {
    openblas_set_num_threads(1);
    // 0 relu [128] | 1 dense 128 -> 128 (16384 MACs per sample) | 2 relu | 3 dense 128 -> 512 (65536 MACs: 4x).
    using net = pp::network<pp::shape<128>, pp::relu, pp::dense<128>, pp::relu, pp::dense<512>>;
    auto relations = [](const std::vector<ps::layer_costs>& lc) {
        return clearly_more(lc[3].forward, lc[1].forward, 2.0) &&
               clearly_more(lc[3].backward_input, lc[1].backward_input, 2.0) &&
               clearly_more(lc[3].backward_weight, lc[1].backward_weight, 2.0) &&
               clearly_more(lc[1].forward, lc[2].forward, 2.0);
    };
    const auto lc = measure_until([] { return ps::measure_layer_costs<net>(16, 9); }, relations);
    REQUIRE(lc.size() == 4);
    INFO("dense 128->128: F " << lc[1].forward << " B " << lc[1].backward_input << " W " << lc[1].backward_weight
                              << "; dense 128->512: F " << lc[3].forward << " B " << lc[3].backward_input << " W "
                              << lc[3].backward_weight << "; relu F " << lc[2].forward);
    // The 4x layer costs clearly more than the 1x one in every pass (the margin, 2x, is half the FLOP ratio) ...
    CHECK(clearly_more(lc[3].forward, lc[1].forward, 2.0));
    CHECK(clearly_more(lc[3].backward_input, lc[1].backward_input, 2.0));
    CHECK(clearly_more(lc[3].backward_weight, lc[1].backward_weight, 2.0));
    // ... an element-wise relu clearly less than a GEMM over the same width ...
    CHECK(clearly_more(lc[1].forward, lc[2].forward, 2.0));
    // ... and a parameter-free layer has no backward-p2 at all.
    CHECK(lc[0].backward_weight == 0);
    CHECK(lc[2].backward_weight == 0);
}

TEST_CASE("the first layer's skipped backward-p1 costs (almost) nothing", "[sync][costs]") {
    openblas_set_num_threads(1);
    // Layer 0 is the first layer (its input gradient is not needed: measure_layer_costs skips it, as on a first
    // stage); layer 2 is the same GEMM shape with its input gradient computed.
    using net = pp::network<pp::shape<256>, pp::dense<256>, pp::relu, pp::dense<256>>;
    auto relations = [](const std::vector<ps::layer_costs>& lc) {
        return clearly_more(lc[2].backward_input, lc[0].backward_input, 4.0);
    };
    const auto lc = measure_until([] { return ps::measure_layer_costs<net>(16, 9); }, relations);
    REQUIRE(lc.size() == 3);
    INFO("layer 0 (first, p1 skipped): B " << lc[0].backward_input << "; layer 2: B " << lc[2].backward_input);
    CHECK(clearly_more(lc[2].backward_input, lc[0].backward_input, 4.0));
    CHECK(lc[0].backward_weight > 0.25 * lc[2].backward_weight);  // its p2 is not skipped
}

TEST_CASE("measured stage costs follow the stages' work", "[sync][costs]") {
    openblas_set_num_threads(1);
    using net = pp::network<pp::shape<128>, pp::relu, pp::dense<128>, pp::relu, pp::dense<512>>;
    const auto cut = pp::partition_at(4, {2});  // [relu, dense 128->128] | [relu, dense 128->512 (4x), loss]
    auto relations = [](const std::vector<ps::stage_costs>& sc) {
        return clearly_more(sc[1].forward, sc[0].forward, 2.0) &&
               clearly_more(sc[1].backward_input, sc[0].backward_input, 2.0) &&
               clearly_more(sc[1].backward_weight, sc[0].backward_weight, 2.0) &&
               clearly_more(sc[1].backward_fused, sc[0].backward_fused, 2.0);
    };
    const auto sc = measure_until([&] { return ps::measure_stage_costs<net>(cut, 16, 4, 4); }, relations);
    REQUIRE(sc.size() == 2);
    INFO("stage 0: F " << sc[0].forward << " B " << sc[0].backward_input << " W " << sc[0].backward_weight << " BW "
                       << sc[0].backward_fused << "; stage 1: F " << sc[1].forward << " B " << sc[1].backward_input
                       << " W " << sc[1].backward_weight << " BW " << sc[1].backward_fused);
    CHECK(clearly_more(sc[1].forward, sc[0].forward, 2.0));
    CHECK(clearly_more(sc[1].backward_input, sc[0].backward_input, 2.0));
    CHECK(clearly_more(sc[1].backward_weight, sc[0].backward_weight, 2.0));
    CHECK(clearly_more(sc[1].backward_fused, sc[0].backward_fused, 2.0));
    CHECK(sc[0].optimizer >= 0);
    CHECK_THROWS_AS(ps::measure_stage_costs<net>(cut, 4, 3, 1), std::invalid_argument);
}

TEST_CASE("measured costs cut a deliberately unbalanced network where the work is", "[sync][costs][partition]") {
    openblas_set_num_threads(1);
    // Four relus (256 element-wise ops per sample and pass each) then equal GEMMs (65536 MACs per sample and pass
    // each, 256x the relu's work). Worked out by hand: with r the cost of a relu and G that of a GEMM (4 r < G),
    //   relu x4, G, G    into 2 stages: {5} (max 4r + G); {4} gives 2G, and the layer-count cut {3} gives r + 2G;
    //   relu x4, G, G, G into 3 stages: {5, 6} (max 4r + G); every other cut puts two GEMMs in one stage, as the
    //   layer-count cuts {2, 4} and {3, 5} do.
    using net2 = pp::network<pp::shape<256>, pp::relu, pp::relu, pp::relu, pp::relu, pp::dense<256>, pp::dense<256>>;
    using net3 = pp::network<pp::shape<256>, pp::relu, pp::relu, pp::relu, pp::relu, pp::dense<256>, pp::dense<256>,
                             pp::dense<256>>;
    auto totals = [](const std::vector<ps::layer_costs>& lc) {
        std::vector<double> t;
        for (const auto& c : lc) t.push_back(c.total());
        return t;
    };
    const std::vector<std::size_t> want2{5}, want3{5, 6};
    CHECK(pipeprop::balanced_partition(std::vector<double>(6, 1.0), 2) != want2);  // equal costs would not give it
    CHECK(pipeprop::balanced_partition(std::vector<double>(7, 1.0), 3) != want3);
    const auto p2 = measure_until([&] { return pipeprop::balanced_partition(totals(ps::measure_layer_costs<net2>(16, 9)), 2); },
                                  [&](const std::vector<std::size_t>& p) { return p == want2; });
    CHECK(p2 == want2);
    const auto p3 = measure_until([&] { return pipeprop::balanced_partition(totals(ps::measure_layer_costs<net3>(16, 9)), 3); },
                                  [&](const std::vector<std::size_t>& p) { return p == want3; });
    CHECK(p3 == want3);
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
