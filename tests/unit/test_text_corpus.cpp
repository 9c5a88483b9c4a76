// Text corpus (data/text_corpus.hpp): a small fortune corpus written by the test (file selection, fortune
// splitting, train/validation split, both vocabularies, next-token sequences, seeded order), every error, and the
// real Debian corpus in /usr/share/games/fortunes (package `fortunes`, installed by scripts/install-deps.sh: required).
#include <catch2/catch.hpp>

#include <pipeprop/data/epoch_permutation.hpp>
#include <pipeprop/data/text_corpus.hpp>
#include <pipeprop/data/text_dataset.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
namespace pd = pipeprop::data;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// A fresh directory under the system temp dir, removed at scope exit.
struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& tag) {
        path = fs::temp_directory_path() / ("pipeprop-text-" + tag + "-" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

void write(const fs::path& p, const std::string& s) {
    std::ofstream out(p, std::ios::binary);
    out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

std::string as_string(const std::vector<std::uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::string data_error_message(auto&& f) {
    try {
        f();
    } catch (const pipeprop::data_error& e) {
        return e.what();
    }
    return "no data_error";
}

/// The small corpus: alpha (2 fortunes), beta (leading, doubled separators, no final newline), gamma (CRLF), and
/// files that must be skipped: beta.dat (binary, NUL bytes), alpha.u8 (symlink to alpha), .hidden, off/rude.
void write_small_corpus(const fs::path& d) {
    write(d / "alpha", "one\n%\ntwo two\n%\n");
    write(d / "beta", "%\nthree\n%\n%\nfour");
    write(d / "gamma", "five\r\n%\r\n");
    write(d / "beta.dat", std::string("\0\0\0\2binary", 10));
    fs::create_symlink("alpha", d / "alpha.u8");
    write(d / ".hidden", "hidden\n%\n");
    fs::create_directories(d / "off");
    write(d / "off" / "rude", "rude\n%\n");
}

}  // namespace

TEST_CASE("text corpus: files, fortunes, split and byte vocabulary of a small corpus", "[data][text]") {
    temp_dir d("small");
    write_small_corpus(d.path);
    const auto files = pd::list_text_files(d.path);
    REQUIRE(files == std::vector<fs::path>{d.path / "alpha", d.path / "beta", d.path / "gamma"});

    // Fortunes k = 0..4: "one", "two two", "three", "four", "five\r"; every 2nd (k = 1, 3) is validation.
    const auto c = pd::load_text_corpus(d.path, 256, {.vocabulary = pd::text_vocabulary::bytes, .validation_every = 2});
    CHECK(c.files.size() == 3);
    CHECK(c.file_bytes == 16 + 16 + 9);
    CHECK(c.train_fortunes == 3);
    CHECK(c.validation_fortunes == 2);
    CHECK(as_string(c.train) == "one\n%\nthree\n%\nfive\r\n%\n");
    CHECK(as_string(c.validation) == "two two\n%\nfour\n%\n");
    REQUIRE(c.vocabulary_size() == 256);
    for (int b = 0; b < 256; ++b) {
        CHECK(c.byte_token[static_cast<std::size_t>(b)] == b);
        CHECK(c.token_byte[static_cast<std::size_t>(b)] == b);
    }
    CHECK(c.decode(std::vector<std::int32_t>{'o', 'n', 'e'}) == "one");
    CHECK_THROWS_AS(c.decode(std::vector<std::int32_t>{256}), std::out_of_range);

    // The default split: every 10th fortune; with 5 fortunes all are training fortunes.
    const auto c10 = pd::load_text_corpus(d.path, 256);
    CHECK(c10.train_fortunes == 5);
    CHECK(c10.validation_fortunes == 0);
    CHECK(as_string(c10.train) == "one\n%\ntwo two\n%\nthree\n%\nfour\n%\nfive\r\n%\n");
}

TEST_CASE("text corpus: the corpus-bytes vocabulary holds the distinct bytes in ascending order", "[data][text]") {
    temp_dir d("chars");
    write_small_corpus(d.path);
    const auto c =
        pd::load_text_corpus(d.path, 64, {.vocabulary = pd::text_vocabulary::corpus_bytes, .validation_every = 2});
    const std::string all = "one\n%\nthree\n%\nfive\r\n%\ntwo two\n%\nfour\n%\n";
    const std::set<unsigned char> distinct(all.begin(), all.end());
    REQUIRE(c.vocabulary_size() == distinct.size());
    CHECK(std::vector<std::uint8_t>(distinct.begin(), distinct.end()) == c.token_byte);
    CHECK(c.byte_token['\n'] == 0);  // the smallest byte present ('\r' is 13 > '\n' 10)
    CHECK(c.byte_token['z'] == -1);
    std::vector<std::int32_t> ids(c.train.begin(), c.train.end());
    CHECK(std::all_of(ids.begin(), ids.end(), [&](std::int32_t t) { return t < std::int32_t(distinct.size()); }));
    CHECK(c.decode(ids) == "one\n%\nthree\n%\nfive\r\n%\n");
    // Exactly the model's vocabulary is fine; one token fewer is an error naming both sizes.
    CHECK_NOTHROW(pd::load_text_corpus(d.path, distinct.size(), {.vocabulary = pd::text_vocabulary::corpus_bytes}));
    CHECK_THAT(data_error_message([&] {
                   (void)pd::load_text_corpus(d.path, distinct.size() - 1,
                                              {.vocabulary = pd::text_vocabulary::corpus_bytes});
               }),
               StartsWith(d.path.string() + ": the corpus vocabulary has " + std::to_string(distinct.size()) +
                          " tokens (distinct bytes of the corpus), more than the model's vocabulary of " +
                          std::to_string(distinct.size() - 1)));
}

TEST_CASE("text corpus: next-token sequences and their seeded order", "[data][text]") {
    temp_dir d("seq");
    write_small_corpus(d.path);
    const auto c = pd::load_text_corpus(d.path, 256, {.validation_every = 2});
    const std::string train = as_string(c.train);  // 22 tokens
    const auto seqs = pd::train_sequences(c, 4);
    REQUIRE(seqs.count() == (train.size() - 1) / 4);
    std::vector<std::int32_t> in(4), tg(4);
    for (std::size_t i = 0; i < seqs.count(); ++i) {
        seqs.sequence(i, in.data(), tg.data());
        for (std::size_t l = 0; l < 4; ++l) {
            CHECK(in[l] == static_cast<unsigned char>(train[i * 4 + l]));
            CHECK(tg[l] == static_cast<unsigned char>(train[i * 4 + l + 1]));  // inputs shifted by one
        }
    }
    CHECK_THROWS_AS(seqs.sequence(seqs.count(), in.data(), tg.data()), std::out_of_range);
    // L = |stream| - 1: exactly one window, its last target the last token.
    const auto one = pd::train_sequences(c, train.size() - 1);
    CHECK(one.count() == 1);

    // A micro-batch of b = 3 in epoch order: the same seed and epoch give the same order, every sequence once.
    const auto order = pd::epoch_permutation(7, 0, seqs.count());
    CHECK(order == pd::epoch_permutation(7, 0, seqs.count()));
    CHECK(order != pd::epoch_permutation(7, 1, seqs.count()));
    std::vector<std::int32_t> inputs(3 * 4), targets(3 * 4);
    seqs.gather(order, 1, 3, inputs.data(), targets.data());
    for (std::size_t n = 0; n < 3; ++n) {
        seqs.sequence(order[1 + n], in.data(), tg.data());
        CHECK(std::equal(in.begin(), in.end(), inputs.begin() + static_cast<std::ptrdiff_t>(n * 4)));
        CHECK(std::equal(tg.begin(), tg.end(), targets.begin() + static_cast<std::ptrdiff_t>(n * 4)));
    }
    CHECK_THROWS_AS(seqs.gather(order, order.size() - 1, 2, inputs.data(), targets.data()), std::out_of_range);
    // first + b wrapping past 2^64 is rejected too (an unchecked first = 2^64 - 1 reads the entry before the order).
    const std::vector<std::uint32_t> storage{0, 1, 0};
    const std::span<const std::uint32_t> view = std::span(storage).subspan(1);
    CHECK_THROWS_AS(seqs.gather(view, SIZE_MAX, 2, inputs.data(), targets.data()), std::out_of_range);
    const std::vector<std::uint32_t> bad{static_cast<std::uint32_t>(seqs.count())};
    CHECK_THROWS_AS(seqs.gather(bad, 0, 1, inputs.data(), targets.data()), std::out_of_range);
}

TEST_CASE("text dataset: float-valued token inputs, next-token targets, validation arrays", "[data][text]") {
    temp_dir d("dataset");
    write_small_corpus(d.path);
    const auto c = pd::load_text_corpus(d.path, 256, {.validation_every = 2});
    const std::string train = as_string(c.train), validation = as_string(c.validation);
    pd::text_dataset moved(pd::load_text_corpus(d.path, 256, {.validation_every = 2}), 3);
    const pd::text_dataset ds = std::move(moved);  // the sequences still refer to the corpus after a move
    REQUIRE(ds.length() == 3);
    REQUIRE(ds.train().count() == (train.size() - 1) / 3);
    REQUIRE(ds.validation().count() == (validation.size() - 1) / 3);
    CHECK(ds.vocabulary_size() == 256);

    const auto order = pd::epoch_permutation(3, 1, ds.train().count());
    std::vector<float> x(2 * 3);
    std::vector<std::int32_t> y(2 * 3);
    ds.gather_train(order, 2, 2, x.data(), y.data());
    for (std::size_t n = 0; n < 2; ++n)
        for (std::size_t l = 0; l < 3; ++l) {
            const std::size_t at = order[2 + n] * 3 + l;
            CHECK(x[n * 3 + l] == static_cast<float>(static_cast<unsigned char>(train[at])));
            CHECK(y[n * 3 + l] == static_cast<unsigned char>(train[at + 1]));
        }
    CHECK_THROWS_AS(ds.gather_train(order, order.size() - 1, 2, x.data(), y.data()), std::out_of_range);

    const auto all = ds.validation_arrays<double>();
    CHECK(all.count == ds.validation().count());
    const auto two = ds.validation_arrays<float>(2);
    REQUIRE(two.count == 2);
    REQUIRE(two.inputs.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {  // stream order: sequence 0 then 1
        CHECK(two.inputs[i] == static_cast<float>(static_cast<unsigned char>(validation[i])));
        CHECK(two.targets[i] == static_cast<unsigned char>(validation[i + 1]));
    }
    CHECK(ds.validation_arrays<float>(1000).count == all.count);
    CHECK_THAT(data_error_message([&] { pd::text_dataset(pd::load_text_corpus(d.path, 256), 1000); }),
               Contains("sequence length 1000"));
}

TEST_CASE("text corpus: errors name the path and the reason", "[data][text]") {
    temp_dir d("errors");
    const fs::path missing = d.path / "no-such-dir";
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(missing, 256); }),
               StartsWith(missing.string() + ": text corpus directory not found"));
    write(d.path / "plain", "x\n");
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(d.path / "plain", 256); }),
               StartsWith((d.path / "plain").string() + ": not a directory"));

    const fs::path empty = d.path / "empty";
    fs::create_directories(empty / "off");
    write(empty / "cookie.dat", "index");
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(empty, 256); }),
               StartsWith(empty.string() + ": empty corpus: no plain-text fortune files"));
    write(empty / "cookie", "%\n%\n%\n");
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(empty, 256); }),
               StartsWith(empty.string() + ": empty corpus: 1 file(s) of 6 bytes hold no fortune text"));

    const fs::path binary = d.path / "binary";
    fs::create_directories(binary);
    write(binary / "index", std::string("ab\0cd", 5));
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(binary, 256); }),
               StartsWith((binary / "index").string() + ": not a plain-text fortune file (NUL byte at offset 2)"));

    const fs::path small = d.path / "small";
    fs::create_directories(small);
    write_small_corpus(small);
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(small, 255); }),
               StartsWith(small.string() + ": the corpus vocabulary has 256 tokens (byte-level), more than the "
                                           "model's vocabulary of 255"));
    const auto c = pd::load_text_corpus(small, 256, {.validation_every = 2});  // validation: 17 tokens
    CHECK_THAT(data_error_message([&] { (void)pd::validation_sequences(c, 17); }),
               StartsWith(small.string() + " (validation split): sequence length 17 needs at least 18 tokens "
                                           "(inputs and next-token targets), the stream holds 17"));
    CHECK_NOTHROW(pd::validation_sequences(c, 16));
    CHECK_THROWS_AS(pd::train_sequences(c, 0), std::invalid_argument);
    CHECK_THROWS_AS(pd::load_text_corpus(small, 256, {.validation_every = 1}), std::invalid_argument);
}

