// pipeprop/data/text_corpus.hpp: an English text corpus for next-token (language-model) training: the fortune
// cookie files of Debian's `fortunes` package, tokenized at byte level and served as fixed-length sequences.
//
// Files. A corpus directory holds fortune files (strfile(1) format: plain text, fortunes separated by lines that
// hold only "%"). The reader takes every regular file directly in the directory, sorted by name (byte order), and
// skips: *.dat (strfile's binary random-access indexes of the text files), *.u8 (in Debian 12 symbolic links to
// the same text files, so reading them would duplicate the corpus), names starting with '.', and subdirectories
// (Debian's fortunes-off installs the offensive collection as off/, other languages' packages use their own
// directories): only the main English collection is read. On Debian 12 /usr/share/games/fortunes holds the 43 files
// of `fortunes` and `fortunes-min` (art, ascii-art, computers, cookie, debian, definitions, ..., work, zippy),
// about 2.58 MB of text. A file holding a NUL byte is rejected (not plain text).
//
// Fortunes and streams. A file is cut into fortunes at its "%" lines (a trailing '\r' is allowed); empty fortunes
// (consecutive separators, a leading or trailing separator) are dropped; a fortune keeps its lines with their '\n'
// (one is added when the file's last line lacks it). Over the files in order the fortunes are numbered k = 0, 1, ...;
// fortune k belongs to the VALIDATION split when k % validation_every == validation_every - 1 (every 10th by
// default, so both splits sample every file), otherwise to the TRAINING split. The token stream of a split is its
// fortunes in order, each followed by the separator line "%\n": the fortune-file format, so a model also learns
// where a fortune ends.
//
// Vocabulary. text_vocabulary::bytes (default): token id = byte value, V = 256, the same for every corpus
// (deterministic, no out-of-vocabulary case). text_vocabulary::corpus_bytes: the distinct byte values that occur in
// the corpus (both splits), sorted ascending, token id = rank (smaller V, e.g. for a small embedding table; still
// deterministic for a given set of files). Multi-byte UTF-8 characters are several tokens either way.
//
// Sequences (token_sequences): for sequence length L the stream s of a split gives count = (|s| - 1) / L
// non-overlapping windows; window i has inputs [L] = s[i L, i L + L) and next-token targets [L] =
// s[i L + 1, i L + L + 1) (the inputs shifted by one). The tokens after the last whole window are not used. An epoch's
// order is epoch_permutation(seed, epoch, count) (data/epoch_permutation.hpp), a pure function of (seed, epoch).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/file_bytes.hpp"

namespace pipeprop::data {

/// Default corpus directory: Debian's `fortunes` package (scripts/install-deps.sh installs it).
inline constexpr const char* default_text_directory = "/usr/share/games/fortunes";

/// Size of the byte-level vocabulary (token id = byte value).
inline constexpr std::size_t byte_vocabulary_size = 256;

/// How bytes map to token ids (see the file comment).
enum class text_vocabulary {
    bytes,         ///< id = byte value, V = 256
    corpus_bytes,  ///< id = rank of the byte among the distinct bytes of the corpus, V = their number
};

/// Options of load_text_corpus. validation_every >= 2: fortune k is a validation fortune when
/// k % validation_every == validation_every - 1.
struct text_corpus_options {
    /// Token ids: byte values, or the ranks of the bytes that occur (text_vocabulary).
    text_vocabulary vocabulary = text_vocabulary::bytes;
    std::size_t validation_every = 10;  ///< Every validation_every-th fortune is a validation one (>= 2).
};

/// A tokenized corpus: the files it came from, the vocabulary and the token streams of both splits (ids in
/// [0, vocabulary_size()), one byte each).
struct text_corpus {
    std::string directory;                ///< the corpus directory (for messages)
    std::vector<std::string> files;       ///< the files read, in order (full paths)
    std::size_t file_bytes = 0;           ///< total size of those files (bytes)
    std::size_t train_fortunes = 0;       ///< fortunes in the training split
    std::size_t validation_fortunes = 0;  ///< fortunes in the validation split
    text_vocabulary vocabulary = text_vocabulary::bytes;  ///< the vocabulary of the options it was loaded with
    std::vector<std::uint8_t> token_byte;       ///< [V]: the byte of each token id
    std::array<std::int16_t, 256> byte_token{};  ///< [256]: the token id of each byte, -1 when not in the vocabulary
    std::vector<std::uint8_t> train;            ///< training token stream [train tokens]
    std::vector<std::uint8_t> validation;       ///< validation token stream [validation tokens]

