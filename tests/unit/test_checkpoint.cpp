// Checkpoints: round trip of tensors (float32 / float64) and scalars; numpy-format files; exact names (layer 1 never
// matches layer 10); rejection of a checkpoint made for another network; atomic overwrite (a failed save keeps the
// previous checkpoint); corrupt and truncated checkpoints are reported with the file name.
#include <catch2/catch.hpp>

#include <pipeprop/checkpoint.hpp>
#include <pipeprop/pipeprop.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace pp = pipeprop;
using pp::shape;

namespace {

struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& tag) {
        path = fs::temp_directory_path() / ("pipeprop-ckpt-" + tag + "-" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

template <class F>
std::string checkpoint_error_of(F&& f) {
    try {
        f();
    } catch (const pp::checkpoint_error& e) {
        return e.what();
    }
    return {};
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Entries of dir whose name starts with prefix (leftover temporary directories).
std::size_t entries_starting_with(const fs::path& dir, const std::string& prefix) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().rfind(prefix, 0) == 0;
    return n;
}

pp::checkpoint sample_checkpoint(float base) {
    pp::checkpoint c;
    c.signature.layers = {{}, {{"weight", {2, 3}}, {"bias", {2}}}};
    const std::vector<float> w{base, 1, 2, 3, 4, 5e-8f}, b{-1.5f, std::numeric_limits<float>::denorm_min()};
    const std::vector<double> d{0.1, 1.0 / 3.0, -2.5e-300};
    c.add_tensor<float>("layer_01.weight", {2, 3}, w);
    c.add_tensor<float>("layer_01.bias", {2}, b);
    c.add_tensor<double>("stage_0.history", {3}, d);
    c.set_scalar("step_count", std::uint64_t(18446744073709551615ull));
    c.set_scalar("offset", std::int64_t(-42));
    c.set_scalar("learning_rate", 0.1);
    c.set_scalar("mode", "sgd with spaces");
    return c;
}

}  // namespace

TEST_CASE("checkpoint: round trip of tensors and scalars, numpy-format files", "[checkpoint]") {
    temp_dir tmp("roundtrip");
    const auto dir = tmp.path / "ckpt";
    const auto c = sample_checkpoint(0.25f);
    pp::save_checkpoint(c, dir);
    CHECK(fs::is_regular_file(dir / "manifest.txt"));
    CHECK(fs::is_regular_file(dir / "layer_01.weight.npy"));
    CHECK(entries_starting_with(tmp.path, "ckpt.tmp-") == 0);

    // The .npy header is numpy's format: magic, version, dict with descr, fortran_order and shape.
    const std::string npy = read_text(dir / "layer_01.weight.npy");
    CHECK(npy.rfind("\x93NUMPY", 0) == 0);
    CHECK_THAT(npy, Catch::Contains("'descr': '<f4'") && Catch::Contains("'fortran_order': False") &&
                        Catch::Contains("'shape': (2, 3)"));
    CHECK_THAT(read_text(dir / "stage_0.history.npy"), Catch::Contains("'descr': '<f8'"));

    const pp::checkpoint l = pp::load_checkpoint(dir);
    CHECK(l.signature == c.signature);
    REQUIRE(l.tensors().size() == 3);
    for (const auto& t : c.tensors()) {
        const auto& u = l.tensor(t.name);
        CHECK(u.shape == t.shape);
        CHECK(u.values == t.values);  // bit-exact (denormals, 5e-8, 1/3 in double)
    }
    CHECK(l.scalar_as<std::uint64_t>("step_count") == 18446744073709551615ull);
    CHECK(l.scalar_as<std::int64_t>("offset") == -42);
    CHECK(l.scalar_as<double>("learning_rate") == 0.1);
    CHECK(l.scalar("mode") == "sgd with spaces");
    CHECK_THAT(checkpoint_error_of([&] { (void)l.scalar("missing"); }), Catch::Contains("'missing'"));
    CHECK_THAT(checkpoint_error_of([&] { (void)l.scalar_as<int>("mode"); }), Catch::Contains("not a valid integer"));

    std::vector<float> out(2);
    CHECK_THAT(checkpoint_error_of([&] { l.read_tensor<float>("layer_01.bias", {3}, std::span<float>(out)); }),
               Catch::Contains("shape [2]"));
    CHECK_THAT(checkpoint_error_of([&] { l.read_tensor<double>("layer_01.bias", {2}, std::span<double>()); }),
               Catch::Contains("float32"));
    pp::checkpoint nan_c;  // a NaN or inf tensor is stored (save does not judge) but never read back
    std::vector<float> with_nan{1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
    std::vector<float> with_inf{1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
    nan_c.add_tensor<float>("w", {3}, with_nan);
    nan_c.add_tensor<float>("v", {3}, with_inf);
    std::vector<float> three(3);
    CHECK_THAT(checkpoint_error_of([&] { nan_c.read_tensor<float>("w", {3}, std::span<float>(three)); }),
               Catch::Contains("'w' holds NaN at index 1"));
    CHECK_THAT(checkpoint_error_of([&] { nan_c.read_tensor<float>("v", {3}, std::span<float>(three)); }),
               Catch::Contains("'v' holds an infinite value at index 2"));

    pp::checkpoint dup;
    dup.add_tensor<float>("a", {2}, out);
    CHECK_THAT(checkpoint_error_of([&] { dup.add_tensor<float>("a", {2}, out); }), Catch::Contains("duplicate"));
    CHECK_THAT(checkpoint_error_of([&] { dup.add_tensor<float>("../x", {2}, out); }), Catch::Contains("invalid"));
    CHECK_THAT(checkpoint_error_of([&] { dup.add_tensor<float>("b", {3}, out); }), Catch::Contains("2 values"));
}

// Eleven layers with parameters at positions 1 and 10: their tensors must never be confused.
using net11 = pp::network<shape<4>, pp::relu, pp::dense<4>, pp::relu, pp::relu, pp::relu, pp::relu, pp::relu, pp::relu,
                          pp::relu, pp::relu, pp::dense<3>>;

TEST_CASE("checkpoint: exact names, layer 1 never matches layer 10", "[checkpoint][names]") {
    CHECK(pp::network_tensor_name(1, 11, "weight") == "layer_01.weight");
    CHECK(pp::network_tensor_name(10, 11, "weight", "velocity") == "layer_10.weight.velocity");
    CHECK(pp::network_tensor_name(3, 101, "bias") == "layer_003.bias");

    using stack = pp::layer_stack<net11, float>;
    std::vector<float> w(stack::parameter_count);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) + 0.5f;
    pp::checkpoint c;
    c.signature = pp::signature_of<net11, float>();
    pp::add_network_tensors<net11, float>(c, w);
    CHECK(c.has_tensor("layer_01.weight"));
    CHECK(c.has_tensor("layer_10.weight"));
    CHECK_FALSE(c.has_tensor("layer_1.weight"));
    CHECK_FALSE(c.has_tensor("layer_1"));
    CHECK_FALSE(c.has_tensor("layer_01"));

    temp_dir tmp("names");
    pp::save_checkpoint(c, tmp.path / "c");
    CHECK(fs::is_regular_file(tmp.path / "c" / "layer_01.weight.npy"));
    CHECK(fs::is_regular_file(tmp.path / "c" / "layer_10.bias.npy"));
    const auto l = pp::load_checkpoint(tmp.path / "c");
    std::vector<float> r(stack::parameter_count, -1.0f);
    pp::read_network_tensors<net11, float>(l, std::span<float>(r));
    CHECK(r == w);  // each value back in its own layer

    // A checkpoint that lacks layer 1's weight must fail on exactly that name, although layer_10.weight is there.
    pp::checkpoint partial;
    partial.signature = c.signature;
    for (const auto& t : c.tensors())
        if (t.name != "layer_01.weight")
            partial.add_tensor<float>(t.name, t.shape, std::get<std::vector<float>>(t.values));
    const auto msg = checkpoint_error_of([&] { pp::read_network_tensors<net11, float>(partial, std::span<float>(r)); });
    CHECK_THAT(msg, Catch::Contains("'layer_01.weight'"));
}

using net_a = pp::network<shape<6>, pp::dense<8>, pp::relu, pp::dense<3>>;
using net_b = pp::network<shape<6>, pp::dense<5>, pp::relu, pp::dense<3>>;
using net_c = pp::network<shape<6>, pp::dense<8>, pp::relu, pp::dense<8>, pp::relu, pp::dense<3>>;

TEST_CASE("checkpoint: a checkpoint made for another network is rejected with the difference", "[checkpoint]") {
    pp::checkpoint c;
    c.signature = pp::signature_of<net_a, float>();
    std::vector<float> w(pp::layer_stack<net_a, float>::parameter_count, 1.0f);
    pp::add_network_tensors<net_a, float>(c, w);
    temp_dir tmp("mismatch");
    pp::save_checkpoint(c, tmp.path / "a");
    const auto l = pp::load_checkpoint(tmp.path / "a");
    CHECK_NOTHROW(pp::require_signature(l, pp::signature_of<net_a, float>(), "a"));
    auto msg = checkpoint_error_of([&] { pp::require_signature(l, pp::signature_of<net_b, float>(), "ckpt-a"); });
    CHECK_THAT(msg, Catch::Contains("ckpt-a") && Catch::Contains("layer 0 differs") &&
                        Catch::Contains("weight[8,6]") && Catch::Contains("weight[5,6]"));
    msg = checkpoint_error_of([&] { pp::require_signature(l, pp::signature_of<net_c, float>(), "ckpt-a"); });
    CHECK_THAT(msg, Catch::Contains("3 layers") && Catch::Contains("5 layers"));
}

TEST_CASE("checkpoint: atomic overwrite; a failed save keeps the previous checkpoint", "[checkpoint][atomic]") {
    temp_dir tmp("atomic");
    const auto dir = tmp.path / "ckpt";
    pp::save_checkpoint(sample_checkpoint(1.0f), dir);
    pp::save_checkpoint(sample_checkpoint(2.0f), dir);  // replaces the first one
    auto first_value = [&] {
        std::vector<float> v(6);
        pp::load_checkpoint(dir).read_tensor<float>("layer_01.weight", {2, 3}, std::span<float>(v));
        return v[0];
    };
    CHECK(first_value() == 2.0f);
    CHECK(entries_starting_with(tmp.path, "ckpt.") == 0);

    // Fail in the middle of the next save (after the first tensor file): the old checkpoint is untouched and the
    // temporary directory is gone.
    const auto msg = checkpoint_error_of([&] {
        pp::detail::save_checkpoint_impl(sample_checkpoint(3.0f), dir, [](const fs::path& p) {
            if (p.filename() == "layer_01.bias.npy") throw std::runtime_error("simulated disk full");
        });
    });
    CHECK_THAT(msg, Catch::Contains("previous checkpoint kept") && Catch::Contains("simulated disk full"));
    CHECK(first_value() == 2.0f);
    CHECK(entries_starting_with(tmp.path, "ckpt.") == 0);

    // A crashed save of another process leaves <dir>.tmp-<pid>: the checkpoint still loads, the next save works.
    fs::create_directories(tmp.path / "ckpt.tmp-999999999");
    std::ofstream(tmp.path / "ckpt.tmp-999999999" / "layer_01.weight.npy") << "partial";
    CHECK(first_value() == 2.0f);
    pp::save_checkpoint(sample_checkpoint(4.0f), dir);
    CHECK(first_value() == 4.0f);

    // Never replaces a directory that is not a checkpoint.
    fs::create_directories(tmp.path / "precious");
    std::ofstream(tmp.path / "precious" / "notes.txt") << "keep me";
    CHECK_THAT(checkpoint_error_of([&] { pp::save_checkpoint(sample_checkpoint(1.0f), tmp.path / "precious"); }),
               Catch::Contains("not a pipeprop checkpoint"));
    CHECK(fs::is_regular_file(tmp.path / "precious" / "notes.txt"));
}

TEST_CASE("checkpoint: missing, corrupt and truncated checkpoints name the file", "[checkpoint]") {
    temp_dir tmp("corrupt");
    const auto dir = tmp.path / "ckpt";
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }), Catch::Contains("not found"));
    pp::save_checkpoint(sample_checkpoint(1.0f), dir);

    // Truncated tensor file.
    const auto npy = dir / "layer_01.weight.npy";
    const std::string full = read_text(npy);
    std::ofstream(npy, std::ios::binary | std::ios::trunc) << full.substr(0, full.size() - 3);
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains(npy.string()) && Catch::Contains("truncated"));
    // Garbage instead of a .npy file of the right size.
    std::ofstream(npy, std::ios::binary | std::ios::trunc) << std::string(full.size(), 'x');
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains(npy.string()) && Catch::Contains("not a valid float32 .npy"));
    // Missing tensor file.
    fs::remove(npy);
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains(npy.string()) && Catch::Contains("missing"));

    // Unknown format version; not a manifest; truncated manifest; no manifest.
    pp::save_checkpoint(sample_checkpoint(1.0f), dir);
    const auto manifest = dir / "manifest.txt";
    std::string text = read_text(manifest);
    std::ofstream(manifest, std::ios::trunc) << "pipeprop-checkpoint 7\n" << text.substr(text.find('\n') + 1);
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains("unsupported checkpoint format version") && Catch::Contains("7"));
    std::ofstream(manifest, std::ios::trunc) << "hello\n";
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains("not a pipeprop checkpoint manifest"));
    std::ofstream(manifest, std::ios::trunc) << text.substr(0, text.find("end\n"));
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }), Catch::Contains("no 'end' line"));
    fs::remove(manifest);
    CHECK_THAT(checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); }),
               Catch::Contains(dir.string()) && Catch::Contains("manifest.txt"));
}