TEST_CASE("text corpus: the Debian fortunes corpus loads (>= 1 MB of English text)", "[data][text][debian]") {
    const fs::path dir = pd::default_text_directory;
    INFO(dir.string() << " comes from Debian's `fortunes` package (scripts/install-deps.sh installs it)");
    REQUIRE(fs::is_directory(dir));
    const auto c = pd::load_text_corpus(dir, pd::byte_vocabulary_size);
    INFO(c.files.size() << " files, " << c.file_bytes << " bytes, " << c.train_fortunes << " training and "
                        << c.validation_fortunes << " validation fortunes");
    CHECK(c.file_bytes >= 1'000'000);
    CHECK(c.files.size() >= 40);
    CHECK(std::is_sorted(c.files.begin(), c.files.end()));
    for (const auto& f : c.files) {
        const fs::path p(f);
        CHECK(p.parent_path() == dir);
        CHECK(p.extension() != ".dat");
        CHECK(p.extension() != ".u8");
    }
    CHECK(std::count(c.files.begin(), c.files.end(), (dir / "fortunes").string()) == 1);
    CHECK(std::count(c.files.begin(), c.files.end(), (dir / "computers").string()) == 1);
    const std::size_t total = c.train_fortunes + c.validation_fortunes;
    CHECK(c.validation_fortunes == total / 10);
    CHECK(total > 10'000);
    CHECK(c.vocabulary_size() == 256);
    // Each stream is fortunes each followed by "%\n": as many separator lines as fortunes.
    auto separators = [](const std::vector<std::uint8_t>& s) {
        std::size_t n = s.size() >= 2 && s[0] == '%' && s[1] == '\n' ? 1 : 0;
        for (std::size_t i = 0; i + 2 < s.size(); ++i) n += s[i] == '\n' && s[i + 1] == '%' && s[i + 2] == '\n';
        return n;
    };
    CHECK(separators(c.train) == c.train_fortunes);
    CHECK(separators(c.validation) == c.validation_fortunes);
    CHECK(c.validation.size() * 12 > c.train.size());  // ~1/9 of the training tokens (fortunes vary in length)
    CHECK(c.validation.size() * 6 < c.train.size());
    const auto train = pd::train_sequences(c, 256), validation = pd::validation_sequences(c, 256);
    CHECK(train.count() > 5'000);
    CHECK(validation.count() > 500);
    CHECK_THAT(data_error_message([&] { (void)pd::load_text_corpus(dir, 128); }),
               StartsWith(dir.string() + ": the corpus vocabulary has 256 tokens"));
}
