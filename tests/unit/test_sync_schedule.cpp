// Schedules as data (sync/schedule.hpp, sync/schedule_analysis.hpp): every generator gives a valid, deadlock-free
// op list for any p and m (m < p included); 2BP off is 2BP on with each W merged into its B; activation slots equal
// the schedules' in-flight counts (1F1B: p - s, GPipe: m, ZB-H1: <= p, ZB-H2: <= 2p - 1); boundary-channel
// capacities bound the messages in flight under any timing; validate rejects broken lists with a precise message.
#include <catch2/catch.hpp>

#include <pipeprop/sync/schedule.hpp>
#include <pipeprop/sync/schedule_analysis.hpp>
#include <pipeprop/sync/simulator.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace ps = pipeprop::sync;

namespace {
constexpr ps::schedule_kind all_kinds[] = {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b,
                                           ps::schedule_kind::zb_h1, ps::schedule_kind::zb_h2};

// The 2BP-off list obtained from a 2BP-on list by dropping the W's and fusing each B into a BW.
std::vector<ps::op> fuse(const std::vector<ps::op>& l) {
    std::vector<ps::op> r;
    for (auto o : l) {
        if (o.kind == ps::op_kind::backward_weight) continue;
        if (o.kind == ps::op_kind::backward_input) o.kind = ps::op_kind::backward_fused;
        r.push_back(o);
    }
    return r;
}
}  // namespace

TEST_CASE("every generator gives a valid schedule for any p and m, m < p included", "[sync][schedule]") {
    for (auto k : all_kinds)
        for (bool two : {false, true})
            for (std::size_t p = 1; p <= 7; ++p)
                for (std::size_t m = 1; m <= 13; ++m) {
                    const auto sc = ps::make_schedule(k, p, m, two);
                    INFO(sc.label() << " p=" << p << " m=" << m);
                    REQUIRE(sc.stages == p);
                    REQUIRE(sc.micro_batches == m);
                    REQUIRE_NOTHROW(ps::validate(sc));
                    for (const auto& l : sc.ops) CHECK(l.size() == (two ? 3 * m : 2 * m));
                    const auto order = ps::global_order(sc);
                    CHECK(order.size() == (two ? 3 : 2) * m * p);
                }
}

TEST_CASE("2BP off runs p2 inside the op of p1: the 2BP-on list with each W fused into its B", "[sync][schedule]") {
    for (auto k : all_kinds)
        for (std::size_t p : {1u, 2u, 3u, 5u})
            for (std::size_t m : {1u, 2u, 4u, 7u}) {
                const auto on = ps::make_schedule(k, p, m, true);
                const auto off = ps::make_schedule(k, p, m, false);
                for (std::size_t s = 0; s < p; ++s) CHECK(fuse(on.ops[s]) == off.ops[s]);
            }
    // ZB-H1 without the split backward is exactly 1F1B.
    for (std::size_t p : {2u, 4u})
        for (std::size_t m : {1u, 3u, 8u}) CHECK(ps::zb_h1(p, m, false).ops == ps::one_f_one_b(p, m, false).ops);
}

TEST_CASE("schedule shapes: GPipe all F then all B (then all W); 1F1B warm-up p-1-s", "[sync][schedule]") {
    const auto g = ps::gpipe(3, 4, true);
    using ps::op_kind;
    for (const auto& l : g.ops)
        for (std::size_t i = 0; i < 12; ++i) {
            CHECK(l[i].kind == (i < 4 ? op_kind::forward : i < 8 ? op_kind::backward_input : op_kind::backward_weight));
            CHECK(l[i].micro_batch == i % 4);
        }
    const auto f = ps::one_f_one_b(4, 6, false);
    for (std::size_t s = 0; s < 4; ++s) {
        std::size_t leading_f = 0;
        while (f.ops[s][leading_f].kind == op_kind::forward) ++leading_f;
        CHECK(leading_f == 4 - s);  // p - 1 - s warm-up F's plus the first steady-state F
    }
    // 1F1B + 2BP: all W's after the stage's last B (2BP-paper §3).
    const auto f2 = ps::one_f_one_b(4, 6, true);
    for (const auto& l : f2.ops)
        for (std::size_t i = 0; i < l.size(); ++i) CHECK((l[i].kind == op_kind::backward_weight) == (i >= 12));
}

