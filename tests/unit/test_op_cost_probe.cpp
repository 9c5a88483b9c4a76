// The one direct cost probe of both engines (op_cost_probe.hpp, measure_op_costs): on a deliberately lopsided
// network the heavy range (8x the MACs and parameters of the light one) costs clearly more in every op kind it has;
// a parameter-free range has no backward-p2, update or parameter copy at all; a first layer reading token ids gets
// valid ids; argument errors throw std::invalid_argument naming the function that was called (the probe and both
// thin functions over it, pb::measure_tick_costs and sync::measure_layer_costs); the median is exact.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/op_cost_probe.hpp>
#include <pipeprop/pb/lane_plan.hpp>
#include <pipeprop/sync/cost_measurement.hpp>

#include "unit/timing_relations.hpp"

#include <cblas.h>
#include <vector>

namespace pp = pipeprop;

namespace {
using timing_relations::clearly_more;
using timing_relations::measure_until;

// 0 relu [128] (first range, parameter-free) | 1 dense 128 -> 128 (16384 MACs per sample, 16512 parameters) |
// 2 dense 128 -> 1024 (131072 MACs, 132096 parameters: 8x) | 3 relu [1024] (parameter-free).
using lopsided = pp::network<pp::shape<128>, pp::relu, pp::dense<128>, pp::dense<1024>, pp::relu>;
const std::vector<pp::layer_range> one_layer_each{{0, 1}, {1, 2}, {2, 3}, {3, 4}};
}  // namespace

TEST_CASE("measure_op_costs: the heavy range costs more in every op kind, parameter-free ranges have no p2",
          "[costs][probe]") {
    openblas_set_num_threads(1);
    auto heavier = [](const std::vector<pp::op_costs>& c) {
        const pp::op_costs &light = c[1], &heavy = c[2];
        return clearly_more(heavy.forward, light.forward, 2.0) &&
               clearly_more(heavy.backward_input, light.backward_input, 2.0) &&
               clearly_more(heavy.backward_weight, light.backward_weight, 2.0) &&
               clearly_more(heavy.backward_fused, light.backward_fused, 2.0) &&
               clearly_more(heavy.update, light.update, 2.0) &&
               clearly_more(heavy.parameter_copy, light.parameter_copy, 2.0);
    };
    const auto c = measure_until(
        [] {
            return pp::measure_op_costs<lopsided>(one_layer_each, 16, {.rounds = 9, .seed = 1, .slots = {1, 3, 2, 1}});
        },
        heavier);
    REQUIRE(c.size() == 4);
    const pp::op_costs &light = c[1], &heavy = c[2];
    INFO("dense 128->128: F " << light.forward << " B " << light.backward_input << " W " << light.backward_weight
                              << " BW " << light.backward_fused << " U " << light.update << " copy "
                              << light.parameter_copy << "; dense 128->1024: F " << heavy.forward << " B "
                              << heavy.backward_input << " W " << heavy.backward_weight << " BW "
                              << heavy.backward_fused << " U " << heavy.update << " copy " << heavy.parameter_copy);
    CHECK(clearly_more(heavy.forward, light.forward, 2.0));
    CHECK(clearly_more(heavy.backward_input, light.backward_input, 2.0));
    CHECK(clearly_more(heavy.backward_weight, light.backward_weight, 2.0));
    CHECK(clearly_more(heavy.backward_fused, light.backward_fused, 2.0));
    CHECK(clearly_more(heavy.update, light.update, 2.0));  // 132096 parameters: timed on 2^16, scaled
    CHECK(clearly_more(heavy.parameter_copy, light.parameter_copy, 2.0));
    for (const pp::op_costs& k : c) {
        CHECK(k.forward > 0);
        CHECK(k.backward_fused > 0);
    }
    // Parameter-free ranges: no backward-p2, no update, nothing to copy (exactly 0, not a small time).
    for (std::size_t s : {0u, 3u}) {
        CHECK(c[s].backward_weight == 0);
        CHECK(c[s].update == 0);
        CHECK(c[s].parameter_copy == 0);
    }
    CHECK(light.backward_weight > 0);
    CHECK(light.update > 0);
}

