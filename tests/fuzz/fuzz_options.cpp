// tests/fuzz/fuzz_options.cpp: seeded mutation fuzzer of the main program's option parsing.
//
// The parsing lives in examples/pipeprop_train.cpp's main() (CLI11 app, per-mode option groups, cross-mode checks,
// each mode's validate), so it is fuzzed through argv vectors on the built program. Each case runs
//   <program> --data <scratch>/no-data <generated tokens...>
// in a scratch working directory with stdin from /dev/null. The data directory does not exist, so every accepted
// command line ends at data loading with exit 1 ("data error: ... not found"): runs are short and bounded, and what
// is tested is the parsing and validation up to there (checks that need the data, such as --batch larger than the
// training set, are ctests of examples/). Generated tokens never name --data, and path values are relative to the
// scratch directory, so no run reads or writes outside it.
//
// Tokens: option names read from `<program> --help` (so new options are fuzzed without touching this file) plus
// unknown ones, values from a dictionary (numbers at and past every range bound, NaN, infinities, overflowing
// integers, hex, empty, whitespace, mode / network / schedule names, split lists, long and non-ASCII strings, paths),
// in the forms `--opt value`, `--opt=value` and `--opt`; half the cases mutate a seed command line (one per line
// in tests/fuzz/corpus/options/*.args) by replacing, dropping, duplicating, swapping or inserting tokens.
//
// A case passes when the program exits normally with 0 (--help), 1 (error: stderr names "pipeprop_train: ") or
// 2 (bad option: stderr starts with "pipeprop_train: "), within --timeout seconds, with no sanitizer report, no
// "terminate called", no std::bad_alloc under the address-space limit (--memory-mb, default 2048 MiB; not applied to
// an ASan build, which gets ASan's max_allocation_size_mb instead) and less than 4 MiB of output.
//
// Usage: fuzz_options --program PATH [--runs N] [--seed S] [--jobs J] [--timeout SECONDS] [--memory-mb M]
//                     [--asan] [--corpus DIR] [--failures DIR]
// Prints one summary line; exit 0 when every case passed, 1 otherwise (each failing command line is printed and,
// with --failures, saved there one token per line, loadable as a seed).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct config {
    std::string program;
    std::uint64_t runs = 200;
    std::uint64_t seed = 1;
    unsigned jobs = 1;
    double timeout_s = 30;
    std::uint64_t memory_mb = 2048;
    bool asan = false;
    std::string corpus;
    std::string failures;
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "fuzz_options: " << why
              << "\nusage: fuzz_options --program PATH [--runs N] [--seed S] [--jobs J] [--timeout SECONDS] "
                 "[--memory-mb M] [--asan] [--corpus DIR] [--failures DIR]\n";
    std::exit(2);
}

std::string read_file(const fs::path& p, std::size_t limit = std::size_t(1) << 22) {
    std::ifstream in(p, std::ios::binary);
    std::string s;
    s.resize(limit + 1);
    in.read(s.data(), static_cast<std::streamsize>(s.size()));
    s.resize(static_cast<std::size_t>(in.gcount()));
    return s;
}

std::string shell_quote(const std::vector<std::string>& argv) {
    std::string out;
    for (const auto& a : argv) {
        if (!out.empty()) out += ' ';
        out += '\'';
        for (char c : a) {
            if (c == '\'') out += "'\\''";
            else if (static_cast<unsigned char>(c) < 0x20) out += "'$'\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 15]) +
                                                              std::string(1, "0123456789abcdef"[c & 15]) + "''";
            else out += c;
        }
        out += '\'';
    }
    return out;
}

/// Runs argv (argv[0] = program) with stdout / stderr to files; returns the wait status, or -1 on timeout (killed).
struct child {
    pid_t pid = -1;
    std::chrono::steady_clock::time_point start;
    std::vector<std::string> argv;
    fs::path out, err;
};

