// pipeprop/pb/forward_channel.hpp: the forward boundary s -> s + 1 of the concurrent PB executor, whose buffers are
// at once stage s's output a(end) and stage s + 1's input a(begin) (layer_buffers.hpp, external_boundaries): one copy
// of each boundary activation, not three (the producer's slot, a message buffer, the consumer's slot).
//
// Micro-batch n's tensor [b, sample_elements] (and its int32 targets [b, labels_per_sample]) lives in buffer
// n mod capacity, capacity = D_s + 1 (docs/pb-semantics.md §9, bounded memory). Its lifetime: claimed by stage s's
// F(n), which writes it; read by stage s + 1's F(n) and BW(n); read by stage s's BW(n) (its last layer's backward)
// and released there, after stage s + 1's BW(n), whose backward message BW(n) waited for. Stage s's next claim of
// that buffer is its F(n + D_s + 1), which its op stream (pb/op_stream.hpp) runs after its BW(n): a claim never
// meets a buffer in use. When stage s runs in another process, the receiving process claims the buffer when the
// message arrives (pb/remote_stages.hpp) and stage s + 1's BW(n) releases it, before it sends the gradient that lets
// stage s go on to F(n + D_s + 1). The message that crosses the boundary is still the header (micro-batch id, b,
// buffer): the payload is in the channel, never in a neighbour's slot. PB-paper (Kosson et al., arXiv 2003.11666) §3.
#pragma once

#include <xsimd/memory/xsimd_aligned_allocator.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"

namespace pipeprop::pb {

/// The D_s + 1 buffers of one forward boundary (see the file comment). Errors: std::invalid_argument from the
/// constructor for a zero capacity, sample size or max_b; std::logic_error naming the channel when a claim finds its
/// buffer still held or a release finds it not held by that micro-batch (a wrong in-flight bound). Claims and
/// releases may come from different threads.
template <class T>
class alignas(64) forward_channel {
public:
    /// A channel named `name` (messages) of `capacity` buffers of max_b samples of sample_elements values each (each
    /// buffer starts on a 64-byte line), plus labels_per_sample int32 targets per sample. Allocates everything here.
    forward_channel(std::string name, std::size_t capacity, std::size_t sample_elements, std::size_t max_b,
                    std::size_t labels_per_sample)
        : name_(std::move(name)),
          sample_elements_(sample_elements),
          labels_per_sample_(labels_per_sample),
          stride_(value_stride(sample_elements, max_b)),
          label_stride_(labels_per_sample * max_b),
          values_(capacity * stride_, T(0)),
          labels_(capacity * label_stride_, 0),
          holder_(capacity, unheld) {
        if (capacity == 0 || sample_elements == 0 || max_b == 0)
            throw std::invalid_argument("pipeprop::pb::forward_channel " + name_ +
                                        ": capacity, sample size and max_b must be >= 1");
    }

    forward_channel(const forward_channel&) = delete;
    forward_channel& operator=(const forward_channel&) = delete;

    /// Buffers: D_s + 1 for the boundary out of a stage with delay D_s.
    [[nodiscard]] std::size_t capacity() const noexcept { return holder_.size(); }
    /// The buffer of micro-batch id, id mod capacity().
    [[nodiscard]] std::size_t buffer_of(std::size_t id) const noexcept { return id % holder_.size(); }

    /// Takes micro-batch id's buffer (the producer's F, or the arrival of a message from another process) and returns
    /// it. Throws std::logic_error when another micro-batch still holds it.
    std::size_t claim(std::size_t id) {
        const std::size_t k = buffer_of(id);
        std::lock_guard lock(mutex_);
        if (holder_[k] != unheld)
            throw std::logic_error("pipeprop::pb::forward_channel " + name_ + ": micro-batch " + std::to_string(id) +
                                   " needs the buffer micro-batch " + std::to_string(holder_[k]) +
                                   " still holds; the in-flight bound is wrong");
        holder_[k] = id;
        return k;
    }
    /// Gives micro-batch id's buffer back (its last reader is done). Throws std::logic_error when id does not hold it.
    void release(std::size_t id) {
        const std::size_t k = buffer_of(id);
        std::lock_guard lock(mutex_);
        if (holder_[k] != id)
            throw std::logic_error("pipeprop::pb::forward_channel " + name_ + ": micro-batch " + std::to_string(id) +
                                   " releases a buffer it does not hold");
        holder_[k] = unheld;
    }

    ///@{
    /// Values of a buffer, [max_b, sample_elements] (a micro-batch of b samples uses the first b rows).
    [[nodiscard]] T* values(std::size_t buffer) noexcept { return values_.data() + buffer * stride_; }
    [[nodiscard]] const T* values(std::size_t buffer) const noexcept { return values_.data() + buffer * stride_; }
    ///@}
    ///@{
    /// Targets of a buffer, [max_b, labels_per_sample].
    [[nodiscard]] std::int32_t* labels(std::size_t buffer) noexcept { return labels_.data() + buffer * label_stride_; }
    [[nodiscard]] const std::int32_t* labels(std::size_t buffer) const noexcept {
        return labels_.data() + buffer * label_stride_;
    }
    ///@}
    /// Per-sample elements of the boundary tensor.
    [[nodiscard]] std::size_t sample_elements() const noexcept { return sample_elements_; }
    /// int32 targets per sample that travel with the boundary tensor.
    [[nodiscard]] std::size_t labels_per_sample() const noexcept { return labels_per_sample_; }

    /// The header of micro-batch id's message of b samples (its buffer: buffer_of(id)).
    [[nodiscard]] boundary_message message(std::size_t id, std::size_t b) const noexcept {
        return {id, 0, b, direction::forward, buffer_of(id)};
    }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }  ///< The channel's name (messages).
    /// Bytes of its buffers (values and targets).
    [[nodiscard]] std::size_t bytes() const noexcept {
        return values_.size() * sizeof(T) + labels_.size() * sizeof(std::int32_t);
    }
    /// The bytes() of a channel made with these arguments, without making it (pb/memory_estimate.hpp).
    [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t capacity, std::size_t sample_elements,
                                                         std::size_t max_b, std::size_t labels_per_sample) noexcept {
        return capacity * (value_stride(sample_elements, max_b) * sizeof(T) +
                           labels_per_sample * max_b * sizeof(std::int32_t));
    }

private:
    static constexpr std::size_t unheld = static_cast<std::size_t>(-1);
    // Elements of one buffer: max_b samples, rounded up to whole 64-byte lines.
    static constexpr std::size_t value_stride(std::size_t sample_elements, std::size_t max_b) noexcept {
        constexpr std::size_t per_line = 64 / sizeof(T);
        return (sample_elements * max_b + per_line - 1) / per_line * per_line;
    }

    std::string name_;
    std::size_t sample_elements_;
    std::size_t labels_per_sample_;
    std::size_t stride_;
    std::size_t label_stride_;
    std::vector<T, xsimd::aligned_allocator<T, 64>> values_;
    std::vector<std::int32_t> labels_;
    std::vector<std::size_t> holder_;  // [capacity]: the micro-batch holding each buffer, or `unheld`
    std::mutex mutex_;
};

}  // namespace pipeprop::pb