TEST_CASE("measure_op_costs: a multi-layer cut, and token ids where the first layer reads them", "[costs][probe]") {
    openblas_set_num_threads(1);
    // Two stages of two layers: [relu, dense 128] | [dense 1024, relu] (the heavy one).
    const auto cut = pp::partition_at(4, {2});
    const auto c = measure_until(
        [&] { return pp::measure_op_costs<lopsided>(cut, 8, {.rounds = 5, .seed = 1, .slots = {}}); },
        [](const auto& k) { return clearly_more(k[1].backward_fused, k[0].backward_fused, 2.0); });
    REQUIRE(c.size() == 2);
    CHECK(clearly_more(c[1].backward_fused, c[0].backward_fused, 2.0));
    CHECK(c[0].backward_weight > 0);  // the dense layer of the first stage
    // token_embedding throws std::out_of_range on an invalid id: the probe feeds it token 0.
    using lm = pp::network<pp::shape<6>, pp::token_embedding<11, 8>, pp::rms_norm<>>;
    std::vector<pp::op_costs> t;
    REQUIRE_NOTHROW(t = pp::measure_op_costs<lm>({{0, 1}, {1, 2}}, 3, {.rounds = 3, .seed = 1, .slots = {}}));
    CHECK(t[0].backward_weight > 0);  // the embedding's rows
    CHECK(t[0].forward > 0);
}

TEST_CASE("cost probes: argument errors name the function called", "[costs][probe]") {
    using Catch::Contains;
    const std::vector<pp::layer_range> gap{{0, 1}, {2, 4}}, short_cut{{0, 2}}, empty{};
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(one_layer_each, 0),
                      Contains("pipeprop::measure_op_costs") && Contains("b = 0"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(one_layer_each, 2, {.rounds = 0, .seed = 1, .slots = {}}),
                      Contains("pipeprop::measure_op_costs") && Contains("0 rounds"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(gap, 2), Contains("pipeprop::measure_op_costs: stage 1"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(short_cut, 2), Contains("layers dropped"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(empty, 2), Contains("pipeprop::measure_op_costs"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(one_layer_each, 2, {.slots = {1, 1}}),
                      Contains("2 slot counts for 4 ranges"));
    CHECK_THROWS_WITH(pp::measure_op_costs<lopsided>(one_layer_each, 2, {.slots = {1, 0, 1, 1}}),
                      Contains("range 1 needs >= 1 activation slot"));
    CHECK_THROWS_AS(pp::measure_op_costs<lopsided>(gap, 2), std::invalid_argument);

    CHECK_THROWS_WITH(pipeprop::pb::measure_tick_costs<lopsided>(one_layer_each, 0),
                      Contains("pipeprop::pb::measure_tick_costs"));
    CHECK_THROWS_WITH(pipeprop::pb::measure_tick_costs<lopsided>(one_layer_each, 1, 0),
                      Contains("pipeprop::pb::measure_tick_costs"));
    CHECK_THROWS_WITH(pipeprop::pb::measure_tick_costs<lopsided>(gap, 1),
                      Contains("pipeprop::pb::measure_tick_costs: stage 1"));
    CHECK_THROWS_WITH(pipeprop::sync::measure_layer_costs<lopsided>(0), Contains("pipeprop::sync::measure_layer_costs"));
    CHECK_THROWS_WITH(pipeprop::sync::measure_layer_costs<lopsided>(4, 0),
                      Contains("pipeprop::sync::measure_layer_costs"));
}

TEST_CASE("the probes' median", "[costs][probe]") {
    CHECK(pp::detail::median({3, 1, 2}) == 2);
    CHECK(pp::detail::median({4, 1, 3, 2}) == 2.5);
    CHECK(pp::detail::median({7}) == 7);
    CHECK(pp::detail::median({}) == 0);
}