child spawn(const config& c, const fs::path& cwd, std::vector<std::string> argv, unsigned slot) {
    child ch;
    ch.argv = std::move(argv);
    ch.out = cwd / ("stdout-" + std::to_string(slot));
    ch.err = cwd / ("stderr-" + std::to_string(slot));
    ch.start = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid < 0) {
        std::perror("fuzz_options: fork");
        std::exit(2);
    }
    if (pid == 0) {
        ::setpgid(0, 0);
        if (::chdir(cwd.c_str()) != 0) ::_exit(120);
        const int in = ::open("/dev/null", O_RDONLY);
        const int o = ::open(ch.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = ::open(ch.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || o < 0 || e < 0) ::_exit(121);
        ::dup2(in, 0);
        ::dup2(o, 1);
        ::dup2(e, 2);
        if (!c.asan) {
            rlimit as{c.memory_mb << 20, c.memory_mb << 20};
            ::setrlimit(RLIMIT_AS, &as);
        }
        rlimit cpu{static_cast<rlim_t>(c.timeout_s) + 1, static_cast<rlim_t>(c.timeout_s) + 2};
        ::setrlimit(RLIMIT_CPU, &cpu);
        rlimit core{0, 0};
        ::setrlimit(RLIMIT_CORE, &core);
        ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
        // A sanitizer report must not look like the program's own exit codes 1 and 2.
        const std::string asan = "exitcode=86:detect_leaks=1:allocator_may_return_null=0:max_allocation_size_mb=" +
                                 std::to_string(c.memory_mb);
        ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
        ::setenv("UBSAN_OPTIONS", "halt_on_error=1:exitcode=87:print_stacktrace=1", 1);
        std::vector<char*> args;
        for (auto& a : ch.argv) args.push_back(a.data());
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        ::_exit(122);
    }
    ch.pid = pid;
    return ch;
}

/// Why the finished case failed ("" = passed); counts exit codes.
std::string judge(const child& ch, int status, bool timed_out, std::map<std::string, std::uint64_t>& outcomes) {
    const std::string out = read_file(ch.out), err = read_file(ch.err);
    if (timed_out) return "no exit within the timeout (hang)";
    if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
    if (!WIFEXITED(status)) return "did not exit normally";
    const int code = WEXITSTATUS(status);
    outcomes["exit " + std::to_string(code)]++;
    if (out.size() + err.size() > (std::size_t(4) << 20)) return "more than 4 MiB of output";
    for (const char* bad : {"AddressSanitizer", "LeakSanitizer", "runtime error:", "terminate called", "bad_alloc",
                            "Segmentation fault"})
        if (err.find(bad) != std::string::npos || out.find(bad) != std::string::npos)
            return std::string("output contains '") + bad + "'";
    switch (code) {
        case 0:
            if (out.find("Usage:") == std::string::npos) return "exit 0 without a usage text (no --help given?)";
            return {};
        case 1:
            if (err.find("pipeprop_train: ") == std::string::npos) return "exit 1 without a 'pipeprop_train: ' message";
            return {};
        case 2:
            if (err.rfind("pipeprop_train: ", 0) != 0) return "exit 2 whose stderr does not start with 'pipeprop_train: '";
            return {};
        default:
            return "exit code " + std::to_string(code) + " (expected 0, 1 or 2)";
    }
}

class generator {
public:
    generator(std::uint64_t seed, std::vector<std::string> options, std::vector<std::vector<std::string>> seeds)
        : rng_(seed), options_(std::move(options)), seeds_(std::move(seeds)) {
        for (const char* u : {"--", "-h", "--help", "-x", "--unknown-option", "---batch", "--Batch", "-", "--=",
                              "--batch=", "-mode", "--data"})
            extra_options_.push_back(u);
    }

    std::vector<std::string> next() {
        std::vector<std::string> t;
        if (!seeds_.empty() && coin(0.5)) {
            t = seeds_[pick(seeds_.size())];
            const std::size_t edits = 1 + pick(4);
            for (std::size_t e = 0; e < edits; ++e) mutate(t);
        } else {
            const std::size_t n = pick(7);
            for (std::size_t i = 0; i < n; ++i) append_option(t);
        }
        // Never let a generated token name the data directory or the help-less config: the prefix pins --data.
        std::erase_if(t, [](const std::string& s) { return s.rfind("--data", 0) == 0; });
        return t;
    }

private:
    bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

    std::string option_name() {
        if (coin(0.05)) return extra_options_[pick(extra_options_.size())];
        return options_[pick(options_.size())];
    }