TEST_CASE("checkpoint: a .npy header is checked against the manifest and the file size before allocation",
          "[checkpoint]") {
    temp_dir tmp("npy-header");
    const auto dir = tmp.path / "ckpt";
    pp::save_checkpoint(sample_checkpoint(1.0f), dir);
    const auto npy = dir / "layer_01.weight.npy";  // manifest: float32 [2,3]
    const std::string full = read_text(npy);
    const std::string data = full.substr(full.size() - 6 * sizeof(float));
    // A version 1.0 .npy file with the given header dict (padded to a 64-byte multiple) and the 24 data bytes.
    auto npy_with = [&](const std::string& dict) {
        std::string header = dict;
        while ((10 + header.size() + 1) % 64 != 0) header += ' ';
        header += '\n';
        std::string out("\x93NUMPY\x01\x00", 8);
        out += static_cast<char>(header.size() & 0xff);
        out += static_cast<char>(header.size() >> 8);
        std::ofstream(npy, std::ios::binary | std::ios::trunc) << out << header << data;
    };
    // The header claims 10^12 x 256 floats (1 PB): before the check, xtensor allocated that before reading.
    npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 256), }");
    auto msg = checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); });
    CHECK_THAT(msg, Catch::Contains(npy.string()) &&
                        Catch::Contains("the .npy header declares shape [1000000000000,256], the manifest [2,3]"));
    // The right shape, another dtype.
    npy_with("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
    msg = checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); });
    CHECK_THAT(msg, Catch::Contains("dtype '<f8'"));
    // A header length beyond the file.
    std::ofstream(npy, std::ios::binary | std::ios::trunc) << std::string("\x93NUMPY\x02\x00\xf0\xff\xff\xff", 12)
                                                           << std::string(40, ' ');
    msg = checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); });
    CHECK_THAT(msg, Catch::Contains("header length 4294967280 exceeds the file size"));
    // Dictionaries xtensor 0.24's header parser cannot take (it calls back() on empty pieces: undefined behaviour,
    // found by fuzz_checkpoint, tests/fuzz/crashes/checkpoint/npy-header-shape-without-colon) are refused first.
    const std::pair<const char*, const char*> malformed[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape'x (2, 3), }", "no ':' after 'shape'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape':, }", "malformed 'shape' value"},
        {"{'descr':, 'fortran_order': False, 'shape': (2, 3), }", "malformed 'descr' value"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", "fortran_order must be False"},
        {"{'shape': (2, 3), 'descr': '<f4', 'fortran_order': False, }", "not in the order"},
        {"'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "not a {...} dictionary"},
        {"{'descr': '<f4', 'shape': (2, 3), }", "no 'fortran_order' key"},
    };
    for (const auto& [dict, why] : malformed) {
        CAPTURE(dict);
        npy_with(dict);
        msg = checkpoint_error_of([&] { (void)pp::load_checkpoint(dir); });
        CHECK_THAT(msg, Catch::Contains(npy.string()) && Catch::Contains(why));
    }
    // The original header and data load again.
    npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    CHECK_NOTHROW(pp::load_checkpoint(dir));
}

