// pipeprop/graph/transformer_block.hpp: the pre-norm transformer block of LLaMA-like models, as a composite type.
//
//   h = x + attention(norm(x));  y = h + swiglu(norm(h))     (Touvron et al. 2023, arXiv 2302.13971, §2: pre-norm with
//                                                             RMSNorm, SwiGLU, rotary embeddings in the attention)
// per sample [L, D] -> [L, D] (tensors [b, L, D]). Two residual blocks in a pipeprop::sequence, so a pipeline may
// cut between or inside them (the skip tensor travels with the main path, docs/pb-semantics.md §6) and
// fine_grained puts every parametric layer (each norm, the attention, the SwiGLU) in its own stage.
#pragma once

#include <cstddef>

#include "pipeprop/graph/blocks.hpp"
#include "pipeprop/layers/causal_self_attention.hpp"
#include "pipeprop/layers/rms_norm.hpp"
#include "pipeprop/layers/swiglu.hpp"

namespace pipeprop {

/// Pre-norm transformer block: Heads attention heads, SwiGLU hidden width Hidden, normalization Norm (RMSNorm).
template <std::size_t Heads, std::size_t Hidden, class Norm = rms_norm<>>
using prenorm_transformer_block =
    sequence<residual<Norm, causal_self_attention<Heads>>, residual<Norm, swiglu<Hidden>>>;

}  // namespace pipeprop
