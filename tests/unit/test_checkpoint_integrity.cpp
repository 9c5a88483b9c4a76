// Checkpoint integrity: every tensor's crc32 (zlib) is in the manifest and checked on load, so a flipped data byte
// or two tensor files of one shape swapped are refused naming the tensor; a version-2 tensor line without its
// checksum is malformed; checkpoints of the earlier format (version 1, no checksums) still load.
#include <catch2/catch.hpp>

#include "unit/temp_dir.hpp"

#include <pipeprop/checkpoint.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <span>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace pp = pipeprop;

namespace {

using test_support::temp_dir;

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

/// Two weight tensors of one shape with different values, and a float64 one.
pp::checkpoint sample() {
    pp::checkpoint c;
    c.signature.layers = {{{"weight", {2, 2}}}, {{"weight", {2, 2}}}};
    c.add_tensor<float>("layer_00.weight", {2, 2}, std::vector<float>{1, 2, 3, 4});
    c.add_tensor<float>("layer_01.weight", {2, 2}, std::vector<float>{5, 6, 7, 8});
    c.add_tensor<double>("history", {3}, std::vector<double>{0.5, 0.25, 0.125});
    c.set_scalar("epoch", std::size_t(1));
    return c;
}

std::string load_error(const fs::path& dir) {
    try {
        (void)pp::load_checkpoint(dir);
    } catch (const pp::checkpoint_error& e) {
        return e.what();
    }
    return "(loaded)";
}

}  // namespace

TEST_CASE("checkpoint integrity: a crc32 per tensor in the manifest, checked on load", "[checkpoint][integrity]") {
    temp_dir tmp("pipeprop-ckcrc-crc");
    const fs::path ck = tmp.path / "ck";
    pp::save_checkpoint(sample(), ck);
    const std::string manifest = read_text(ck / "manifest.txt");
    CHECK(manifest.rfind("pipeprop-checkpoint 2\n", 0) == 0);
    CHECK(std::regex_search(manifest, std::regex("tensor layer_00.weight float32 \\[2,2\\] crc32=[0-9a-f]{8}\n")));
    CHECK_NOTHROW(pp::load_checkpoint(ck));

    SECTION("a flipped data byte is refused naming the tensor") {
        std::string bytes = read_text(ck / "layer_01.weight.npy");
        bytes[bytes.size() - 3] ^= 0x01;  // in the last value's mantissa: still a finite float, same size
        write_text(ck / "layer_01.weight.npy", bytes);
        CHECK_THAT(load_error(ck), Catch::Contains("tensor 'layer_01.weight' does not match its checksum"));
    }
    SECTION("two tensor files of one shape swapped are refused") {
        fs::rename(ck / "layer_00.weight.npy", tmp.path / "swap.npy");
        fs::rename(ck / "layer_01.weight.npy", ck / "layer_00.weight.npy");
        fs::rename(tmp.path / "swap.npy", ck / "layer_01.weight.npy");
        CHECK_THAT(load_error(ck), Catch::Contains("tensor 'layer_00.weight' does not match its checksum"));
    }
    SECTION("a version-2 tensor line without its checksum is malformed") {
        write_text(ck / "manifest.txt", std::regex_replace(manifest, std::regex(" crc32=[0-9a-f]{8}\n"), "\n",
                                                           std::regex_constants::format_first_only));
        CHECK_THAT(load_error(ck), Catch::Contains("no crc32=<8 hex digits>"));
    }
    SECTION("a wrong checksum in the manifest is refused") {
        const std::string edited = std::regex_replace(manifest, std::regex("(history float64 \\[3\\]) crc32=[0-9a-f]{8}"),
                                                      "$1 crc32=00000000");
        REQUIRE(edited != manifest);
        write_text(ck / "manifest.txt", edited);
        CHECK_THAT(load_error(ck), Catch::Contains("tensor 'history' does not match its checksum"));
    }
}

TEST_CASE("checkpoint integrity: checkpoints of format version 1 (no checksums) still load",
          "[checkpoint][integrity]") {
    // Decision: a user's checkpoints written before the checksums must resume; they get the checks they had then
    // (format, dtype, shape, size of every file), not a checksum.
    temp_dir tmp("pipeprop-ckcrc-v1");
    const fs::path ck = tmp.path / "ck";
    pp::save_checkpoint(sample(), ck);
    std::string v1 = std::regex_replace(read_text(ck / "manifest.txt"), std::regex(" crc32=[0-9a-f]{8}"), "");
    v1.replace(0, std::string("pipeprop-checkpoint 2").size(), "pipeprop-checkpoint 1");
    write_text(ck / "manifest.txt", v1);
    const pp::checkpoint c = pp::load_checkpoint(ck);
    std::vector<float> w(4);
    c.read_tensor<float>("layer_01.weight", {2, 2}, std::span<float>(w));
    CHECK(w == std::vector<float>{5, 6, 7, 8});
    // A version-1 line with a checksum, or a version this build does not know, is refused.
    write_text(ck / "manifest.txt", "pipeprop-checkpoint 3\n" + v1.substr(v1.find('\n') + 1));
    CHECK_THAT(load_error(ck), Catch::Contains("unsupported checkpoint format version") && Catch::Contains("1 to 2"));
}
