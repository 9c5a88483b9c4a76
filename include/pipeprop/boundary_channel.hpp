// pipeprop/boundary_channel.hpp: explicit messages across a stage boundary.
//
// Stages never read a neighbour's activation or gradient buffers. What crosses a boundary is a boundary_message:
// a header (micro-batch id, sequence number, sample count b, direction) whose payload (tensor [b, sample_elements],
// and for forward messages the int32 labels [b] that travel with their own micro-batch: docs/pitfalls.md
// item 2) is copied by the sender into a buffer owned by the boundary_channel and copied out by the receiver, who
// then releases the buffer. On one process the channel is a pool of buffers; a multi-process transport (MPI) can
// implement the same acquire / send / receive / release protocol with MPI_Isend / MPI_Irecv into these buffers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"

namespace pipeprop {

/// Which way a message crosses a stage boundary.
enum class direction : std::uint8_t {
    forward,   ///< activations (and labels) from stage s to stage s + 1
    backward,  ///< input gradients from stage s + 1 to stage s
};

/// Header of a message across a stage boundary. batch == 0 marks an empty message (a bubble: nothing to do in
/// that direction at that sequence step); it then holds no buffer.
struct boundary_message {
    /// The buffer index of an empty message (no payload).
    static constexpr std::size_t no_buffer = std::numeric_limits<std::size_t>::max();
    std::size_t micro_batch = 0;  ///< global id of the micro-batch the payload belongs to
    std::size_t sequence = 0;     ///< receiver-side sequence number (PB: the tick at which the receiver uses it)
    std::size_t batch = 0;        ///< samples b in the payload; 0 = empty
    direction dir = direction::forward;  ///< Forward (activations) or backward (gradients).
    std::size_t buffer = no_buffer;  ///< payload slot in the channel
    /// True for an empty message (batch == 0, a bubble).
    [[nodiscard]] bool empty() const noexcept { return batch == 0; }
};

/// Pool of payload buffers of one boundary and one direction. capacity: how many messages can be in flight at
/// once (a bound the schedule proves; exceeding it is a logic error and throws std::logic_error naming the
/// channel). sample_elements: per-sample tensor size; max_b: largest micro-batch; labels_per_sample: forward
/// channels carry int32 targets [b, labels_per_sample] (1: a class label; L: a sequence's tokens), 0 for none. Thread-safe: the producer and the consumer may run on different threads. The object and each
/// of its buffers occupy whole cache lines, so that two channels used on different cores never share a line.
template <class T>
class alignas(64) boundary_channel {
public:
    /// A channel named `name` (messages) with `capacity` buffers of max_b samples of sample_elements values each, plus
    /// labels_per_sample int32 targets per sample (0: none). Allocates everything here.
    boundary_channel(std::string name, std::size_t capacity, std::size_t sample_elements, std::size_t max_b,
                     std::size_t labels_per_sample)
        : name_(std::move(name)),
          sample_elements_(sample_elements),
          labels_per_sample_(labels_per_sample),
          stride_(sample_elements * max_b),
          label_stride_(labels_per_sample * max_b),
          values_(capacity * stride_) {
        if (capacity == 0 || sample_elements == 0 || max_b == 0)
            throw std::invalid_argument("pipeprop::boundary_channel " + name_ + ": capacity, sample size and max_b "
                                                                                "must be >= 1");
        labels_.reserve(whole_lines<std::int32_t>(capacity * label_stride_));
        labels_.resize(capacity * label_stride_);
        free_.reserve(whole_lines<std::size_t>(capacity));
        for (std::size_t i = capacity; i-- > 0;) free_.push_back(i);
    }

    boundary_channel(const boundary_channel&) = delete;
    boundary_channel& operator=(const boundary_channel&) = delete;

    /// Sender: take a free buffer. Throws std::logic_error when all `capacity` buffers are in flight.
    [[nodiscard]] std::size_t acquire() {
        std::lock_guard lock(mutex_);
        if (free_.empty())
            throw std::logic_error("pipeprop::boundary_channel " + name_ + ": more messages in flight than its "
                                   "capacity; the schedule's in-flight bound is wrong");
        const std::size_t b = free_.back();
        free_.pop_back();
        return b;
    }
    /// Receiver: give a buffer back after copying its payload out.
    void release(std::size_t buffer) {
        std::lock_guard lock(mutex_);
        free_.push_back(buffer);
    }

    ///@{
    /// Payload tensor of a buffer, [max_b, sample_elements]; a message uses the first batch rows.
    [[nodiscard]] T* values(std::size_t buffer) noexcept { return values_.data() + buffer * stride_; }
    [[nodiscard]] const T* values(std::size_t buffer) const noexcept { return values_.data() + buffer * stride_; }
    ///@}
    ///@{
    /// Targets of a buffer, [max_b, labels_per_sample] (forward channels only).
    [[nodiscard]] std::int32_t* labels(std::size_t buffer) noexcept { return labels_.data() + buffer * label_stride_; }
    [[nodiscard]] const std::int32_t* labels(std::size_t buffer) const noexcept {
        return labels_.data() + buffer * label_stride_;
    }
    ///@}

    /// Sender: copies src [b, sample_elements] (and, on a forward channel, labels [b, labels_per_sample]) into a free
    /// buffer and returns the header to send (micro-batch id, sequence, b, direction). Throws as acquire().
    [[nodiscard]] boundary_message send(direction dir, std::size_t micro_batch, std::size_t sequence, std::size_t b,
                                        const T* src, const std::int32_t* labels = nullptr) {
        const std::size_t buffer = acquire();
        std::copy_n(src, b * sample_elements_, values(buffer));
        if (labels != nullptr) std::copy_n(labels, b * labels_per_sample_, this->labels(buffer));
        return {micro_batch, sequence, b, dir, buffer};
    }
    /// Receiver: copies the payload of msg into dst [msg.batch, sample_elements] (and its labels into labels_dst when
    /// given), then releases the buffer.
    void receive(const boundary_message& msg, T* dst, std::int32_t* labels_dst = nullptr) {
        std::copy_n(values(msg.buffer), msg.batch * sample_elements_, dst);
        if (labels_dst != nullptr) std::copy_n(labels(msg.buffer), msg.batch * labels_per_sample_, labels_dst);
        release(msg.buffer);
    }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }  ///< The channel's name (messages).
    /// Bytes of payload storage.
    [[nodiscard]] std::size_t bytes() const noexcept {
        return values_.size() * sizeof(T) + labels_.size() * sizeof(std::int32_t);
    }
    /// The bytes() of a channel made with these arguments, without making it (memory_estimate.hpp).
    [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t capacity, std::size_t sample_elements,
                                                         std::size_t max_b, std::size_t labels_per_sample) noexcept {
        return capacity * max_b * (sample_elements * sizeof(T) + labels_per_sample * sizeof(std::int32_t));
    }

private:
    template <class U>
    using line_vector = std::vector<U, xsimd::aligned_allocator<U, 64>>;
    /// Elements of U that fill whole 64-byte lines and hold at least n.
    template <class U>
    static constexpr std::size_t whole_lines(std::size_t n) noexcept {
        constexpr std::size_t per_line = 64 / sizeof(U);
        return (n + per_line - 1) / per_line * per_line + (n == 0 ? per_line : 0);
    }

    std::string name_;
    std::size_t sample_elements_;
    std::size_t labels_per_sample_;
    std::size_t stride_;
    std::size_t label_stride_;
    line_vector<T> values_;
    line_vector<std::int32_t> labels_;
    line_vector<std::size_t> free_;
    std::mutex mutex_;
};

}  // namespace pipeprop
