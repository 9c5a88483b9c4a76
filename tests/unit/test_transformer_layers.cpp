// The LLaMA-like transformer leaves (token_embedding, token_linear, rms_norm, swiglu_gate, swiglu):
// - backward-p1 / backward-p2 against central finite differences in double (pipeprop::testing::check_gradients) on
//   odd shapes: L = 1, L = 7 (not a multiple of any SIMD width), D = 12 and D = 7 (not powers of two), b = 1 and 3;
// - forward, input gradient and parameter gradients against torch.autograd on the same weights and inputs
//   (tests/golden/make_transformer_layers.py; float64 within 1e-10, float32 within 1e-5, relative per tensor);
// - token_embedding: a repeated token accumulates every occurrence in p2; bad ids throw std::out_of_range;
// - swiglu equals token_linear<2H, false> - swiglu_gate - token_linear<D, false> on the same parameter block;
// - the layers compose into a network and run through layer_stack; no heap allocation after setup.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <pipeprop/pipeprop.hpp>
#include <random>
#include <string>
#include <vector>
#include <xtensor/xnpy.hpp>

#include "unit/allocation_counter.hpp"

namespace pp = pipeprop;
using pp::shape;

namespace {

template <class Layer>
void check_layer_gradients(std::size_t b) {
    const auto r = pp::testing::check_gradients(Layer{}, {.batch = b});
    INFO(r.report);
    CHECK(r.passed);
}

// Every layer on L = 1 and L = 7 tokens, D = 12 and D = 7 features, b = 1 and b = 3.
template <template <class> class Make>
void check_shapes() {
    for (std::size_t b : {1u, 3u}) {
        check_layer_gradients<Make<shape<1, 12>>>(b);
        check_layer_gradients<Make<shape<7, 12>>>(b);
        check_layer_gradients<Make<shape<7, 7>>>(b);
    }
}

template <class S>
using linear_with_bias = pp::token_linear<5>::bind<double, S>;
template <class S>
using linear_without_bias = pp::token_linear<11, false>::bind<double, S>;
template <class S>
using rms = pp::rms_norm<>::bind<double, S>;
template <class S>
using swiglu20 = pp::swiglu<20>::bind<double, S>;
template <class S>
using swiglu3 = pp::swiglu<3>::bind<double, S>;

}  // namespace

TEST_CASE("token_embedding: backward-p1 assigns zeros and backward-p2 matches finite differences",
          "[layers][transformer][token_embedding]") {
    for (std::size_t b : {1u, 3u}) {
        check_layer_gradients<pp::token_embedding<5, 12>::bind<double, shape<1>>>(b);
        check_layer_gradients<pp::token_embedding<5, 12>::bind<double, shape<7>>>(b);
        check_layer_gradients<pp::token_embedding<13, 7>::bind<double, shape<7>>>(b);
    }
}

TEST_CASE("token_linear: backward-p1 and backward-p2 match finite differences", "[layers][transformer][token_linear]") {
    check_shapes<linear_with_bias>();
    check_shapes<linear_without_bias>();
}

TEST_CASE("rms_norm: backward-p1 and backward-p2 match finite differences", "[layers][transformer][rms_norm]") {
    check_shapes<rms>();
    // A larger eps (in the type) changes the function and is still differentiated correctly.
    check_layer_gradients<pp::rms_norm<std::ratio<1, 10>>::bind<double, shape<7, 12>>>(3);
}

TEST_CASE("swiglu and swiglu_gate: backward-p1 and backward-p2 match finite differences",
          "[layers][transformer][swiglu]") {
    check_shapes<swiglu20>();
    check_shapes<swiglu3>();
    for (std::size_t b : {1u, 3u}) {
        check_layer_gradients<pp::swiglu_gate::bind<double, shape<1, 18>>>(b);
        check_layer_gradients<pp::swiglu_gate::bind<double, shape<7, 14>>>(b);
    }
}

TEST_CASE("check_gradients: an integer-input layer whose backward-p1 leaves dx unassigned fails",
          "[testing][transformer]") {
    struct embedding_without_p1 : pp::token_embedding_layer<double, shape<3>, 4, 2> {
        void backward_input(std::span<const double>, const double*, const double*, const double*, double*, std::size_t,
                            const pp::no_stash&, pp::no_workspace&) const {}
    };
    static_assert(pp::layer<embedding_without_p1>);
    CHECK_FALSE(pp::testing::check_gradients(embedding_without_p1{}).passed);
}

