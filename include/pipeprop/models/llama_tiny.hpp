// pipeprop/models/llama_tiny.hpp: LLaMA-like byte-level decoders (Touvron et al. 2023, arXiv 2302.13971, §2:
// pre-norm RMSNorm, rotary embeddings in causal multi-head attention, SwiGLU) over 64-byte sequences: the family
// template llama_decoder and two members, small enough to train on 2 cores.
//
// llama_tiny: token ids [64] -> token_embedding<256, 64> [64, 64] -> 2 x prenorm_transformer_block<4 heads, SwiGLU
// hidden 172> -> rms_norm -> token_linear<256, false> (LM head, no bias) -> logits [64, 256]. Sequence length L = 64,
// byte vocabulary V = 256, width D = 64 (head dimension 16): 16,384 + 2 x 49,536 + 64 + 16,384 = 131,904 parameters
// (embedding and head not tied); trains in minutes.
// llama_4x128: the same with 4 blocks of width 128 (4 heads of dimension 32, SwiGLU hidden 344 = 8/3 x 128 rounded
// up to a multiple of 8): 32,768 + 4 x 197,888 + 128 + 32,768 = 857,216 parameters, twice the stages of llama_tiny
// under a fine cut (the first stage's delay twice as large).
// Train them with token_cross_entropy<float, 64, 256> (mean over tokens).
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <cstddef>

#include "pipeprop/graph/transformer_block.hpp"
#include "pipeprop/layers/rms_norm.hpp"
#include "pipeprop/layers/token_embedding.hpp"
#include "pipeprop/layers/token_linear.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop::models {

/// Sequence length of llama-tiny (bytes per sequence).
inline constexpr std::size_t llama_tiny_length = 64;
/// Vocabulary of llama-tiny (bytes).
inline constexpr std::size_t llama_tiny_vocabulary = 256;

/// A LLaMA-like decoder of Blocks pre-norm blocks of width Width, Heads heads and SwiGLU hidden size Hidden over
/// byte sequences of llama_tiny_length.
template <std::size_t Blocks, std::size_t Width, std::size_t Heads, std::size_t Hidden>
using llama_decoder = boost::mp11::mp_apply<
    network, boost::mp11::mp_append<
                 boost::mp11::mp_list<shape<llama_tiny_length>, token_embedding<llama_tiny_vocabulary, Width>>,
                 boost::mp11::mp_repeat_c<boost::mp11::mp_list<prenorm_transformer_block<Heads, Hidden>>, Blocks>,
                 boost::mp11::mp_list<rms_norm<>, token_linear<llama_tiny_vocabulary, false>>>>;

/// llama-tiny (see the file comment).
using llama_tiny = llama_decoder<2, 64, 4, 172>;
/// The 4-block, width-128 member (see the file comment).
using llama_4x128 = llama_decoder<4, 128, 4, 344>;

}  // namespace pipeprop::models
