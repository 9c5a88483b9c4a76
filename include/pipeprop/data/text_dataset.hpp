// pipeprop/data/text_dataset.hpp: a text corpus (data/text_corpus.hpp) as the supervised dataset of a sequence model
// (next-token prediction): training batches in a seeded per-epoch order and a fixed validation set, with the token
// ids as the network's input values (T, exact integers: layer_concept.hpp, "integer token inputs") and the next-token
// ids as int32 targets. It is what a trainer with a token loss (token_cross_entropy<T, L, V>) consumes:
//   x [b, L] (T), targets [b, L] (int32), the targets being the inputs shifted by one (text_corpus.hpp, "Sequences").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeprop/data/text_corpus.hpp"

namespace pipeprop::data {

/// Inputs [count, L] (as T) and targets [count, L] (int32) of `count` whole sequences, e.g. a validation set.
template <class T>
struct sequence_arrays {
    std::size_t count = 0;  ///< Number of sequences.
    std::size_t length = 0;  ///< L, tokens per sequence.
    std::vector<T> inputs;               ///< [count, L]
    std::vector<std::int32_t> targets;   ///< [count, L]
};

/// Training and validation next-token sequences of length L over a text corpus it owns (movable, not copyable).
class text_dataset {
public:
    /// Takes the corpus; sequences of `length` tokens. Throws std::invalid_argument for length 0 and data_error
    /// (naming the split) when a split holds fewer than length + 1 tokens.
    text_dataset(text_corpus corpus, std::size_t length)
        : corpus_(std::make_unique<text_corpus>(std::move(corpus))),
          train_(train_sequences(*corpus_, length)),
          validation_(validation_sequences(*corpus_, length)) {}

    /// The corpus the sequences are cut from.
    [[nodiscard]] const text_corpus& corpus() const noexcept { return *corpus_; }
    /// L, tokens per sequence.
    [[nodiscard]] std::size_t length() const noexcept { return train_.length(); }
    /// V, the corpus vocabulary size (<= the model's, checked by load_text_corpus).
    [[nodiscard]] std::size_t vocabulary_size() const noexcept { return corpus_->vocabulary_size(); }
    [[nodiscard]] const token_sequences& train() const noexcept { return train_; }  ///< The training split's sequences.
    /// The validation split's sequences.
    [[nodiscard]] const token_sequences& validation() const noexcept { return validation_; }

    /// Copies training sequences order[first, first + b) into x [b, L] (token ids as T) and targets [b, L]. No
    /// allocation. Throws std::out_of_range as token_sequences::gather (a range past order, an entry >= count).
    template <class T>
    void gather_train(std::span<const std::uint32_t> order, std::size_t first, std::size_t b, T* x,
                      std::int32_t* targets) const {
        train_.gather(order, first, b, x, targets);
    }

    /// The first min(max_count, validation().count()) validation sequences in stream order (max_count 0: all), as
    /// arrays for evaluation. Setup-time function: allocates.
    template <class T>
    [[nodiscard]] sequence_arrays<T> validation_arrays(std::size_t max_count = 0) const {
        return arrays_of<T>(validation_, max_count);
    }

private:
    template <class T>
    static sequence_arrays<T> arrays_of(const token_sequences& s, std::size_t max_count) {
        sequence_arrays<T> a;
        a.count = max_count > 0 ? std::min(max_count, s.count()) : s.count();
        a.length = s.length();
        a.inputs.resize(a.count * a.length);
        a.targets.resize(a.count * a.length);
        for (std::size_t i = 0; i < a.count; ++i)
            s.sequence(i, a.inputs.data() + i * a.length, a.targets.data() + i * a.length);
        return a;
    }

    std::unique_ptr<text_corpus> corpus_;  // heap-held: the sequences refer to its streams across moves
    token_sequences train_;
    token_sequences validation_;
};

}  // namespace pipeprop::data