TEST_CASE("token_embedding: a repeated token id accumulates every occurrence in backward-p2",
          "[layers][transformer][token_embedding]") {
    using layer_t = pp::token_embedding<6, 3>::bind<double, shape<4>>;
    const layer_t l;
    // Two samples; token 2 appears three times in sample 0 and once in sample 1, token 5 once.
    const std::vector<double> ids{2, 5, 2, 2, 0, 2, 1, 3};
    const std::size_t b = 2;
    std::vector<double> w(layer_t::parameter_count), y(b * 4 * 3), dy(b * 4 * 3);
    l.init_parameters(w, 3);
    for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>(i + 1);  // distinct rows
    pp::no_stash st;
    pp::no_workspace ws;
    l.forward(w, ids.data(), y.data(), b, st, ws);
    for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::size_t j = 0; j < 3; ++j) CHECK(y[i * 3 + j] == w[static_cast<std::size_t>(ids[i]) * 3 + j]);

    std::vector<double> dw(layer_t::parameter_count, 0.5);  // p2 adds to what is there
    l.backward_weight(dw, ids.data(), y.data(), dy.data(), b, st, ws);
    for (std::size_t v = 0; v < 6; ++v)
        for (std::size_t j = 0; j < 3; ++j) {
            double expected = 0.5;
            for (std::size_t i = 0; i < ids.size(); ++i)
                if (static_cast<std::size_t>(ids[i]) == v) expected += dy[i * 3 + j];
            CHECK(dw[v * 3 + j] == expected);
        }
    // Token 2, feature 0: rows 0, 2, 3 and 5 of dy (1 + 7 + 10 + 16), stated explicitly.
    CHECK(dw[2 * 3 + 0] == 0.5 + 1 + 7 + 10 + 16);
    CHECK(dw[4 * 3 + 0] == 0.5);  // unused token: untouched

    std::vector<double> dx(ids.size(), 99.0);
    l.backward_input(w, ids.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    CHECK(dx == std::vector<double>(ids.size(), 0.0));
}

TEST_CASE("token_embedding: an id that is not an integer in [0, Vocab) throws std::out_of_range naming it",
          "[layers][transformer][token_embedding]") {
    using layer_t = pp::token_embedding<6, 3>::bind<float, shape<4>>;
    const layer_t l;
    std::vector<float> w(layer_t::parameter_count, 1.0f), y(2 * 4 * 3);
    pp::no_stash st;
    pp::no_workspace ws;
    auto run = [&](float bad) {
        std::vector<float> ids{0, 1, 2, 3, 4, 5, 0, 1};
        ids[6] = bad;  // sample 1, position 2
        l.forward(w, ids.data(), y.data(), 2, st, ws);
    };
    using Catch::Matchers::Contains;
    CHECK_THROWS_AS(run(6.0f), std::out_of_range);
    CHECK_THROWS_WITH(run(6.0f), Contains("sample 1, position 2") && Contains("6.0") && Contains("[0, 6)"));
    CHECK_THROWS_WITH(run(-1.0f), Contains("-1.0"));
    CHECK_THROWS_AS(run(2.5f), std::out_of_range);
    CHECK_THROWS_AS(run(std::numeric_limits<float>::quiet_NaN()), std::out_of_range);
    CHECK_THROWS_AS(run(std::numeric_limits<float>::infinity()), std::out_of_range);
    CHECK_NOTHROW(run(5.0f));
}

// ---- torch.autograd reference (tests/golden/transformer_layers, made by tests/golden/make_transformer_layers.py) ----

namespace {

constexpr std::size_t golden_b = 3, golden_l = 7, golden_d = 12;

template <class T>
std::vector<T> load_golden(const std::string& name, const std::string& file, const char* suffix) {
    const std::string path =
        std::string(PIPEPROP_GOLDEN_DIR) + "/transformer_layers/" + name + "/" + file + "_" + suffix + ".npy";
    const auto a = xt::load_npy<T>(path);
    return std::vector<T>(a.begin(), a.end());
}

/// max |a - ref| / max |ref| (the measure of check_gradients, per tensor).
template <class T>
double relative_error(const std::vector<T>& a, const std::vector<T>& ref) {
    double num = 0, den = 1e-30;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(ref[i])));
        den = std::max(den, std::abs(static_cast<double>(ref[i])));
    }
    return num / den;
}