TEST_CASE("checkpoint: a save removes the temporary directories of dead processes, not of live ones",
          "[checkpoint][atomic]") {
    temp_dir tmp("stale");
    const auto dir = tmp.path / "ckpt";
    pp::save_checkpoint(sample_checkpoint(1.0f), dir);
    // Leftovers of saves killed with kill -9: pids beyond pid_max (never alive). The parent process is alive: its
    // directory stands for a concurrent writer's and must survive, as must another checkpoint's leftovers.
    const auto dead_tmp = tmp.path / "ckpt.tmp-999999999", dead_old = tmp.path / "ckpt.old-999999998";
    const auto live_tmp = tmp.path / ("ckpt.tmp-" + std::to_string(::getppid()));
    const auto other = tmp.path / "other.tmp-999999999", not_a_pid = tmp.path / "ckpt.tmp-12x";
    for (const auto& d : {dead_tmp, dead_old, live_tmp, other, not_a_pid}) {
        fs::create_directories(d);
        std::ofstream(d / "layer_01.weight.npy") << "partial";
    }
    pp::save_checkpoint(sample_checkpoint(2.0f), dir);
    CHECK_FALSE(fs::exists(dead_tmp));
    CHECK_FALSE(fs::exists(dead_old));
    CHECK(fs::exists(live_tmp / "layer_01.weight.npy"));
    CHECK(fs::exists(other / "layer_01.weight.npy"));
    CHECK(fs::exists(not_a_pid));
    std::vector<float> v(6);
    pp::load_checkpoint(dir).read_tensor<float>("layer_01.weight", {2, 3}, std::span<float>(v));
    CHECK(v[0] == 2.0f);
}