    std::string value() {
        static const std::vector<std::string> dict = {
            "0", "1", "2", "3", "4", "7", "10", "32", "-1", "-5", "-0", "+3", "1e6", "1e9", "1e-9", "1e-12", "1e400",
            "-1e400", "1e-400", "nan", "NaN", "-nan", "inf", "-inf", "infinity", "0x10", "010", "1.5", "0.999999999",
            "1.0", "0.9", "0.05", " 3", "3 ", "", " ", "\t", "1048576", "1048577", "65536", "65537", "4096", "4097",
            "1000000", "1000001", "1024", "1025", "2147483648", "4294967296", "18446744073709551615",
            "18446744073709551616", "99999999999999999999", "9223372036854775807", "-9223372036854775809",
            "sgd", "pb", "sync", "cnn", "mlp", "none", "sc", "lwp", "sc_lwp", "stash", "pipemare", "fine",
            "fine-own", "concurrent", "sequential", "gpipe", "1f1b", "zb_h1", "zb_h2", "zb_h3", "on", "off",
            "true", "false", "constant", "step", "cosine", "auto", "bar", "log", "balanced", "balanced:0",
            "balanced:1", "balanced:2", "balanced:99", "balanced:-1", "balanced:", "2,5,8", "4,9", "1,1", "5,2",
            "0", "11", "12", "2,", ",2", ",", "2,,5", "1,2,3,4,5,6,7,8,9,10,11", "-2,5", "2.5,3",
            "out", "out.json", "out.svg", "trace", "ckpt", "no-such-dir/x", ".", "..", "metrics.jsonl",
            "\xc3\xa9t\xc3\xa9", "\xff\xfe", "a b", "--batch", "-1e-9", "1e+06", "0.0000001", "5e-324"};
        std::string v = dict[pick(dict.size())];
        if (coin(0.2)) mutate_string(v);
        if (coin(0.01)) v = std::string(1 + pick(20000), "9a,.-"[pick(5)]);
        return v;
    }

    void mutate_string(std::string& v) {
        switch (pick(5)) {
            case 0:
                if (!v.empty()) v.erase(pick(v.size()), 1);
                break;
            case 1:
                v.insert(v.begin() + static_cast<std::ptrdiff_t>(v.empty() ? 0 : pick(v.size() + 1)),
                         "0123456789-+.,:eE xn\x01\x7f"[pick(21)]);
                break;
            case 2:
                if (!v.empty()) v[pick(v.size())] = static_cast<char>(1 + pick(126));
                break;
            case 3:
                v += v;
                break;
            default:
                v = value();
                break;
        }
        if (!v.empty() && v.front() == '/') v.front() = '_';  // paths stay inside the scratch directory
    }

    void append_option(std::vector<std::string>& t) {
        const std::string name = option_name();
        const double form = std::uniform_real_distribution<double>(0, 1)(rng_);
        if (form < 0.7) {
            t.push_back(name);
            t.push_back(value());
        } else if (form < 0.9) {
            t.push_back(name + "=" + value());
        } else {
            t.push_back(name);
        }
    }

    void mutate(std::vector<std::string>& t) {
        switch (pick(6)) {
            case 0:  // replace a value or a name
                if (!t.empty()) t[pick(t.size())] = coin(0.7) ? value() : option_name();
                break;
            case 1:  // drop a token
                if (!t.empty()) t.erase(t.begin() + static_cast<std::ptrdiff_t>(pick(t.size())));
                break;
            case 2:  // duplicate a token
                if (!t.empty()) {
                    const std::size_t i = pick(t.size());
                    t.insert(t.begin() + static_cast<std::ptrdiff_t>(i), t[i]);
                }
                break;
            case 3:  // swap two tokens
                if (t.size() >= 2) std::swap(t[pick(t.size())], t[pick(t.size())]);
                break;
            case 4:  // mutate a token's text
                if (!t.empty()) mutate_string(t[pick(t.size())]);
                break;
            default:
                append_option(t);
                break;
        }
    }

    std::mt19937_64 rng_;
    std::vector<std::string> options_;
    std::vector<std::string> extra_options_;
    std::vector<std::vector<std::string>> seeds_;
};

