// pipeprop/layers/conv2d_buffers.hpp: conv2d's per-micro-batch stash and per-runner workspace (layers/conv2d.hpp
// says which pass uses which buffer).
#pragma once

#include <cstddef>

#include "pipeprop/detail/image_dims.hpp"  // detail::aligned_buffer

namespace pipeprop {

/// Stash of conv2d for one micro-batch: only the micro-batch capacity. The column matrices are not kept: backward-p2
/// rebuilds each sample's column matrix from the layer input x (which every runner keeps for p2 anyway) in the
/// workspace, so a PB activation slot holds the input once instead of K^2 / S^2 times.
template <class T>
struct conv2d_stash {
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); forward checks b against it.
};

/// Workspace of conv2d (one per runner), each pass uses it only within its own call: one sample's column matrix
/// [C K K, OH OW] (im2col's output, or p1's column gradient dcol that col2im folds into dx; empty for an identity
/// im2col); with transposed_p2, dy_t [OH OW, OutChannels] of one sample and dw_t [C K K, OutChannels], summed over
/// the micro-batch; with direct, a zero-padded sample and the direct GEMM's output (conv2d_direct.hpp); with
/// direct_p2 (no column matrix then, where p1 is direct too) dy_t in the padded-width layout.
template <class T>
struct conv2d_workspace {
    detail::aligned_buffer<T> columns;  ///< One sample's column matrix [C K K, OH OW] (im2col; dcol in p1).
    ///@{
    /// transposed_p2 or direct_p2: dy_t [OH OW, OutChannels] (direct_p2: [Np, OutChannels]) of one sample and the
    /// transposed weight gradient dw_t [C K K, OutChannels].
    detail::aligned_buffer<T> dy_t, dw_t;
    ///@}
    ///@{
    /// direct only: one zero-padded sample and the padded-width output [M, Np] (conv2d_direct).
    detail::aligned_buffer<T> padded, out;
    ///@}
    /// winograd only: its padded copies, tiles, transforms (conv2d_winograd::workspace_size values).
    detail::aligned_buffer<T> winograd;
};

}  // namespace pipeprop
