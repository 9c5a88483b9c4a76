// pipeprop/layers/causal_self_attention.hpp: LLaMA-style causal multi-head self-attention with rotary position
// embedding (RoPE), one layer under the contract of layer_concept.hpp: input [b, L, D] -> output [b, L, D].
//
// Attention: Vaswani et al. 2017, "Attention Is All You Need", §3.2 (scaled dot-product, multi-head); causal mask as
// in decoder-only language models. RoPE: Su et al. 2021, "RoFormer", §3.4 (eq. 34: rotation of 2-D feature pairs by
// position-dependent angles, theta_i = base^(-2i / d)). LLaMA: Touvron et al. 2023, §2.2 (RoPE on queries and keys,
// no biases in the projections).
//
// Pairing convention of RoPE: HALF-SPLIT ("rotate_half", as in GPT-NeoX and Hugging Face's LLaMA), not the
// interleaved pairs of Meta's original LLaMA code: within one head of dimension d, feature i is paired with feature
// i + d/2 (0 <= i < d/2) and rotated by the angle m theta_i at position m (0-based):
//     out[i]       = x[i] cos(m theta_i) - x[i + d/2] sin(m theta_i)
//     out[i + d/2] = x[i + d/2] cos(m theta_i) + x[i] sin(m theta_i),      theta_i = base^(-2 i / d).
// (Interleaved weights convert to this convention by permuting the rows of W_q and W_k within each head.)
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/kernels/exp_kernels.hpp"
#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of causal_self_attention for one micro-batch of up to max_b samples (L tokens of D features, H heads):
/// everything both backward passes need, written by forward only (backward-p1 and backward-p2 read it).
///   qkv:           [max_b, L, 3 D]  per token: q (after RoPE) | k (after RoPE) | v, each D = H head_dim wide
///   probabilities: [max_b, H, L, L] the causal softmax P of every head (exactly 0 above the diagonal)
///   context:       [max_b, L, D]    context = P v, heads side by side (the input of the output projection)
template <class T>
struct causal_self_attention_stash {
    detail::aligned_buffer<T> qkv;  ///< [max_b, L, 3 D]: q and k after RoPE, and v, per token.
    /// [max_b, H, L, L]: the causal softmax P of every head (0 above the diagonal).
    detail::aligned_buffer<T> probabilities;
    detail::aligned_buffer<T> context;  ///< [max_b, L, D]: P v, heads side by side (input of the output projection).
    std::size_t max_b = 0;  ///< The micro-batch capacity the buffers were made for (make_stash).
};

/// Workspace of causal_self_attention (one per runner). The RoPE tables are constants filled by make_workspace; the
/// rest is scratch of one backward pass (nothing in it outlives the call that wrote it).
///   rope_cos, rope_sin: [L, head_dim / 2]  cos(m theta_i), sin(m theta_i), computed in double, rounded to T
///   context_gradient:   [max_b, L, D]      d context = dy W_o
///   qkv_gradient:       [max_b, L, 3 D]    dq | dk | dv per token (dq, dk w.r.t. the projections before RoPE)
///   score_gradient:     [L, L]             dP, then dS (gradient of the scaled scores) of one head of one sample
template <class T>
struct causal_self_attention_workspace {
    ///@{
    /// RoPE tables [L, head_dim / 2]: cos and sin of position * base^(-2 i / head_dim).
    detail::aligned_buffer<T> rope_cos;
    detail::aligned_buffer<T> rope_sin;
    ///@}
    /// [max_b, L, D]: d context = dy W_o (backward scratch).
    detail::aligned_buffer<T> context_gradient;
    detail::aligned_buffer<T> qkv_gradient;  ///< [max_b, L, 3 D]: dq | dk | dv per token (backward scratch).
    detail::aligned_buffer<T> score_gradient;  ///< Scratch of one head's score gradient [L, L] (backward).
    std::size_t max_b = 0;  ///< The micro-batch capacity the buffers were made for (make_workspace).
};