    /// V, the number of token ids.
    [[nodiscard]] std::size_t vocabulary_size() const noexcept { return token_byte.size(); }
    /// The text of token ids (each in [0, V)); throws std::out_of_range for an id outside [0, V).
    [[nodiscard]] std::string decode(std::span<const std::int32_t> ids) const {
        std::string s;
        s.reserve(ids.size());
        for (const std::int32_t id : ids) {
            if (id < 0 || static_cast<std::size_t>(id) >= token_byte.size())
                throw std::out_of_range("pipeprop::data::text_corpus::decode: token id " + std::to_string(id) +
                                        " is outside [0, " + std::to_string(token_byte.size()) + ")");
            s.push_back(static_cast<char>(token_byte[static_cast<std::size_t>(id)]));
        }
        return s;
    }
};

/// The fortune text files of `directory` that load_text_corpus reads, sorted by name (file comment: *.dat, *.u8,
/// hidden files and subdirectories are skipped). Throws data_error naming the directory when it does not exist, is
/// not a directory, cannot be listed, or holds no such file.
[[nodiscard, gnu::cold]] inline std::vector<std::filesystem::path> list_text_files(
    const std::filesystem::path& directory) {
    namespace fs = std::filesystem;
    const std::string name = directory.string();
    std::error_code ec;
    const auto status = fs::status(directory, ec);
    if (ec || !fs::exists(status))
        throw data_error(name + ": text corpus directory not found (Debian: apt-get install fortunes)");
    if (!fs::is_directory(status)) throw data_error(name + ": not a directory (expected a text corpus directory)");
    std::vector<fs::path> files;
    fs::directory_iterator it(directory, ec), end;
    if (ec) throw data_error(name + ": cannot list the directory (" + ec.message() + ")");
    for (; it != end; it.increment(ec)) {
        if (ec) throw data_error(name + ": cannot list the directory (" + ec.message() + ")");
        const std::string file = it->path().filename().string();
        const auto ends_with = [&](const std::string& suffix) {
            return file.size() >= suffix.size() && file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0;
        };
        if (file.empty() || file[0] == '.' || ends_with(".dat") || ends_with(".u8")) continue;
        std::error_code fec;
        if (!fs::is_regular_file(it->path(), fec)) continue;  // subdirectories (off/, other languages), sockets...
        files.push_back(it->path());
    }
    if (files.empty())
        throw data_error(name + ": empty corpus: no plain-text fortune files (*.dat index files, *.u8 duplicates, "
                                "hidden files and subdirectories are not read)");
    std::sort(files.begin(), files.end());
    return files;
}

namespace detail {

/// Appends the fortunes of one file's bytes (see the file comment) to `out`, each ending in '\n'.
[[gnu::cold]] inline void split_fortunes(const std::vector<std::uint8_t>& bytes, const std::string& name,
                                         std::vector<std::string>& out) {
    if (const auto nul = std::find(bytes.begin(), bytes.end(), std::uint8_t(0)); nul != bytes.end())
        throw data_error(name + ": not a plain-text fortune file (NUL byte at offset " +
                         std::to_string(nul - bytes.begin()) + ")");
    std::string fortune;
    std::size_t pos = 0;
    while (pos < bytes.size()) {
        const auto nl = std::find(bytes.begin() + static_cast<std::ptrdiff_t>(pos), bytes.end(), std::uint8_t('\n'));
        const std::size_t stop = static_cast<std::size_t>(nl - bytes.begin());  // '\n' or bytes.size()
        std::size_t len = stop - pos;
        if (len > 0 && bytes[pos + len - 1] == '\r') --len;
        if (len == 1 && bytes[pos] == '%') {
            if (!fortune.empty()) out.push_back(std::move(fortune));
            fortune.clear();
        } else {
            fortune.append(reinterpret_cast<const char*>(bytes.data() + pos), stop - pos);
            fortune.push_back('\n');
        }
        pos = stop + 1;
    }
    if (!fortune.empty()) out.push_back(std::move(fortune));
}

}  // namespace detail

/// Reads the fortune files of `directory` (list_text_files), splits them into training and validation fortunes and
/// tokenizes both splits (file comment). model_vocabulary: the vocabulary size V_model of the model that will be
/// trained (its embedding rows / logits per token). Setup-time function: allocates.
/// Throws data_error whose message starts with the path: a missing directory, no text files, a file that cannot be
/// read or holds a NUL byte, an empty corpus (no fortune text at all), or a corpus vocabulary larger than
/// model_vocabulary. Throws std::invalid_argument when options.validation_every < 2.
[[nodiscard, gnu::cold]] inline text_corpus load_text_corpus(const std::filesystem::path& directory,
                                                             std::size_t model_vocabulary,
                                                             const text_corpus_options& options = {}) {
    if (options.validation_every < 2)
        throw std::invalid_argument("pipeprop::data::load_text_corpus: validation_every " +
                                    std::to_string(options.validation_every) +
                                    " must be >= 2 (every validation_every-th fortune is a validation fortune)");
    const std::string name = directory.string();
    text_corpus c;
    c.directory = name;
    c.vocabulary = options.vocabulary;
    std::vector<std::string> fortunes;
    for (const auto& path : list_text_files(directory)) {
        const std::vector<std::uint8_t> bytes = read_file_bytes(path);
        c.files.push_back(path.string());
        c.file_bytes += bytes.size();
        detail::split_fortunes(bytes, path.string(), fortunes);
    }
    if (fortunes.empty())
        throw data_error(name + ": empty corpus: " + std::to_string(c.files.size()) + " file(s) of " +
                         std::to_string(c.file_bytes) + " bytes hold no fortune text (only '%' separator lines)");
    std::array<bool, 256> present{};
    for (std::size_t k = 0; k < fortunes.size(); ++k) {
        const bool validation = k % options.validation_every == options.validation_every - 1;
        auto& stream = validation ? c.validation : c.train;
        (validation ? c.validation_fortunes : c.train_fortunes) += 1;
        for (const char ch : fortunes[k]) stream.push_back(static_cast<std::uint8_t>(ch));
        stream.push_back('%');
        stream.push_back('\n');
        for (const char ch : fortunes[k]) present[static_cast<std::uint8_t>(ch)] = true;
    }
    present['%'] = present['\n'] = true;
    c.byte_token.fill(-1);
    for (std::size_t byte = 0; byte < 256; ++byte)
        if (options.vocabulary == text_vocabulary::bytes || present[byte]) {
            c.byte_token[byte] = static_cast<std::int16_t>(c.token_byte.size());
            c.token_byte.push_back(static_cast<std::uint8_t>(byte));
        }
    if (c.vocabulary_size() > model_vocabulary)
        throw data_error(name + ": the corpus vocabulary has " + std::to_string(c.vocabulary_size()) + " tokens (" +
                         (options.vocabulary == text_vocabulary::bytes ? "byte-level" : "distinct bytes of the corpus") +
                         "), more than the model's vocabulary of " + std::to_string(model_vocabulary));
    if (options.vocabulary == text_vocabulary::corpus_bytes) {
        for (auto& t : c.train) t = static_cast<std::uint8_t>(c.byte_token[t]);
        for (auto& t : c.validation) t = static_cast<std::uint8_t>(c.byte_token[t]);
    }
    return c;
}

/// Fixed-length next-token sequences over one token stream (file comment): count() windows of inputs [L] and
/// targets [L] = inputs shifted by one. Refers to the stream (the text_corpus must outlive it); no copy.
class token_sequences {
public:
    /// Sequences of length L over `stream`; `source` names the stream in messages (e.g. "<dir> (training split)").
    /// Throws std::invalid_argument when length == 0 and data_error (starting with source) when the stream has
    /// fewer than length + 1 tokens (one window needs L inputs and the next token of the last).
    token_sequences(std::span<const std::uint8_t> stream, std::size_t length, std::string source)
        : stream_(stream), length_(length), source_(std::move(source)) {
        if (length == 0) throw std::invalid_argument("pipeprop::data::token_sequences: sequence length must be >= 1");
        if (stream.size() < length + 1)
            throw data_error(source_ + ": sequence length " + std::to_string(length) + " needs at least " +
                             std::to_string(length + 1) + " tokens (inputs and next-token targets), the stream holds " +
                             std::to_string(stream.size()));
    }

