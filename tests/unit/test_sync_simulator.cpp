// The schedule simulator (sync/simulator.hpp) against the closed forms of docs/schedules.md §2:
// GPipe / 1F1B bubble (p-1)(T_F+T_B+T_W) and ratio (p-1)/(m+p-1); GPipe + 2BP makespan (m+p-1)(T_F+T_B) + m T_W
// (p = 4, m = 4, equal times: 21T vs 18T); ZB-H1 bubble (p-1)(T_F+T_B-T_W); ZB-H2 bubble (p-1)(T_F+T_B-2T_W);
// in-flight counts; the effect of unequal stages and of a message latency.
#include <catch2/catch.hpp>

#include <pipeprop/sync/simulator.hpp>

#include <algorithm>
#include <random>
#include <vector>

namespace ps = pipeprop::sync;

namespace {
// Costs drawn on a grid of 1/8 so that every sum below is exact in double.
double draw(std::mt19937_64& rng, int lo, int hi) {
    return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(rng)) / 8.0;
}
}  // namespace

TEST_CASE("equal-time example of the reference doc: p = 4, m = 4, GPipe 21T, GPipe + 2BP 18T", "[sync][simulator]") {
    const double t = 1.5;
    const std::vector<ps::stage_costs> c{{t, t, t}};
    const auto g = ps::simulate(ps::gpipe(4, 4, false), c);
    const auto g2 = ps::simulate(ps::gpipe(4, 4, true), c);
    CHECK(g.makespan == 21 * t);
    CHECK(g2.makespan == 18 * t);
    CHECK(g.bubble_ratio == Approx(3.0 / 7.0));
    for (double idle : g.idle) CHECK(idle == 9 * t);
}

TEST_CASE("GPipe and 1F1B: bubble (p-1)(T_F+T_B+T_W) per stage, ratio (p-1)/(m+p-1)", "[sync][simulator]") {
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 60; ++trial) {
        const std::size_t p = 1 + trial % 6, m = 1 + (trial * 7) % 11;
        const ps::stage_costs c{draw(rng, 1, 24), draw(rng, 1, 24), draw(rng, 1, 24)};
        const double sum = c.forward + c.backward_input + c.backward_weight;
        for (auto k : {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b}) {
            const auto r = ps::simulate(ps::make_schedule(k, p, m, false), {c});
            INFO(ps::name(k) << " p=" << p << " m=" << m);
            CHECK(r.makespan == static_cast<double>(m + p - 1) * sum);
            for (double idle : r.idle) CHECK(idle == static_cast<double>(p - 1) * sum);
            CHECK(r.bubble_ratio == Approx(static_cast<double>(p - 1) / static_cast<double>(m + p - 1)));
        }
        // GPipe + 2BP (all p1 before all p2): (m + p - 1)(T_F + T_B) + m T_W.
        const auto g2 = ps::simulate(ps::gpipe(p, m, true), {c});
        CHECK(g2.makespan == static_cast<double>(m + p - 1) * (c.forward + c.backward_input) +
                                 static_cast<double>(m) * c.backward_weight);
        // 1F1B + 2BP lies between GPipe + 2BP and 1F1B.
        const auto f2 = ps::simulate(ps::one_f_one_b(p, m, true), {c});
        CHECK(f2.makespan <= static_cast<double>(m + p - 1) * sum);
        CHECK(f2.makespan >= g2.makespan);
    }
}

TEST_CASE("ZB-H1: bubble (p-1)(T_F+T_B-T_W) when T_W <= min(T_F, T_B) and m >= p", "[sync][simulator][zb]") {
    // The condition is where the handcrafted ZB-H1 order reaches the ZB-paper's figure (found with this simulator
    // over thousands of random cost triples; with T_W > T_F the lagging W's delay the F's of the steady state).
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 80; ++trial) {
        const std::size_t p = 2 + trial % 5, m = p + (trial * 5) % 9;
        const double tw = draw(rng, 1, 16);
        const ps::stage_costs c{tw + draw(rng, 0, 16), tw + draw(rng, 0, 16), tw};
        const auto r = ps::simulate(ps::zb_h1(p, m, true), {c});
        INFO("p=" << p << " m=" << m << " F=" << c.forward << " B=" << c.backward_input << " W=" << tw);
        for (double idle : r.idle) CHECK(idle == static_cast<double>(p - 1) * (c.forward + c.backward_input - tw));
        // Peak memory of 1F1B (p micro-batches on the worst stage).
        CHECK(*std::max_element(r.peak_in_flight.begin(), r.peak_in_flight.end()) == p);
    }
}

