// Checkpoint saves never destroy what is not theirs: a user's files inside the checkpoint directory survive every
// save (also a file still open for writing), a checkpoint path that is a symbolic link is written through (the link
// stays), and a save killed between the two renames of a directory swap without RENAME_EXCHANGE leaves
// <dir>.old-<pid>, which the next load or save renames back instead of deleting the only copy.
#include <catch2/catch.hpp>

#include "unit/temp_dir.hpp"

#include <pipeprop/checkpoint.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace pp = pipeprop;

namespace {

using test_support::temp_dir;

pp::checkpoint sample(float first) {
    pp::checkpoint c;
    c.signature.layers = {{{"weight", {2}}}};
    c.add_tensor<float>("layer_00.weight", {2}, std::vector<float>{first, 1.0f});
    c.set_scalar("epoch", std::size_t(1));
    return c;
}

float first_value(const fs::path& dir) {
    std::vector<float> v(2);
    pp::load_checkpoint(dir).read_tensor<float>("layer_00.weight", {2}, std::span<float>(v));
    return v[0];
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("checkpoint save: the user's files inside the checkpoint directory survive", "[checkpoint][directories]") {
    temp_dir tmp("pipeprop-ckdirs-user-files");
    const fs::path ck = tmp.path / "ck";
    pp::save_checkpoint(sample(1.0f), ck);
    std::ofstream metrics(ck / "metrics.jsonl");  // open across the saves, as the main program's --metrics file
    metrics << "{\"epoch\":1}\n" << std::flush;
    fs::create_directories(ck / "notes");
    std::ofstream(ck / "notes" / "a.txt") << "keep me";
    fs::create_symlink("notes/a.txt", ck / "link.txt");

    pp::save_checkpoint(sample(2.0f), ck);
    metrics << "{\"epoch\":2}\n" << std::flush;
    pp::save_checkpoint(sample(3.0f), ck);
    metrics << "{\"epoch\":3}\n" << std::flush;

    CHECK(first_value(ck) == 3.0f);
    CHECK(read_text(ck / "metrics.jsonl") == "{\"epoch\":1}\n{\"epoch\":2}\n{\"epoch\":3}\n");
    CHECK(read_text(ck / "notes" / "a.txt") == "keep me");
    CHECK(fs::is_symlink(ck / "link.txt"));
    CHECK(read_text(ck / "link.txt") == "keep me");
    for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename() == "ck");

    // A user's file named like one of the new checkpoint's files is not overwritten: the save fails, nothing lost.
    pp::checkpoint bigger = sample(4.0f);
    bigger.add_tensor<float>("extra", {1}, std::vector<float>{5.0f});
    std::ofstream(ck / "extra.npy") << "mine";
    CHECK_THROWS_WITH(pp::save_checkpoint(bigger, ck), Catch::Contains("extra.npy") && Catch::Contains("move it"));
    CHECK(read_text(ck / "extra.npy") == "mine");
    CHECK(first_value(ck) == 3.0f);
}

TEST_CASE("checkpoint save: a checkpoint path that is a symbolic link is written through", "[checkpoint][directories]") {
    temp_dir tmp("pipeprop-ckdirs-symlink");
    const fs::path real = tmp.path / "disk" / "ck", link = tmp.path / "ck";
    fs::create_directories(tmp.path / "disk");
    fs::create_directory_symlink(real, link);  // dangling until the first save
    pp::save_checkpoint(sample(1.0f), link);
    CHECK(fs::is_symlink(link));
    CHECK(first_value(real) == 1.0f);
    pp::save_checkpoint(sample(2.0f), link);
    CHECK(fs::is_symlink(link));
    CHECK(fs::read_symlink(link) == real);
    CHECK(first_value(link) == 2.0f);
    CHECK_NOTHROW(pp::check_checkpoint_destination(link));
}

TEST_CASE("checkpoint save: a save killed between its two renames loses nothing", "[checkpoint][directories]") {
    temp_dir tmp("pipeprop-ckdirs-interrupted");
    const fs::path ck = tmp.path / "ck";
    // The state a save without RENAME_EXCHANGE leaves when killed after moving <dir> aside: the only copy is in
    // <dir>.old-<pid> of a process that no longer exists (a pid beyond pid_max), the new one in <dir>.tmp-<pid>.
    const fs::path old = tmp.path / "ck.old-999999999", partial = tmp.path / "ck.tmp-999999999";
    pp::save_checkpoint(sample(1.0f), old);
    fs::create_directories(partial);
    std::ofstream(partial / "layer_00.weight.npy") << "partial";

    CHECK(first_value(ck) == 1.0f);  // the load renames it back
    CHECK(fs::is_directory(ck));
    CHECK_FALSE(fs::exists(old));

    // Again, and this time the next save fails: the old copy is renamed back, never deleted.
    fs::rename(ck, old);
    CHECK_THROWS(pp::detail::save_checkpoint_impl(sample(2.0f), ck, [](const fs::path&) {
        throw std::runtime_error("simulated disk full");
    }));
    CHECK(first_value(ck) == 1.0f);
    CHECK_FALSE(fs::exists(partial));

    // A live process's .old directory is left alone (a concurrent save in progress).
    fs::remove_all(ck);
    const fs::path live = tmp.path / ("ck.old-" + std::to_string(::getppid()));
    pp::save_checkpoint(sample(3.0f), live);
    CHECK_THROWS_WITH(pp::load_checkpoint(ck), Catch::Contains("not found"));
    CHECK(first_value(live) == 3.0f);
}