/// Runs Layer (bound to T) on the case's input and parameters (assembled in the order `parameters` names them, which
/// is the layer's block order) and compares y, dx and every parameter gradient with torch's.
template <class Layer>
void check_against_torch(const std::string& name, const std::vector<std::string>& parameters, bool token_input,
                         const char* suffix, double tolerance) {
    using T = typename Layer::value_type;
    INFO("case " << name << ", " << suffix);
    const Layer l;
    const std::size_t b = golden_b;
    const auto x = load_golden<T>(name, token_input ? "ids" : "x", suffix);
    const auto dy = load_golden<T>(name, "dy", suffix);
    const auto y_ref = load_golden<T>(name, "y", suffix);
    std::vector<T> w;
    std::vector<std::size_t> sizes;
    for (const auto& p : parameters) {
        const auto v = load_golden<T>(name, p, suffix);
        w.insert(w.end(), v.begin(), v.end());
        sizes.push_back(v.size());
    }
    REQUIRE(x.size() == b * Layer::input_shape::size);
    REQUIRE(dy.size() == b * Layer::output_shape::size);
    REQUIRE(y_ref.size() == b * Layer::output_shape::size);
    REQUIRE(w.size() == Layer::parameter_count);
    if constexpr (requires { Layer::parameter_tensors(); }) {
        const auto tensors = Layer::parameter_tensors();
        REQUIRE(tensors.size() == parameters.size());
        for (std::size_t i = 0; i < tensors.size(); ++i) {
            CHECK(tensors[i].name == parameters[i]);
            CHECK(tensors[i].size() == sizes[i]);
        }
    }

    auto st = pp::make_stash(l, b);
    auto ws = pp::make_workspace(l, b);
    std::vector<T> y(y_ref.size()), dx(x.size(), T(123));
    l.forward(w, x.data(), y.data(), b, st, ws);
    CHECK(relative_error(y, y_ref) <= tolerance);
    l.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    if (token_input)
        CHECK(dx == std::vector<T>(x.size(), T(0)));
    else
        CHECK(relative_error(dx, load_golden<T>(name, "dx", suffix)) <= tolerance);

    std::vector<T> dw(w.size(), T(0));
    pp::call_backward_weight(l, std::span<const T>(w), std::span<T>(dw), x.data(), y.data(), dy.data(), b, st, ws);
    std::size_t offset = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        INFO("gradient of " << parameters[i]);
        const auto ref = load_golden<T>(name, "grad_" + parameters[i], suffix);
        REQUIRE(ref.size() == sizes[i]);
        const std::vector<T> got(dw.begin() + static_cast<std::ptrdiff_t>(offset),
                                 dw.begin() + static_cast<std::ptrdiff_t>(offset + sizes[i]));
        const double e = relative_error(got, ref);
        INFO("relative error " << e);
        CHECK(e <= tolerance);
        offset += sizes[i];
    }
}

template <class T>
void check_all_against_torch(const char* suffix, double tolerance) {
    using seq = shape<golden_l, golden_d>;
    check_against_torch<pp::token_embedding<11, golden_d>::bind<T, shape<golden_l>>>("embedding", {"table"}, true,
                                                                                     suffix, tolerance);
    check_against_torch<pp::token_linear<5>::bind<T, seq>>("linear", {"weight", "bias"}, false, suffix, tolerance);
    check_against_torch<pp::token_linear<11, false>::bind<T, seq>>("lm_head", {"weight"}, false, suffix, tolerance);
    check_against_torch<pp::rms_norm<>::bind<T, seq>>("rms_norm", {"scale"}, false, suffix, tolerance);
    check_against_torch<pp::swiglu<20>::bind<T, seq>>("swiglu", {"w_gate", "w_up", "w_down"}, false, suffix, tolerance);
}

}  // namespace

TEST_CASE("transformer layers agree with torch.autograd in float64 (1e-10)", "[layers][transformer][golden]") {
    check_all_against_torch<double>("f64", 1e-10);
}

TEST_CASE("transformer layers agree with torch.autograd in float32 (1e-5)", "[layers][transformer][golden]") {
    check_all_against_torch<float>("f32", 1e-5);
}

