// pipeprop/layer_buffers.hpp: layer ranges and the buffers a layer_stack pass runs on.
//
// stack_activations: the buffers of ONE micro-batch of a range [begin, end) of a network's layers:
//   a_k for k in [begin, end]: the input of layer k (a_end is the range output), [b, activation_size[k]]
//   g_k for k in [begin, end]: the gradient w.r.t. a_k; g_end is written by the caller (loss or next stage),
//                              g_begin is the range's input gradient (sent to the previous stage).
//   one stash per layer of the range (the layer's own stash type, held behind an untyped owner).
// A range's input a_begin or output a_end may be external (external_boundaries): not allocated here but bound by the
// caller to a buffer it owns (bind_input / bind_output), so that a pipeline keeps one copy of a boundary tensor for
// the stage that writes it and the stage that reads it (pb/forward_channel.hpp).
// Inference buffers (layer_stack::make_inference_activations) have no g_k, and their a_k alternate between two
// buffers the caller owns: a_k and a_k+1 never alias, a_k and a_k+2 do, so only infer may run on them.
// stack_workspaces: each layer's scratch memory, owned by whoever runs the range.
// Both are made by layer_stack (make_activations, make_workspaces), for up to max_b samples, and allocate nothing
// after that.
#pragma once

#include <xsimd/memory/xsimd_aligned_allocator.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_concept.hpp"
#include "pipeprop/layer_entry_points.hpp"

namespace pipeprop {

/// Half-open range [begin, end) of layer positions of a network.
struct layer_range {
    std::size_t begin = 0;  ///< First layer position of the range.
    std::size_t end = 0;  ///< One past the last layer position.
    /// Number of layers, end - begin.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
    /// True when begin <= i < end.
    [[nodiscard]] constexpr bool contains(std::size_t i) const noexcept { return i >= begin && i < end; }
    friend constexpr bool operator==(layer_range, layer_range) = default;
};

/// Range tag of the layer_stack passes: the range of the activations, decided at run time (the dynamic variant).
struct dynamic_range {};
/// Range tag of the layer_stack passes: layers [B, E) known at compile time (a stage type: pipeline_layout.hpp).
/// The pass checks that the activations were made for exactly this range, then runs the same loop as the dynamic
/// variant: a stage type adds no code of its own.
template <std::size_t B, std::size_t E>
struct static_range {
    static_assert(B < E, "pipeprop::static_range: a stage needs at least one layer.");
    static constexpr layer_range value{B, E};  ///< The range [B, E) as a value.
};

/// Which boundary activations of a range the caller provides instead of the buffers allocating them: the input
/// a(begin) and / or the output a(end) (layer_stack::make_activations; bound with stack_activations::bind_input /
/// bind_output before a pass runs).
struct external_boundaries {
    bool input = false;   ///< a(begin) is the caller's: bind_input before forward
    bool output = false;  ///< a(end) is the caller's: bind_output before forward
};

/// Aligned storage for values of type T.
template <class T>
using aligned_vector = std::vector<T, xsimd::aligned_allocator<T>>;

/// Per-micro-batch buffers of one range of a network's layers with value type T (see the file comment); Stack is
/// the runtime_layer_stack<T> that makes them (make_activations), allocated once. Move-only.
template <class Stack, class T>
class stack_activations {
public:
    stack_activations() = default;
    ///@{
    /// Movable, not copyable (the buffers move with it; pointers into them stay valid).
    stack_activations(stack_activations&&) noexcept = default;
    stack_activations& operator=(stack_activations&&) noexcept = default;
    ///@}