    /// Number of whole windows, (|stream| - 1) / L >= 1.
    [[nodiscard]] std::size_t count() const noexcept { return (stream_.size() - 1) / length_; }
    /// L, tokens per sequence.
    [[nodiscard]] std::size_t length() const noexcept { return length_; }
    /// Where the stream came from (messages).
    [[nodiscard]] const std::string& source() const noexcept { return source_; }

    /// Writes sequence i: inputs [L] and targets [L] (int32 token ids). The inputs may also be written as another
    /// arithmetic type In (e.g. float: a network's token-id input values, exact below 2^24). Throws
    /// std::out_of_range when i >= count().
    template <class In>
        requires std::is_arithmetic_v<In>
    void sequence(std::size_t i, In* inputs, std::int32_t* targets) const {
        if (i >= count())
            throw std::out_of_range("pipeprop::data::token_sequences: sequence " + std::to_string(i) + " of " +
                                    source_ + " exceeds its " + std::to_string(count()) + " sequences");
        const std::uint8_t* s = stream_.data() + i * length_;
        for (std::size_t l = 0; l < length_; ++l) {
            inputs[l] = static_cast<In>(s[l]);
            targets[l] = s[l + 1];
        }
    }

    /// Copies sequences order[first, first + b) into inputs [b, L] and targets [b, L] (a micro-batch; order is e.g.
    /// epoch_permutation(seed, epoch, count())); inputs as int32 or another arithmetic type In (as sequence). No
    /// allocation. Throws std::out_of_range when first + b exceeds order.size() or an order entry is >= count().
    template <class In>
        requires std::is_arithmetic_v<In>
    void gather(std::span<const std::uint32_t> order, std::size_t first, std::size_t b, In* inputs,
                std::int32_t* targets) const {
        if (first > order.size() || b > order.size() - first)  // first + b could wrap
            throw std::out_of_range("pipeprop::data::token_sequences::gather: " + std::to_string(b) +
                                    " sequences from position " + std::to_string(first) + " exceed the order of " +
                                    std::to_string(order.size()));
        for (std::size_t n = 0; n < b; ++n) sequence(order[first + n], inputs + n * length_, targets + n * length_);
    }

private:
    std::span<const std::uint8_t> stream_;
    std::size_t length_ = 1;
    std::string source_;
};

/// Sequences of length L over the training split. Throws as token_sequences.
[[nodiscard]] inline token_sequences train_sequences(const text_corpus& c, std::size_t length) {
    return token_sequences(c.train, length, c.directory + " (training split)");
}
/// Sequences of length L over the validation split. Throws as token_sequences.
[[nodiscard]] inline token_sequences validation_sequences(const text_corpus& c, std::size_t length) {
    return token_sequences(c.validation, length, c.directory + " (validation split)");
}

}  // namespace pipeprop::data