TEST_CASE("swiglu equals token_linear<2H, false> - swiglu_gate - token_linear<D, false> on the same parameters",
          "[layers][transformer][swiglu]") {
    using in_t = shape<7, 12>;
    using fused_t = pp::swiglu<9>::bind<double, in_t>;
    using gate_up_t = pp::token_linear<18, false>::bind<double, in_t>;
    using gate_t = pp::swiglu_gate::bind<double, shape<7, 18>>;
    using down_t = pp::token_linear<12, false>::bind<double, shape<7, 9>>;
    static_assert(fused_t::parameter_count == gate_up_t::parameter_count + down_t::parameter_count);
    const fused_t fused;
    const gate_up_t gate_up;
    const gate_t gate;
    const down_t down;
    const std::size_t b = 3, n = b * 7;
    std::mt19937_64 rng(5);
    std::vector<double> w(fused_t::parameter_count), x(n * 12), dy(n * 12);
    fused.init_parameters(w, 9);
    for (auto& v : x) v = pp::uniform<double>(rng, -2, 2);
    for (auto& v : dy) v = pp::uniform<double>(rng, -1, 1);
    const std::span<const double> w_gate_up(w.data(), gate_up_t::parameter_count);
    const std::span<const double> w_down(w.data() + gate_up_t::parameter_count, down_t::parameter_count);

    auto st = pp::make_stash(fused, b);
    auto ws = pp::make_workspace(fused, b);
    std::vector<double> y(n * 12), dx(n * 12), dw(w.size(), 0.0);
    fused.forward(w, x.data(), y.data(), b, st, ws);
    fused.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    fused.backward_weight(w, dw, x.data(), y.data(), dy.data(), b, st, ws);

    pp::no_stash ns;
    pp::no_workspace nw;
    std::vector<double> gu(n * 18), h(n * 9), y3(n * 12), dh(n * 9), dgu(n * 18), dx3(n * 12), dw3(w.size(), 0.0);
    gate_up.forward(w_gate_up, x.data(), gu.data(), b, ns, nw);
    gate.forward({}, gu.data(), h.data(), b, ns, nw);
    down.forward(w_down, h.data(), y3.data(), b, ns, nw);
    down.backward_input(w_down, h.data(), y3.data(), dy.data(), dh.data(), b, ns, nw);
    down.backward_weight(std::span<double>(dw3).subspan(gate_up_t::parameter_count), h.data(), y3.data(), dy.data(), b,
                         ns, nw);
    gate.backward_input({}, gu.data(), h.data(), dh.data(), dgu.data(), b, ns, nw);
    gate_up.backward_input(w_gate_up, x.data(), gu.data(), dgu.data(), dx3.data(), b, ns, nw);
    gate_up.backward_weight(std::span<double>(dw3).subspan(0, gate_up_t::parameter_count), x.data(), gu.data(),
                            dgu.data(), b, ns, nw);
    CHECK(relative_error(y, y3) <= 1e-13);
    CHECK(relative_error(dx, dx3) <= 1e-13);
    CHECK(relative_error(dw, dw3) <= 1e-13);
}

TEST_CASE("swiglu: backward-p2 uses the weights it is given (the weighted p2 form), like backward-p1",
          "[layers][transformer][swiglu]") {
    using layer_t = pp::swiglu<5>::bind<double, shape<3, 4>>;
    const layer_t l;
    const std::size_t b = 2;
    std::mt19937_64 rng(8);
    std::vector<double> w(layer_t::parameter_count), x(b * 12), dy(b * 12), y(b * 12);
    l.init_parameters(w, 1);
    for (auto& v : x) v = pp::uniform<double>(rng, -1, 1);
    for (auto& v : dy) v = pp::uniform<double>(rng, -1, 1);
    auto st = l.make_stash(b);
    auto ws = l.make_workspace(b);
    l.forward(w, x.data(), y.data(), b, st, ws);
    std::vector<double> dw_before(w.size(), 0.0), dw_after(w.size(), 0.0);
    l.backward_weight(w, dw_before, x.data(), y.data(), dy.data(), b, st, ws);
    // The weights change after the forward (as under PB): p1 and p2 both follow the weights they are given; the
    // W_gate / W_up gradients scale with W_down (dh = dY W_down), the W_down gradient does not depend on it.
    std::vector<double> w_new = w;
    for (std::size_t i = layer_t::gate_up_count; i < w_new.size(); ++i) w_new[i] *= 1.5;
    l.backward_weight(w_new, dw_after, x.data(), y.data(), dy.data(), b, st, ws);
    for (std::size_t i = 0; i < layer_t::gate_up_count; ++i) CHECK(dw_after[i] == Approx(1.5 * dw_before[i]));
    for (std::size_t i = layer_t::gate_up_count; i < w.size(); ++i) CHECK(dw_after[i] == dw_before[i]);
    CHECK(l.stash_bytes(st) == sizeof(layer_t::stash_type) + b * 3 * 2 * 5 * sizeof(double));
}