TEST_CASE("ZB-H2: bubble (p-1)(T_F+T_B-2T_W), zero when the three are equal (steady state)",
          "[sync][simulator][zb]") {
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 80; ++trial) {
        const std::size_t p = 2 + trial % 5, m = 2 * p - 1 + (trial * 3) % 7;
        const double tw = draw(rng, 1, 12);
        const double tf = tw + draw(rng, 0, 16), tb = 2 * tw + draw(rng, 0, 16);
        const double closed = static_cast<double>(p - 1) * (tf + tb - 2 * tw);
        INFO("p=" << p << " m=" << m << " F=" << tf << " B=" << tb << " W=" << tw);
        // One synchronous step: exact when 2 T_W <= T_B and T_W <= T_F (a single step cannot end before the last
        // stage's (p-1) T_F start-up plus its work, so smaller bubbles need the steady state below).
        const auto r = ps::simulate(ps::zb_h2(p, m, true), {{tf, tb, tw}});
        for (double idle : r.idle) CHECK(idle == closed);
        // Steady state (steps back to back, each stage starting the next step after its own optimizer op):
        // equal times give zero bubble, the ZB-paper's headline.
        const double t = tw;
        const auto eq = ps::simulate(ps::zb_h2(p, m, true), {{t, t, t}}, {.steps = 4, .barrier = false});
        CHECK(eq.step_time == 3 * static_cast<double>(m) * t);
        for (double idle : eq.idle) CHECK(idle == 0);
        // ... and in general max(0, (p-1)(T_F+T_B-2T_W)) when T_W <= T_F.
        const double tb2 = draw(rng, 1, 24);
        const auto st = ps::simulate(ps::zb_h2(p, m, true), {{tf, tb2, tw}}, {.steps = 4, .barrier = false});
        for (double idle : st.idle)
            CHECK(idle == Approx(std::max(0.0, static_cast<double>(p - 1) * (tf + tb2 - 2 * tw))).margin(1e-12));
        CHECK(*std::max_element(r.peak_in_flight.begin(), r.peak_in_flight.end()) == 2 * p - 1);
    }
}

TEST_CASE("in-flight micro-batches: 1F1B p - s on stage s, GPipe m", "[sync][simulator][memory]") {
    const auto f = ps::simulate(ps::one_f_one_b(5, 9, false), {{1, 2, 1}});
    const auto g = ps::simulate(ps::gpipe(5, 9, false), {{1, 2, 1}});
    for (std::size_t s = 0; s < 5; ++s) {
        CHECK(f.peak_in_flight[s] == 5 - s);
        CHECK(g.peak_in_flight[s] == 9);
    }
}

TEST_CASE("unequal stages: the slowest stage sets the pace; latency and optimizer cost add", "[sync][simulator]") {
    // Stage 1 twice as slow: GPipe makespan = F of stage 0 once + stage 1's m F's + ...; check the general bound
    // and that the slowest stage is never idle in the middle (its idle = makespan - its work).
    const std::vector<ps::stage_costs> c{{1, 1, 1}, {2, 2, 2}};
    const auto r = ps::simulate(ps::gpipe(2, 4, false), c);
    // stage 1: starts at 1 (after F0 of stage 0), runs 4 F's and 4 BW's back to back: ends at 1 + 4*2 + 4*4 = 25;
    // stage 0's last BW needs stage 1's BW3 (ends 25), then takes 2: 27.
    CHECK(r.makespan == 27);
    CHECK(r.idle[1] == 27 - 24);
    const auto lat = ps::simulate(ps::gpipe(2, 4, false), c, {.message_latency = 0.5});
    CHECK(lat.makespan == 27 + 2 * 0.5);  // one forward and one backward hop on the critical path
    std::vector<ps::stage_costs> with_opt = c;
    with_opt[0].optimizer = 3;
    with_opt[1].optimizer = 1;
    const auto o = ps::simulate(ps::gpipe(2, 4, false), with_opt);
    CHECK(o.makespan == 27 + 3);
    // Two steps with the barrier: the second step starts when both optimizer ops of the first have ended.
    const auto two = ps::simulate(ps::gpipe(2, 4, false), with_opt, {.steps = 2});
    CHECK(two.makespan == 2 * 30);
    CHECK(two.step_time == 30);
    CHECK_THROWS_AS(ps::simulate(ps::gpipe(3, 4, false), c), std::invalid_argument);
    CHECK_THROWS_WITH(ps::simulate(ps::gpipe(2, 4, false), {{1, -1, 1}}), Catch::Contains("negative cost"));
}