/// Causal multi-head self-attention with RoPE, bound form. Input x [b, L, D], output y [b, L, D] (L tokens of D
/// features per sample; Heads heads of head_dim = D / Heads features; RopeBase the base of the RoPE frequencies).
///
/// Parameter block (row-major, in this order, no biases as in LLaMA): W_q [D, D], W_k [D, D], W_v [D, D],
/// W_o [D, D] ("w_q", "w_k", "w_v", "w_o"; the first three form one [3 D, D] matrix W_qkv).
/// forward, per sample (heads h, tokens i, j):
///   [q | k | v] = x W_qkv^T                                   (one GEMM bL x 3D x D for the micro-batch)
///   q, k <- RoPE(q), RoPE(k) per head (half-split pairs, see the file comment)
///   S_h = q_h k_h^T / sqrt(head_dim); P_h[i, j] = softmax_j(S_h[i, j] for j <= i), 0 for j > i (causal; stable:
///   the row maximum is subtracted before exp)
///   context_h = P_h v_h ; y = context W_o^T                   (GEMM bL x D x D)
/// p1 (ASSIGNED): d context = dy W_o; dv_h = P_h^T d context_h; dP_h = d context_h v_h^T;
///   dS_h = P_h (dP_h - rowsum(P_h dP_h)) (element-wise); dq_h = dS_h k_h / sqrt(head_dim),
///   dk_h = dS_h^T q_h / sqrt(head_dim); dq, dk <- RoPE^T(dq), RoPE^T(dk); dx = [dq | dk | dv] W_qkv.
/// p2 (ADDED): dW_o += dy^T context; the p1 chain above up to [dq | dk | dv] is recomputed from the stash (p2 may
///   run before p1, or long after it, and p1 writes nothing that outlives its call), then dW_qkv += [dq|dk|dv]^T x.
///
/// Which weights: p1 and p2 use the w they are given (p2 has the weighted form of the contract, layer_concept.hpp:
/// its d context = dy W_o needs W_o): the backward's weights, the current ones in PB (docs/pb-semantics.md §1), the
/// step's in the synchronous schedules.
/// Cost in multiply-adds per sample: forward 4 L D^2 + 2 L^2 D, p1 4 L D^2 + 4 L^2 D, p2 5 L D^2 + 4 L^2 D (p2
/// repeats d context = dy W_o and the attention backward of p1: L D^2 + 4 L^2 D more than its two weight GEMMs).
/// These count the L x L products in full; they are computed in tiles of causal_tile rows that skip the blocks
/// above the diagonal (L^2 (1 / 2 + causal_tile / (2 L)) instead of L^2 per product).
/// Init: every matrix ~ U(-sqrt(3 / D), sqrt(3 / D)) (variance 1 / D), from the given seed.
/// Stash: (3 L D + H L^2 + L D) values per sample plus D^2 per micro-batch; stash_bytes reports it.
/// Static-asserts: the input is rank 2 [L, D]; Heads >= 1; RopeBase >= 2; D is divisible by Heads; head_dim is even
/// (RoPE rotates pairs).
/// Throws std::invalid_argument from forward / backward when b is outside [1, max_b] of the stash or workspace.
template <class T, class InputShape, std::size_t Heads, std::size_t RopeBase>
struct causal_self_attention_layer {
    static_assert(shape_type<InputShape> && InputShape::rank == 2,
                  "pipeprop::causal_self_attention: the input of a causal_self_attention layer must be rank 2 "
                  "[tokens, features] (a sequence of L tokens of D features each).");
    /// True when the input is rank 2 [L, D] (guards the derived sizes).
    static constexpr bool rank_ok = shape_type<InputShape> && InputShape::rank == 2;
    static_assert(Heads > 0, "pipeprop::causal_self_attention: the number of heads must be at least 1.");
    static_assert(RopeBase >= 2, "pipeprop::causal_self_attention: the RoPE base must be at least 2.");
    ///@{
    /// Sequence length L (tokens) and model width D (features per token) of the input [L, D].
    static constexpr std::size_t seq = detail::dim_or_one<InputShape, 0>();
    static constexpr std::size_t model = detail::dim_or_one<InputShape, 1>();
    ///@}
    // Vacuously true for a wrong rank or no heads, so that the sentences above are the only diagnostics.
    static_assert(!rank_ok || Heads == 0 || model % Heads == 0,
                  "pipeprop::causal_self_attention: the number of features D must be divisible by the number of "
                  "heads (each head gets D / Heads features).");
    static_assert(!rank_ok || Heads == 0 || model % Heads != 0 || (model / Heads) % 2 == 0,
                  "pipeprop::causal_self_attention: the head dimension D / Heads must be even (RoPE rotates pairs "
                  "of features).");