namespace {
// A tiny LLaMA-like stack without attention and residuals (those are other components): embedding, pre-norm,
// feed-forward, final norm, LM head.
using tiny_lm = pp::network<shape<7>, pp::token_embedding<11, 12>, pp::rms_norm<>, pp::swiglu<20>, pp::rms_norm<>,
                            pp::token_linear<11, false>>;
}  // namespace

TEST_CASE("transformer layers compose into a network and run through layer_stack", "[network][transformer]") {
    using stack_t = pp::layer_stack<tiny_lm, double>;
    static_assert(std::is_same_v<stack_t::output_shape, shape<7, 11>>);
    static_assert(stack_t::parameter_count == 11 * 12 + 12 + 3 * 20 * 12 + 12 + 11 * 12);
    stack_t stack;
    std::vector<double> w(stack_t::parameter_count);
    stack.init_parameters(w, 4);
    const std::size_t b = 3;
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    std::mt19937_64 rng(2);
    for (std::size_t i = 0; i < b * 7; ++i) act.input()[i] = static_cast<double>(rng() % 11);
    stack.forward(w, act, b, ws);
    for (std::size_t i = 0; i < b * 7 * 11; ++i) act.output_gradient()[i] = pp::uniform<double>(rng, -1, 1);
    std::vector<double> dw_fused(w.size(), 0.0), dw_split(w.size(), 0.0);
    stack.backward(w, dw_fused, act, b, ws);
    stack.backward_input(w, act, b, ws);
    stack.backward_weight(w, dw_split, act, b, ws);
    CHECK(dw_fused == dw_split);
    CHECK(std::all_of(act.input_gradient(), act.input_gradient() + b * 7, [](double v) { return v == 0.0; }));
    CHECK(std::any_of(dw_fused.begin(), dw_fused.end(), [](double v) { return v != 0.0; }));
    // A bad token id is reported through the stack.
    act.input()[4] = 11;
    CHECK_THROWS_AS(stack.forward(w, act, b, ws), std::out_of_range);
}

TEST_CASE("transformer layers: no heap allocation after make_stash / make_workspace", "[allocation][transformer]") {
    const std::size_t b = 3;
    using stack_t = pp::layer_stack<tiny_lm, float>;
    stack_t stack;
    std::vector<float> w(stack_t::parameter_count), dw(stack_t::parameter_count, 0.0f);
    stack.init_parameters(w, 4);
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    for (std::size_t i = 0; i < b * 7; ++i) act.input()[i] = static_cast<float>((i * 5) % 11);
    for (std::size_t i = 0; i < b * 7 * 11; ++i) act.output_gradient()[i] = 0.01f * static_cast<float>(i % 13);
    // token_linear alone, with bias (not in tiny_lm).
    using linear_t = pp::token_linear<5>::bind<float, shape<7, 12>>;
    const linear_t lin;
    std::vector<float> lw(linear_t::parameter_count, 0.1f), ldw(linear_t::parameter_count), lx(b * 84, 0.5f),
        ly(b * 35), ldy(b * 35, 0.25f), ldx(b * 84);
    pp::no_stash ns;
    pp::no_workspace nw;
    // Warm-up (BLAS may set up buffers on first use), then count. All snapshots first: Catch2 may allocate.
    stack.forward(w, act, b, ws);
    stack.backward(w, dw, act, b, ws);
    const auto before = allocation_counter::snapshot();
    for (int step = 0; step < 3; ++step) {
        stack.forward(w, act, b, ws);
        stack.backward_input(w, act, b, ws);
        stack.backward_weight(w, dw, act, b, ws);
        stack.backward(w, dw, act, b, ws);
        lin.forward(lw, lx.data(), ly.data(), b, ns, nw);
        lin.backward_input(lw, lx.data(), ly.data(), ldy.data(), ldx.data(), b, ns, nw);
        lin.backward_weight(ldw, lx.data(), ly.data(), ldy.data(), b, ns, nw);
    }
    const auto after = allocation_counter::snapshot();
    CHECK(after.operator_new == before.operator_new);
    CHECK(after.c_level == before.c_level);
}