    [[nodiscard]] layer_range range() const noexcept { return range_; }  ///< The layer range the buffers were made for.
    /// The micro-batch capacity max_b: every buffer holds up to max_b samples.
    [[nodiscard]] std::size_t max_batch() const noexcept { return max_b_; }
    ///@{
    /// Input of layer k (k in [begin, end]), [b, the stack's activation_size[k]]. Between two nodes of a run of
    /// carried nodes (graph/carried.hpp) the training passes leave its carried part unwritten: only the run's input
    /// and output hold it (runtime_layer_stack::forward).
    [[nodiscard]] T* a(std::size_t k) noexcept { return a_at_[k - range_.begin]; }
    [[nodiscard]] const T* a(std::size_t k) const noexcept { return a_at_[k - range_.begin]; }
    ///@}
    /// The boundaries the caller provides (external_boundaries; none unless made with them).
    [[nodiscard]] external_boundaries external() const noexcept { return external_; }
    ///@{
    /// Makes an external input a(begin) / output a(end) the caller's buffer `values` [max_batch(), input_size()] /
    /// [max_batch(), output_size()], which must stay valid while passes run on these buffers (until it is bound
    /// again). Throws std::logic_error when that boundary is not external or values is null.
    void bind_input(T* values) { bind(external_.input, 0, values, "bind_input"); }
    void bind_output(T* values) { bind(external_.output, range_.size(), values, "bind_output"); }
    ///@}
    ///@{
    /// Gradient w.r.t. a(k) (in the owner's buffers when made by make_activations_sharing_gradients); its carried
    /// part inside a run of carried nodes is left unwritten, as a(k)'s.
    [[nodiscard]] T* g(std::size_t k) noexcept { return g_base_ + offset_[k - range_.begin]; }
    [[nodiscard]] const T* g(std::size_t k) const noexcept { return g_base_ + offset_[k - range_.begin]; }
    ///@}
    [[nodiscard]] T* input() noexcept { return a(range_.begin); }  ///< The range input a(begin), [b, input_size()].
    ///@{
    /// The range output a(end), [b, output_size()].
    [[nodiscard]] T* output() noexcept { return a(range_.end); }
    [[nodiscard]] const T* output() const noexcept { return a(range_.end); }
    ///@}
    /// Gradient w.r.t. the range output, g(end), [b, output_size()]: the caller writes dy here before backward.
    [[nodiscard]] T* output_gradient() noexcept { return g(range_.end); }
    ///@{
    /// Gradient w.r.t. the range input, g(begin), [b, input_size()]: backward-p1 assigns it.
    [[nodiscard]] T* input_gradient() noexcept { return g(range_.begin); }
    [[nodiscard]] const T* input_gradient() const noexcept { return g(range_.begin); }
    ///@}
    ///@{
    /// Per-sample elements of the range input / output.
    [[nodiscard]] std::size_t input_size() const noexcept { return input_size_; }
    [[nodiscard]] std::size_t output_size() const noexcept { return output_size_; }
    ///@}

    /// Bytes this object holds for one micro-batch: its activations a(k) (none for inference buffers, which are
    /// the caller's, nor for external boundaries), its own gradients g(k) (none when it shares another's or is for
    /// inference) and its layers' stashes (the "stash bytes" of PB).
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    /// Bytes of the gradient buffers g(k) it owns: as many as of a(k), or 0 when it shares another's.
    [[nodiscard]] std::size_t gradient_bytes() const noexcept { return g_.size() * sizeof(T); }

private:
    friend Stack;
    void* stash_at(std::size_t k) noexcept { return stashes_[k - range_.begin].get(); }
    const void* stash_at(std::size_t k) const noexcept { return stashes_[k - range_.begin].get(); }
    // Points the external boundary `at` (0: a(begin), size(): a(end)) at values; throws as bind_input.
    void bind(bool external, std::size_t at, T* values, const char* what) {
        if (!external || values == nullptr)
            throw std::logic_error(std::string("pipeprop::stack_activations::") + what +
                                   (values == nullptr ? ": no buffer given" : ": that boundary is not external"));
        a_at_[at] = values;
    }
    layer_range range_{};
    std::size_t max_b_ = 0;
    std::size_t input_size_ = 0;  // per-sample elements of a(begin) and a(end)
    std::size_t output_size_ = 0;
    std::size_t bytes_ = 0;
    external_boundaries external_{};
    std::vector<std::size_t> offset_;  // [k - begin]: g(k)'s offset in the gradient buffers
    aligned_vector<T> a_;  // the a(k) allocated here (none for inference, nor for external boundaries)
    std::vector<T*> a_at_;  // [k - begin]: a(k), in a_, the caller's inference buffers or an external boundary
    aligned_vector<T> g_;  // empty when the gradients are another object's
    T* g_base_ = nullptr;  // g_.data(), or the owner's (a moved vector keeps its buffer, so moves keep it valid)
    std::vector<detail::owned_object> stashes_;  // [k - begin]: the stash of layer k
};

/// Scratch memory of the layers of one range, owned by whoever runs the range (one per thread of execution); Stack
/// is the runtime_layer_stack<T> that makes them (make_workspaces). Move-only.
template <class Stack>
class stack_workspaces {
public:
    stack_workspaces() = default;
    ///@{
    /// Movable, not copyable.
    stack_workspaces(stack_workspaces&&) noexcept = default;
    stack_workspaces& operator=(stack_workspaces&&) noexcept = default;
    ///@}
    /// Bytes the workspaces of the range hold (pipeprop::workspace_bytes of each layer's).
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

private:
    friend Stack;
    [[nodiscard]] void* at(std::size_t k) const noexcept { return ws_[k].get(); }
    std::vector<detail::owned_object> ws_;  // [k]: the workspace of layer k (empty outside the range)
    std::size_t bytes_ = 0;
};

}  // namespace pipeprop