TEST_CASE("activation slots: 1F1B holds p - s, GPipe m, ZB-H1 <= p, ZB-H2 <= 2p - 1", "[sync][schedule][memory]") {
    for (std::size_t p = 1; p <= 6; ++p)
        for (std::size_t m = 1; m <= 12; ++m) {
            INFO("p=" << p << " m=" << m);
            const auto f = ps::peak_in_flight(ps::one_f_one_b(p, m, false));
            const auto g = ps::peak_in_flight(ps::gpipe(p, m, true));
            const auto h1 = ps::peak_in_flight(ps::zb_h1(p, m, true));
            const auto h2 = ps::peak_in_flight(ps::zb_h2(p, m, true));
            for (std::size_t s = 0; s < p; ++s) {
                CHECK(f[s] == std::min(p - s, m));
                CHECK(g[s] == m);
                CHECK(h1[s] <= std::min(p, m));
                CHECK(h2[s] <= std::min(2 * p - 1, m));
            }
            if (m >= 2 * p - 1) CHECK(*std::max_element(h2.begin(), h2.end()) == 2 * p - 1);
            if (m >= p) CHECK(*std::max_element(h1.begin(), h1.end()) == p);
        }
}

TEST_CASE("slot plan: two micro-batches in flight never share a slot", "[sync][schedule][memory]") {
    for (auto k : all_kinds)
        for (bool two : {false, true}) {
            const auto sc = ps::make_schedule(k, 4, 9, two);
            const auto plan = ps::slot_plan(sc);
            for (std::size_t s = 0; s < 4; ++s) {
                std::vector<long> owner(plan[s].slots, -1);
                for (std::size_t i = 0; i < sc.ops[s].size(); ++i) {
                    const auto o = sc.ops[s][i];
                    const std::size_t slot = plan[s].slot_of[i];
                    REQUIRE(slot < plan[s].slots);
                    if (o.kind == ps::op_kind::forward) {
                        CHECK(owner[slot] == -1);
                        owner[slot] = static_cast<long>(o.micro_batch);
                    } else {
                        CHECK(owner[slot] == static_cast<long>(o.micro_batch));
                    }
                    if (ps::releases_micro_batch(o)) owner[slot] = -1;
                }
            }
        }
}