    ///@{
    /// Number of heads H and head width D / H.
    static constexpr std::size_t heads = Heads > 0 ? Heads : 1;
    static constexpr std::size_t head_dim = model / heads;
    ///@}
    /// Feature pairs per head that RoPE rotates (head_dim / 2).
    static constexpr std::size_t half = head_dim / 2;
    /// RoPE base (10000 in LLaMA): pair i rotates by position * base^(-2 i / head_dim).
    static constexpr std::size_t rope_base = RopeBase;
    /// Rows (queries) per tile of the L x L products: a tile of rows [r0, r1) multiplies only the r1 keys it may
    /// see, so about half of the L x L work above the causal diagonal is skipped (all of it but the diagonal tiles).
    static constexpr std::size_t causal_tile = 32;
    /// Row stride of the [L, 3 D] q | k | v matrices.
    static constexpr std::size_t qkv_stride = 3 * model;

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 4 * model * model;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = causal_self_attention_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = causal_self_attention_workspace<T>;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 4> parameter_tensors() {
        return {parameter_tensor{"w_q", 2, {model, model, 1, 1}}, parameter_tensor{"w_k", 2, {model, model, 1, 1}},
                parameter_tensor{"w_v", 2, {model, model, 1, 1}}, parameter_tensor{"w_o", 2, {model, model, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.qkv.assign(max_b * seq * qkv_stride, T(0));
        st.probabilities.assign(max_b * heads * seq * seq, T(0));
        st.context.assign(max_b * seq * model, T(0));
        return st;
    }
    /// \copydoc pipeprop::layer_contract::make_workspace
    [[nodiscard]] workspace_type make_workspace(std::size_t max_b) const {
        workspace_type ws;
        ws.max_b = max_b;
        ws.rope_cos.resize(seq * half);
        ws.rope_sin.resize(seq * half);
        for (std::size_t m = 0; m < seq; ++m)
            for (std::size_t i = 0; i < half; ++i) {
                const double theta =
                    std::pow(static_cast<double>(RopeBase), -2.0 * static_cast<double>(i) / double(head_dim));
                const double angle = static_cast<double>(m) * theta;
                ws.rope_cos[m * half + i] = static_cast<T>(std::cos(angle));
                ws.rope_sin[m * half + i] = static_cast<T>(std::sin(angle));
            }
        ws.context_gradient.assign(max_b * seq * model, T(0));
        ws.qkv_gradient.assign(max_b * seq * qkv_stride, T(0));
        ws.score_gradient.assign(seq * seq, T(0));
        return ws;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) +
               (st.qkv.size() + st.probabilities.size() + st.context.size()) * sizeof(T);
    }
    /// \copydoc pipeprop::layer_contract::workspace_bytes
    [[nodiscard]] std::size_t workspace_bytes(const workspace_type& ws) const noexcept {
        return sizeof(workspace_type) + (ws.rope_cos.size() + ws.rope_sin.size() + ws.context_gradient.size() +
                                         ws.qkv_gradient.size() + ws.score_gradient.size()) * sizeof(T);
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound = static_cast<T>(std::sqrt(3.0 / static_cast<double>(model)));
        for (std::size_t i = 0; i < parameter_count; ++i) w[i] = uniform<T>(rng, -bound, bound);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::causal_self_attention::forward");
        const std::size_t rows = b * seq;
        const T* w_o = w.data() + 3 * model * model;
        kernels::gemm(false, true, rows, qkv_stride, model, T(1), x, model, w.data(), model, T(0), st.qkv.data(),
                      qkv_stride);
        for (std::size_t r = 0; r < rows; ++r) {
            const std::size_t m = r % seq;
            T* token = st.qkv.data() + r * qkv_stride;
            for (std::size_t h = 0; h < heads; ++h) {
                rotate(token + h * head_dim, ws, m);           // q
                rotate(token + model + h * head_dim, ws, m);   // k
            }
        }
        const T scale = score_scale();
        for (std::size_t n = 0; n < b; ++n) {
            const T* qkv = st.qkv.data() + n * seq * qkv_stride;
            T* ctx = st.context.data() + n * seq * model;
            for (std::size_t h = 0; h < heads; ++h) {
                T* p = probabilities_of(st, n, h);
                const T* q = qkv + h * head_dim;
                const T* k = qkv + model + h * head_dim;
                const T* v = qkv + 2 * model + h * head_dim;
                // Row tile [r0, r1) needs keys / values 0 .. r1 - 1 only (causal).
                for (std::size_t r0 = 0; r0 < seq; r0 += causal_tile) {
                    const std::size_t r1 = std::min(seq, r0 + causal_tile), rows_t = r1 - r0;
                    kernels::gemm(false, true, rows_t, r1, head_dim, scale, q + r0 * qkv_stride, qkv_stride, k,
                                  qkv_stride, T(0), p + r0 * seq, seq);
                    for (std::size_t i = r0; i < r1; ++i) causal_softmax_row(p + i * seq, i);
                    kernels::gemm(false, false, rows_t, head_dim, r1, T(1), p + r0 * seq, seq, v, qkv_stride, T(0),
                                  ctx + r0 * model + h * head_dim, model);
                }
            }
        }
        kernels::gemm(false, true, rows, model, model, T(1), st.context.data(), model, w_o, model, T(0), y, model);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const {
        check_backward(b, st, ws, "pipeprop::causal_self_attention::backward_input");
        projection_gradient(w.data() + 3 * model * model, dy, b, st, ws);
        kernels::gemm(false, false, b * seq, model, qkv_stride, T(1), ws.qkv_gradient.data(), qkv_stride, w.data(),
                      model, T(0), dx, model);
    }

    /// \copydoc pipeprop::weighted_layer_contract::backward_weight
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b,
                         const stash_type& st, workspace_type& ws) const {
        check_backward(b, st, ws, "pipeprop::causal_self_attention::backward_weight");
        const std::size_t rows = b * seq;
        kernels::gemm(true, false, model, model, rows, T(1), dy, model, st.context.data(), model, T(1),
                      dw.data() + 3 * model * model, model);
        projection_gradient(w.data() + 3 * model * model, dy, b, st, ws);
        kernels::gemm(true, false, qkv_stride, model, rows, T(1), ws.qkv_gradient.data(), qkv_stride, x, model, T(1),
                      dw.data(), model);
    }

private:
    static T score_scale() noexcept { return static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

    static T* probabilities_of(stash_type& st, std::size_t n, std::size_t h) noexcept {
        return st.probabilities.data() + (n * heads + h) * seq * seq;
    }
    static const T* probabilities_of(const stash_type& st, std::size_t n, std::size_t h) noexcept {
        return st.probabilities.data() + (n * heads + h) * seq * seq;
    }

    static void check_backward(std::size_t b, const stash_type& st, const workspace_type& ws, const char* where) {
        detail::check_micro_batch(b, st.max_b, where);
        detail::check_micro_batch(b, ws.max_b, where);
    }

    /// RoPE of one head's features at position m, in place (half-split pairs).
    static void rotate(T* f, const workspace_type& ws, std::size_t m) noexcept {
        const T* c = ws.rope_cos.data() + m * half;
        const T* s = ws.rope_sin.data() + m * half;
        for (std::size_t i = 0; i < half; ++i) {
            const T a = f[i], e = f[i + half];
            f[i] = a * c[i] - e * s[i];
            f[i + half] = e * c[i] + a * s[i];
        }
    }
    /// The transposed rotation (the gradient through RoPE) of one head's features at position m, in place.
    static void rotate_back(T* g, const workspace_type& ws, std::size_t m) noexcept {
        const T* c = ws.rope_cos.data() + m * half;
        const T* s = ws.rope_sin.data() + m * half;
        for (std::size_t i = 0; i < half; ++i) {
            const T a = g[i], e = g[i + half];
            g[i] = a * c[i] + e * s[i];
            g[i + half] = e * c[i] - a * s[i];
        }
    }

    /// Row i of the scaled scores -> causal softmax probabilities, in place: entries j <= i are normalized
    /// (maximum subtracted before exp), entries j > i set to 0.
    static void causal_softmax_row(T* r, std::size_t i) noexcept {
        const T sum = kernels::exp_sum(r, kernels::row_max(r, i + 1), i + 1, r);
        kernels::scale_row(r, i + 1, T(1) / sum);
        std::fill(r + i + 1, r + seq, T(0));
    }

    /// ws.qkv_gradient [b, L, 3 D] = [dq | dk | dv] (dq, dk w.r.t. the projections before RoPE) from dy [b, L, D],
    /// the output projection w_o [D, D] and the stash; ws.context_gradient and ws.score_gradient are scratch.
    void projection_gradient(const T* w_o, const T* dy, std::size_t b, const stash_type& st,
                             workspace_type& ws) const {
        const std::size_t rows = b * seq;
        kernels::gemm(false, false, rows, model, model, T(1), dy, model, w_o, model, T(0), ws.context_gradient.data(),
                      model);
        const T scale = score_scale();
        T* ds = ws.score_gradient.data();
        for (std::size_t n = 0; n < b; ++n) {
            const T* qkv = st.qkv.data() + n * seq * qkv_stride;
            const T* dctx = ws.context_gradient.data() + n * seq * model;
            T* dqkv = ws.qkv_gradient.data() + n * seq * qkv_stride;
            for (std::size_t h = 0; h < heads; ++h) {
                const T* p = probabilities_of(st, n, h);
                const std::size_t off = h * head_dim;
                const T* dctx_h = dctx + off;
                const T* q_h = qkv + off;
                const T* k_h = qkv + model + off;
                const T* v_h = qkv + 2 * model + off;
                T* dq_h = dqkv + off;
                T* dk_h = dqkv + model + off;
                T* dv_h = dqkv + 2 * model + off;
                // Row tiles [r0, r1) of P, dP, dS have non-zeros in columns 0 .. r1 - 1 only; column tiles [j0, j1)
                // in rows j0 .. L - 1 only (causal).
                for (std::size_t r0 = 0; r0 < seq; r0 += causal_tile) {
                    const std::size_t r1 = std::min(seq, r0 + causal_tile), rows_t = r1 - r0;
                    // dP = d context_h v_h^T
                    kernels::gemm(false, true, rows_t, r1, head_dim, T(1), dctx_h + r0 * model, model, v_h,
                                  qkv_stride, T(0), ds + r0 * seq, seq);
                    // dS = P (dP - rowsum(P dP)) on and below the diagonal, 0 above it.
                    for (std::size_t i = r0; i < r1; ++i) {
                        const T* pr = p + i * seq;
                        T* dr = ds + i * seq;
                        T dot = 0;
                        for (std::size_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
                        for (std::size_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
                        std::fill(dr + i + 1, dr + seq, T(0));
                    }
                    // dq_h = dS k_h / sqrt(d)   (w.r.t. q after RoPE)
                    kernels::gemm(false, false, rows_t, head_dim, r1, scale, ds + r0 * seq, seq, k_h, qkv_stride, T(0),
                                  dq_h + r0 * qkv_stride, qkv_stride);
                }
                for (std::size_t j0 = 0; j0 < seq; j0 += causal_tile) {
                    const std::size_t j1 = std::min(seq, j0 + causal_tile), cols_t = j1 - j0, below = seq - j0;
                    // dv_h = P^T d context_h ; dk_h = dS^T q_h / sqrt(d)   (w.r.t. k after RoPE)
                    kernels::gemm(true, false, cols_t, head_dim, below, T(1), p + j0 * seq + j0, seq,
                                  dctx_h + j0 * model, model, T(0), dv_h + j0 * qkv_stride, qkv_stride);
                    kernels::gemm(true, false, cols_t, head_dim, below, scale, ds + j0 * seq + j0, seq,
                                  q_h + j0 * qkv_stride, qkv_stride, T(0), dk_h + j0 * qkv_stride, qkv_stride);
                }
            }
            for (std::size_t m = 0; m < seq; ++m) {
                T* token = dqkv + m * qkv_stride;
                for (std::size_t h = 0; h < heads; ++h) {
                    rotate_back(token + h * head_dim, ws, m);
                    rotate_back(token + model + h * head_dim, ws, m);
                }
            }
        }
    }
};

/// Causal self-attention spec for a network list: pipeprop::causal_self_attention<Heads, RopeBase = 10000>
/// (RopeBase: the base of the RoPE frequencies theta_i = RopeBase^(-2 i / head_dim); 10000 as in RoFormer and
/// LLaMA 1/2, 500000 as in LLaMA 3). Input and output [b, L, D].
/// Static-asserts Heads >= 1 and RopeBase >= 2 (a base of 1 would not rotate, 0 is undefined).
template <std::size_t Heads, std::size_t RopeBase = 10000>
struct causal_self_attention {
    static_assert(Heads > 0, "pipeprop::causal_self_attention: the number of heads must be at least 1.");
    static_assert(RopeBase >= 2, "pipeprop::causal_self_attention: the RoPE base must be at least 2.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = causal_self_attention_layer<T, InputShape, Heads, RopeBase>;
};

}  // namespace pipeprop