/// Option names listed by `program --help` (long options, without --data and --help).
std::vector<std::string> help_options(const config& c, const fs::path& scratch) {
    child ch = spawn(c, scratch, {c.program, "--help"}, 999);
    int status = 0;
    ::waitpid(ch.pid, &status, 0);
    const std::string help = read_file(ch.out);
    std::set<std::string> names;
    const std::regex re("(^|[ ,])(--[a-z0-9][a-z0-9-]*)");
    for (auto it = std::sregex_iterator(help.begin(), help.end(), re); it != std::sregex_iterator(); ++it) {
        const std::string n = (*it)[2];
        if (n != "--data" && n != "--help") names.insert(n);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || names.size() < 20) {
        std::cerr << "fuzz_options: `" << c.program << " --help` did not list the options (" << names.size()
                  << " found)\n";
        std::exit(2);
    }
    return {names.begin(), names.end()};
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage(a + " needs a value");
            return argv[++i];
        };
        if (a == "--program") c.program = fs::absolute(next()).string();
        else if (a == "--runs") c.runs = std::stoull(next());
        else if (a == "--seed") c.seed = std::stoull(next());
        else if (a == "--jobs") c.jobs = std::max(1u, static_cast<unsigned>(std::stoul(next())));
        else if (a == "--timeout") c.timeout_s = std::stod(next());
        else if (a == "--memory-mb") c.memory_mb = std::stoull(next());
        else if (a == "--asan") c.asan = true;
        else if (a == "--corpus") c.corpus = next();
        else if (a == "--failures") c.failures = next();
        else usage("unknown argument " + a);
    }
    if (c.program.empty()) usage("--program is required");

    std::string templ = (fs::temp_directory_path() / "pipeprop-fuzz-options-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) usage("cannot create a scratch directory");
    const fs::path scratch = templ;
    const fs::path no_data = scratch / "no-data";

    std::vector<std::vector<std::string>> seeds;
    if (!c.corpus.empty())
        for (const auto& e : fs::directory_iterator(c.corpus)) {
            std::istringstream in(read_file(e.path()));
            std::vector<std::string> t;
            for (std::string line; std::getline(in, line);) t.push_back(line);
            seeds.push_back(std::move(t));
        }
    std::sort(seeds.begin(), seeds.end());  // directory order is not deterministic; the run must be
    generator gen(c.seed, help_options(c, scratch), seeds);

    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, std::uint64_t> outcomes;
    std::uint64_t started = 0, failed = 0;
    std::vector<child> running(c.jobs);
    auto finish = [&](child& ch, int status, bool timed_out) {
        const std::string why = judge(ch, status, timed_out, outcomes);
        if (!why.empty()) {
            ++failed;
            std::cerr << "fuzz_options: FAILED (" << why << "): " << shell_quote(ch.argv) << "\n--- stderr (tail):\n"
                      << read_file(ch.err).substr(0, 2000) << "\n---\n";
            if (!c.failures.empty()) {
                fs::create_directories(c.failures);
                std::ofstream f(fs::path(c.failures) / ("failure-" + std::to_string(c.seed) + "-" +
                                                        std::to_string(failed) + ".args"));
                for (std::size_t k = 3; k < ch.argv.size(); ++k) f << ch.argv[k] << '\n';
            }
        }
        ch.pid = -1;
    };
    for (;;) {
        bool any = false;
        for (unsigned s = 0; s < c.jobs; ++s) {
            child& ch = running[s];
            if (ch.pid < 0 && started < c.runs) {
                std::vector<std::string> a = {c.program, "--data", no_data.string()};
                for (auto& t : gen.next()) a.push_back(std::move(t));
                ch = spawn(c, scratch, std::move(a), s);
                ++started;
            }
            if (ch.pid < 0) continue;
            any = true;
            int status = 0;
            const pid_t r = ::waitpid(ch.pid, &status, WNOHANG);
            if (r == ch.pid) {
                finish(ch, status, false);
            } else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - ch.start).count() >
                       c.timeout_s) {
                ::kill(-ch.pid, SIGKILL);
                ::waitpid(ch.pid, &status, 0);
                finish(ch, status, true);
            }
        }
        if (!any) break;
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::error_code ec;
    fs::remove_all(scratch, ec);
    std::cout << "fuzz_options: " << started << " command lines (seed " << c.seed << ", " << seeds.size()
              << " seed lines), " << failed << " failed;";
    for (const auto& [k, v] : outcomes) std::cout << ' ' << k << ": " << v << ';';
    std::cout << " " << wall << " s, " << (wall > 0 ? started / wall : 0.0) << " runs/s" << std::endl;
    return failed == 0 ? 0 : 1;
}