TEST_CASE("channel capacities bound the messages in flight under random timings", "[sync][schedule][channel]") {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> u(0.05, 3.0);
    for (auto k : all_kinds)
        for (bool two : {false, true})
            for (std::size_t p : {2u, 3u, 5u})
                for (std::size_t m : {1u, 3u, 8u}) {
                    const auto sc = ps::make_schedule(k, p, m, two);
                    const auto caps = ps::channel_capacities(sc);
                    REQUIRE(caps.size() == p - 1);
                    std::vector<std::size_t> seen_f(p - 1, 0), seen_b(p - 1, 0);
                    for (int trial = 0; trial < 40; ++trial) {
                        std::vector<ps::stage_costs> costs(p);
                        for (auto& c : costs) c = {u(rng), u(rng), u(rng), -1, 0};
                        const auto r = ps::simulate(sc, costs);
                        // events: +1 at a send (end of F on s / p1 on s+1), -1 at the receive (start on the peer)
                        for (std::size_t b = 0; b + 1 < p; ++b)
                            for (bool fwd : {true, false}) {
                                std::vector<std::pair<double, int>> ev;
                                for (const auto& sp : r.spans) {
                                    const bool is_f = sp.kind == ps::span_kind::forward;
                                    const bool is_p1 = sp.kind == ps::span_kind::backward_input ||
                                                       sp.kind == ps::span_kind::backward_fused;
                                    if (fwd && is_f && sp.stage == b) ev.push_back({sp.end, +1});
                                    if (fwd && is_f && sp.stage == b + 1) ev.push_back({sp.start, -1});
                                    if (!fwd && is_p1 && sp.stage == b + 1) ev.push_back({sp.end, +1});
                                    if (!fwd && is_p1 && sp.stage == b) ev.push_back({sp.start, -1});
                                }
                                // at equal times the receive cannot precede its own send: sends first
                                std::sort(ev.begin(), ev.end(), [](auto x, auto y) {
                                    return x.first < y.first || (x.first == y.first && x.second > y.second);
                                });
                                long cur = 0, best = 0;
                                for (auto [t, d] : ev) best = std::max(best, cur += d);
                                auto& seen = fwd ? seen_f[b] : seen_b[b];
                                seen = std::max(seen, static_cast<std::size_t>(best));
                            }
                    }
                    for (std::size_t b = 0; b + 1 < p; ++b) {
                        INFO(sc.label() << " p=" << p << " m=" << m << " boundary " << b);
                        CHECK(seen_f[b] <= caps[b].forward);
                        CHECK(seen_b[b] <= caps[b].backward);
                        CHECK(caps[b].forward >= 1);
                        CHECK(caps[b].backward >= 1);
                        CHECK(caps[b].forward <= m);
                        CHECK(caps[b].backward <= m);
                    }
                }
    // GPipe: the upstream stage may run all m forwards before the downstream one consumes any.
    CHECK(ps::channel_capacities(ps::gpipe(2, 6, false))[0].forward == 6);
}

TEST_CASE("validate rejects broken op lists with a message naming the stage and op", "[sync][schedule][errors]") {
    using ps::op_kind;
    auto sc = ps::one_f_one_b(2, 2, true);
    auto broken = sc;
    broken.ops[1].pop_back();  // W1 of stage 1 missing
    CHECK_THROWS_WITH(ps::validate(broken), Catch::Contains("stage 1, micro-batch 1") && Catch::Contains("missing"));
    broken = sc;
    broken.ops[0].push_back({op_kind::forward, 1});
    CHECK_THROWS_WITH(ps::validate(broken), Catch::Contains("stage 0 runs F1 twice"));
    broken = sc;
    std::swap(broken.ops[0].front(), broken.ops[0].back());  // W before F
    CHECK_THROWS_WITH(ps::validate(broken), Catch::Contains("order"));
    broken = sc;
    broken.ops[0].push_back({op_kind::backward_fused, 0});
    CHECK_THROWS_WITH(ps::validate(broken), Catch::Contains("twice") || Catch::Contains("fused"));
    // Deadlock: stage 0 waits for B0 before sending F1, stage 1 waits for F1 before running B0.
    ps::schedule dl{ps::schedule_kind::gpipe, false, 2, 2, {}};
    dl.ops = {
        {{op_kind::forward, 0}, {op_kind::backward_fused, 0}, {op_kind::forward, 1}, {op_kind::backward_fused, 1}},
        {{op_kind::forward, 0}, {op_kind::forward, 1}, {op_kind::backward_fused, 0}, {op_kind::backward_fused, 1}}};
    CHECK_THROWS_WITH(ps::validate(dl), Catch::Contains("deadlock") && Catch::Contains("stage 0"));
    CHECK_THROWS_AS(ps::gpipe(0, 3, true), std::invalid_argument);
    CHECK_THROWS_WITH(ps::zb_h1(2, 0, true), Catch::Contains("m = 0"));
    CHECK_THROWS_WITH(ps::parse_schedule_kind("zb-h3"), Catch::Contains("zb-h3") && Catch::Contains("1f1b"));
    CHECK(ps::parse_schedule_kind("1f1b") == ps::schedule_kind::one_f_one_b);
}
