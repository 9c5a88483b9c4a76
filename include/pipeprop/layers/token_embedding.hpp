// pipeprop/layers/token_embedding.hpp: token embedding (a learned lookup table from token ids to vectors), the input
// layer of a LLaMA-like transformer (Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models",
// arXiv 2302.13971, §2.2: the token embedding feeding the pre-normalized blocks; as torch.nn.Embedding).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Token embedding, bound form. Input [b, L] token ids, read as T values that hold exact integers (float holds every
/// integer below 2^24; layer_concept.hpp, "integer token inputs"); output [b, L, Dim].
/// Parameter block: table [Vocab, Dim] (row-major; row v is the vector of token v).
/// forward:  y[n, t, :] = table[x[n, t], :]                                   (assigned)
/// p1:       dx = 0 (token ids are discrete; the contract still has dx ASSIGNED)
/// p2:       dtable[x[n, t], :] += dy[n, t, :] for every (n, t): a token that occurs several times in the micro-batch
///           accumulates every occurrence (added, never assigned).
/// Init: table ~ U(-sqrt(3) 0.02, sqrt(3) 0.02) (standard deviation 0.02, as GPT-2 / LLaMA reference code), from the
/// given seed.
/// Throws std::out_of_range from forward, naming the sample, the position and the value, when an id is not an
/// integer in [0, Vocab) (negative, too large, fractional, NaN or infinite): a bad id is never clamped or read out of
/// bounds. p2 requires the x that forward accepted (as the contract requires anyway) and does not check again.
/// Static-asserts: the input is rank 1 [L] (the token ids of one sample); Vocab >= 1 and Dim >= 1 (in the spec).
/// No stash, no workspace; nothing allocates except the message of the exception.
template <class T, class InputShape, std::size_t Vocab, std::size_t Dim>
struct token_embedding_layer {
    static_assert(vector_shape<InputShape>,
                  "pipeprop::token_embedding: the input of a token_embedding layer must be rank 1 [L], the L token ids "
                  "of one sample.");
    static_assert(Vocab < (std::size_t(1) << std::numeric_limits<T>::digits),
                  "pipeprop::token_embedding: the vocabulary is larger than the value type holds exact integers for "
                  "(2^24 for float); ids could not be represented.");
    ///@{
    /// Sequence length L, vocabulary size V and embedding width D (input [L] token ids, output [L, D]).
    static constexpr std::size_t sequence_length = InputShape::size;  // L
    static constexpr std::size_t vocab_size = Vocab;
    static constexpr std::size_t dim = Dim;
    ///@}
    /// The input holds integer token ids (see pipeprop::layer_contract): dx is all zeros.
    static constexpr bool integer_input = true;

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<sequence_length, Dim>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = Vocab * Dim;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 1> parameter_tensors() {
        return {parameter_tensor{"table", 2, {Vocab, Dim, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound = static_cast<T>(std::sqrt(3.0) * 0.02);
        for (std::size_t i = 0; i < parameter_count; ++i) w[i] = uniform<T>(rng, -bound, bound);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        for (std::size_t i = 0; i < b * sequence_length; ++i)
            kernels::copy(Dim, w.data() + checked_id(x[i], i) * Dim, y + i * Dim);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T*, const T*, T* dx, std::size_t b, const stash_type&,
                        workspace_type&) const {
        for (std::size_t i = 0; i < b * sequence_length; ++i) dx[i] = T(0);
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         workspace_type&) const {
        for (std::size_t i = 0; i < b * sequence_length; ++i)
            kernels::add(Dim, dy + i * Dim, dw.data() + static_cast<std::size_t>(x[i]) * Dim);
    }

private:
    /// The id held by v (token i of the micro-batch, i = n L + t), or std::out_of_range naming n, t and v.
    static std::size_t checked_id(T v, std::size_t i) {
        // Written so that NaN fails: every comparison with NaN is false.
        if (v >= T(0) && v < static_cast<T>(Vocab) && v == std::floor(v)) return static_cast<std::size_t>(v);
        throw std::out_of_range("pipeprop::token_embedding::forward: token id " + std::to_string(v) + " at sample " +
                                std::to_string(i / sequence_length) + ", position " +
                                std::to_string(i % sequence_length) + " is not an integer in [0, " +
                                std::to_string(Vocab) + ")");
    }
};

/// Token embedding spec for a network list: pipeprop::token_embedding<Vocab, Dim>, input shape<L> of token ids,
/// output shape<L, Dim>. It must be the first layer with parameters (layer_concept.hpp: nothing upstream of an
/// integer-input layer has parameters).
template <std::size_t Vocab, std::size_t Dim>
struct token_embedding {
    static_assert(Vocab > 0, "pipeprop::token_embedding: the vocabulary must hold at least one token.");
    static_assert(Dim > 0, "pipeprop::token_embedding: the embedding dimension must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = token_embedding_layer<T, InputShape, Vocab, Dim>;
};

}  // namespace pipeprop
