// bench/step_cost.hpp: FLOP and memory traffic of one training step, from the layer types alone (used by
// bench/roofline.cpp). The one place where the per-layer-kind formulas are written down.
//
// Counting rules (per sample; a step at micro-batch size b is b times the per-sample cost of the layers plus the
// parameter-sized update once):
//   - FLOP: arithmetic of the layer's math as its header documents it, not of the implementation's extra work
//     (no im2col / col2im, no copies): a multiply-add is 2, every add, multiply, subtraction, division, square root,
//     exp, max or comparison is 1; per-group or per-channel scalars (a mean's division, a 1 / sqrt) are left out
//     where they are O(channels) next to O(elements).
//   - Bytes: the compulsory traffic of each pass taken alone: every operand the pass must read is read once, every
//     result written once (sizeof(T) per element; parameters and their gradients included; an accumulated gradient
//     is read and written; a stash index of max_pool2d is 4 bytes). Nothing is assumed to stay in cache between
//     passes or layers, and nothing the implementation adds (im2col columns, boundary copies) is counted. A view
//     (flatten) costs nothing.
//   - Update: momentum SGD (optim/momentum_update.hpp, heavy-ball, no weight decay, the sequential trainer's default):
//     v = m v + g, w = w - lr v: 4 FLOP per parameter; reads w, v, g and writes w, v, and the trainer zeroes the
//     gradient block before the backward (at b = 1 each layer's part, before its p2): 6 sizeof(T) bytes per
//     parameter. At b = 1 a layer that fuses its p2 into
//     the update (dense: layer_stack::backward_momentum_update) neither stores nor zeroes a gradient: its p2 reads
//     x and dy only, and the update reads w, v and writes w, v: 4 sizeof(T) bytes per parameter.
//   - Loss: softmax cross-entropy over K classes: forward 4 K (max, subtract, exp, sum) + 1 (log), p1 2 K.
//
// Per layer kind (T = sizeof(value)):
//   conv2d   C -> OC, K x K, output OH x OW; P = C K K, Q = OH OW, X = C H W, Wt = OC P + OC (weights + bias)
//            forward 2 OC P Q + OC Q (bias)          bytes (X + Wt + OC Q) T
//            p1      2 OC P Q                        bytes (OC Q + OC P + X) T
//            p2      2 OC P Q + OC Q (bias gradient) bytes (OC Q + X + 2 Wt) T
//            These FLOP are the direct convolution's (what every side of bench/side_by_side.sh is credited with).
//            As run (step_cost_of's as_run), a layer in the Winograd form (layers/conv2d_winograd.hpp; N = tiles):
//            forward 32 N C OC + 32 N C + 28 N OC + 42 C OC, p1 32 N C OC + 32 N OC + 24 N C + 42 C OC,
//            p2 32 N C OC + 32 N C + 18 N OC + 65 C OC + OC Q (the 16 GEMMs, input / output / output-gradient
//            transforms per tile and channel, the weights' transforms once per call: counted per sample, as at b = 1).
//   dense    In -> Out; Wt = In Out + Out
//            forward 2 In Out + Out                  bytes (In + Wt + Out) T
//            p1      2 In Out                        bytes (Out + In Out + In) T
//            p2      2 In Out + Out                  bytes (Out + In + 2 Wt) T
//   group_norm  N elements, C channels (affine: gamma, beta)
//            forward 8 N (mean 1, variance 3, normalize 2, affine 2)            bytes (2 N + 2 C) T
//            p1      10 N (dxhat 1, two sums 3, xhat again 2, dx 4)             bytes (3 N + C) T
//            p2      5 N (xhat again 2, dgamma 2, dbeta 1)                     bytes (2 N + 4 C) T
//   relu     N elements: forward N (max), p1 N (select)              bytes 2 N T, 3 N T
//   max_pool2d  window S x S, out O = C OH OW, in X: forward (S^2 - 1) O comparisons, bytes (X + O) T + 4 O
//            p1 O adds into a zeroed dx                              bytes (O + X) T + 4 O
//   global_avg_pool  C channels of H W: forward C H W + C, bytes (C H W + C) T; p1 C H W, bytes (C + C H W) T
//   flatten  0 (a view)
//   Nodes of a flattened network (network.hpp): carried<L, C> and on_shortcut<L, F, C> cost L plus copying the
//   elements they carry past it (2 C, 2 (F + C) elements read + written, forward and p1), where a run of
//   consecutive carried nodes of one C copies its C elements once (runtime_layer_stack: forward at the run's last
//   node, p1 at its first, so the step counts them there only); block_fork<Main, C>:
//   forward copies M to 2 M (3 M + 2 C elements), p1 adds the two gradients (M FLOP, 3 M + 2 C elements);
//   block_add<Main, C>: forward M FLOP (3 M + 2 C elements), p1 copies (3 M + 2 C elements).
// A node of any other kind does not compile (a static_assert names this file): add its formulas here first.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "pipeprop/graph/block_add.hpp"
#include "pipeprop/graph/block_fork.hpp"
#include "pipeprop/graph/carried.hpp"
#include "pipeprop/graph/on_shortcut.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/layers/conv2d.hpp"
#include "pipeprop/layers/dense.hpp"
#include "pipeprop/layers/flatten.hpp"
#include "pipeprop/layers/global_avg_pool.hpp"
#include "pipeprop/layers/group_norm.hpp"
#include "pipeprop/layers/max_pool2d.hpp"
#include "pipeprop/layers/relu.hpp"

namespace pipeprop::bench {

/// FLOP and bytes (see the file comment) of one pass of one node for one sample.
struct pass_cost {
    double flops = 0;
    double bytes = 0;
    constexpr pass_cost& operator+=(const pass_cost& o) noexcept {
        flops += o.flops;
        bytes += o.bytes;
        return *this;
    }
};

/// The passes of one node for one sample: forward, backward-p1, backward-p2 (zero for a parameter-free node).
struct node_cost {
    std::string_view kind;
    pass_cost forward, backward_input, backward_weight;
    /// FLOP of forward, p1, p2 as the layer runs them where its algorithm does other arithmetic than the formulas
    /// credit (a Winograd convolution); negative: the formulas' FLOP.
    double run_flops[3] = {-1, -1, -1};
    [[nodiscard]] constexpr double run(int pass, double credited) const noexcept {
        return run_flops[pass] >= 0 ? run_flops[pass] : credited;
    }
};

namespace detail {

/// Bytes of n elements of T.
template <class T>
constexpr double bytes_of(double n) noexcept {
    return n * double(sizeof(T));
}

// One overload per layer kind, chosen by template argument deduction from a pointer to the node type (a layer that
// derives from a kind, e.g. train::fan_in_uniform_init<...>::bind, is that kind).

template <class T, class In, std::size_t OC, std::size_t K, std::size_t S, std::size_t P>
constexpr node_cost kind_cost(const conv2d_layer<T, In, OC, K, S, P>*) noexcept {
    using L = conv2d_layer<T, In, OC, K, S, P>;
    const double oc = OC, patch = L::patch, q = L::pixels, x = In::size, wt = double(L::parameter_count);
    const double mac = 2 * oc * patch * q;
    node_cost c{"conv2d",
                {mac + oc * q, bytes_of<T>(x + wt + oc * q)},
                {mac, bytes_of<T>(oc * q + oc * patch + x)},
                {mac + oc * q, bytes_of<T>(oc * q + x + 2 * wt)}};
    if constexpr (L::winograd) {
        const double n = L::winograd_conv::tiles, ch = L::channels, gemm = 32 * n * ch * oc, weights = ch * oc;
        c.run_flops[0] = gemm + 32 * n * ch + 28 * n * oc + 42 * weights;
        c.run_flops[1] = gemm + 32 * n * oc + 24 * n * ch + 42 * weights;
        c.run_flops[2] = gemm + 32 * n * ch + 18 * n * oc + 65 * weights + oc * q;
    }
    return c;
}

template <class T, class In, std::size_t Out>
constexpr node_cost kind_cost(const dense_layer<T, In, Out>*) noexcept {
    const double in = In::size, out = Out, wt = in * out + out;
    return {"dense",
            {2 * in * out + out, bytes_of<T>(in + wt + out)},
            {2 * in * out, bytes_of<T>(out + in * out + in)},
            {2 * in * out + out, bytes_of<T>(out + in + 2 * wt)}};
}

template <class T, class In, std::size_t G, bool Affine>
constexpr node_cost kind_cost(const group_norm_layer<T, In, G, Affine>*) noexcept {
    using L = group_norm_layer<T, In, G, Affine>;
    const double n = In::size, c = L::channels, affine = Affine ? 1.0 : 0.0;
    return {"group_norm",
            {8 * n, bytes_of<T>(2 * n + 2 * c * affine)},
            {10 * n, bytes_of<T>(3 * n + c * affine)},
            {5 * n * affine, bytes_of<T>((2 * n + 4 * c) * affine)}};
}

template <class T, class Shape>
constexpr node_cost kind_cost(const relu_layer<T, Shape>*) noexcept {
    const double n = Shape::size;
    return {"relu", {n, bytes_of<T>(2 * n)}, {n, bytes_of<T>(3 * n)}, {}};
}

template <class T, class In, std::size_t Size, std::size_t Stride>
constexpr node_cost kind_cost(const max_pool2d_layer<T, In, Size, Stride>*) noexcept {
    using L = max_pool2d_layer<T, In, Size, Stride>;
    const double o = double(L::output_shape::size), x = In::size;
    return {"max_pool2d",
            {(double(Size * Size) - 1) * o, bytes_of<T>(x + o) + 4 * o},
            {o, bytes_of<T>(o + x) + 4 * o},
            {}};
}

template <class T, class In>
constexpr node_cost kind_cost(const global_avg_pool_layer<T, In>*) noexcept {
    const double x = In::size, c = global_avg_pool_layer<T, In>::channels;
    return {"global_avg_pool", {x + c, bytes_of<T>(x + c)}, {x, bytes_of<T>(c + x)}, {}};
}

template <class T, class Shape>
constexpr node_cost kind_cost(const flatten_layer<T, Shape>*) noexcept {
    return {"flatten", {}, {}, {}};
}

template <class T, class Main, std::size_t C>
constexpr node_cost kind_cost(const block_fork<T, Main, C>*) noexcept {
    const double m = Main::size, moved = bytes_of<T>(3 * m + 2 * double(C));
    return {"block_fork", {0, moved}, {m, moved}, {}};
}

template <class T, class Main, std::size_t C>
constexpr node_cost kind_cost(const block_add<T, Main, C>*) noexcept {
    const double m = Main::size, moved = bytes_of<T>(3 * m + 2 * double(C));
    return {"block_add", {m, moved}, {0, moved}, {}};
}

/// True when one of the kind_cost overloads above takes N.
template <class N>
concept has_kind_cost = requires(const N* n) { kind_cost(n); };

template <class N>
struct wrapped_cost {
    static_assert(has_kind_cost<N>,
                  "bench/step_cost.hpp has no FLOP / byte formula for this layer kind: add one there.");
    static constexpr node_cost value = [] {
        if constexpr (has_kind_cost<N>)
            return kind_cost(static_cast<const N*>(nullptr));
        else
            return node_cost{};
    }();
};
/// carried<L, C>: L plus the C carried elements copied forward and back.
template <class L, std::size_t C>
struct wrapped_cost<carried<L, C>> {
    static constexpr node_cost value = [] {
        node_cost c = wrapped_cost<L>::value;
        c.forward.bytes += bytes_of<typename L::value_type>(2 * double(C));
        c.backward_input.bytes += bytes_of<typename L::value_type>(2 * double(C));
        return c;
    }();
};
/// on_shortcut<L, F, C>: L plus the F front and C carried elements copied forward and back.
template <class L, std::size_t F, std::size_t C>
struct wrapped_cost<on_shortcut<L, F, C>> {
    static constexpr node_cost value = [] {
        node_cost c = wrapped_cost<L>::value;
        c.forward.bytes += bytes_of<typename L::value_type>(2 * double(F + C));
        c.backward_input.bytes += bytes_of<typename L::value_type>(2 * double(F + C));
        return c;
    }();
};

}  // namespace detail

/// Per-sample cost of node N of a flattened network (a layer, or a graph node wrapping one).
template <class N>
inline constexpr node_cost node_cost_of = detail::wrapped_cost<N>::value;

/// FLOP and bytes of one training step of Net (value type T) at micro-batch size b, as the sequential trainer runs
/// it: forward of every node, the loss, backward-p1 of every node but the first (whose input gradient nobody reads),
/// backward-p2 of every node with parameters, the momentum-SGD update (see the file comment).
struct step_cost {
    pass_cost forward, backward_input, backward_weight, loss, update;
    [[nodiscard]] constexpr pass_cost total() const noexcept {
        pass_cost t = forward;
        t += backward_input;
        t += backward_weight;
        t += loss;
        t += update;
        return t;
    }
};

/// as_run: FLOP as the layers run them (node_cost::run_flops) instead of the formulas' credit.
template <class Net, class T = float>
constexpr step_cost step_cost_of(std::size_t b, bool as_run = false) noexcept {
    using stack = layer_stack<Net, T>;
    step_cost s;
    const double n = double(b);
    double fused = 0;  // parameters of layers whose p2 is fused into the update (b = 1)
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack::layer_count>>([&](auto I) {
        node_cost c = node_cost_of<typename stack::template layer_type<I>>;
        if (as_run) {
            c.forward.flops = c.run(0, c.forward.flops);
            c.backward_input.flops = c.run(1, c.backward_input.flops);
            c.backward_weight.flops = c.run(2, c.backward_weight.flops);
        }
        constexpr std::size_t carry = layer_facts_of<typename stack::template layer_type<I>>.carry_size;
        if constexpr (carry != 0 && I + 1 < stack::layer_count)  // the next node carries the same part: no copy here
            if constexpr (layer_facts_of<typename stack::template layer_type<I + 1>>.carry_size == carry)
                c.forward.bytes -= detail::bytes_of<T>(2 * double(carry));
        if constexpr (carry != 0 && I > 0)  // the previous node carries the same part: its p1 copies it
            if constexpr (layer_facts_of<typename stack::template layer_type<I - 1>>.carry_size == carry)
                c.backward_input.bytes -= detail::bytes_of<T>(2 * double(carry));
        s.forward += {n * c.forward.flops, n * c.forward.bytes};
        if (I > 0) s.backward_input += {n * c.backward_input.flops, n * c.backward_input.bytes};
        s.backward_weight += {n * c.backward_weight.flops, n * c.backward_weight.bytes};
        if constexpr (stack::template fuses_momentum_update<I>) {
            if (b == 1) {  // no gradient read and written by p2
                const double wt = double(stack::template layer_type<I>::parameter_count);
                s.backward_weight.bytes -= detail::bytes_of<T>(2 * wt);
                fused += wt;
            }
        }
    });
    const double k = double(stack::output_shape::size), p = double(stack::parameter_count);
    s.loss = {n * (4 * k + 1 + 2 * k), detail::bytes_of<T>(n * 2 * k)};
    s.update = {4 * p, detail::bytes_of<T>(6 * (p - fused) + 4 * fused)};
    return s;
}

}  // namespace pipeprop::bench
