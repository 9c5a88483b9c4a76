// Timelines (sync/trace.hpp): the Chrome trace-event JSON parses, holds one complete event per span with ts/dur in
// microseconds, names processes after tracks and threads after stages, escapes names; the SVG Gantt chart holds one
// rectangle per span; files that cannot be written raise an error naming the path.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/sync/executor.hpp>
#include <pipeprop/sync/simulator.hpp>
#include <pipeprop/sync/trace.hpp>

#include <cblas.h>
#include <cctype>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;

namespace {
// A small strict JSON reader (RFC 8259 syntax; numbers as double) for checking the writer's output.
struct json;
using json_object = std::map<std::string, json>;
using json_array = std::vector<json>;
struct json {
    std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object> v;
    const json& operator[](const std::string& k) const { return std::get<json_object>(v).at(k); }
    const json_array& array() const { return std::get<json_array>(v); }
    const std::string& str() const { return std::get<std::string>(v); }
    double num() const { return std::get<double>(v); }
    bool has(const std::string& k) const { return std::get<json_object>(v).count(k) > 0; }
};
class json_reader {
public:
    explicit json_reader(std::string s) : s_(std::move(s)) {}
    json parse() {
        json j = value();
        ws();
        if (i_ != s_.size()) fail("trailing characters");
        return j;
    }

private:
    [[noreturn]] void fail(const std::string& what) {
        throw std::runtime_error("json: " + what + " at offset " + std::to_string(i_));
    }
    void ws() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    char peek() {
        ws();
        if (i_ >= s_.size()) fail("unexpected end");
        return s_[i_];
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++i_;
    }
    json value() {
        const char c = peek();
        if (c == '{') {
            ++i_;
            json_object o;
            if (peek() == '}') return ++i_, json{o};
            for (;;) {
                std::string k = string();
                expect(':');
                o.emplace(k, value());
                if (peek() == ',') { ++i_; continue; }
                expect('}');
                return json{o};
            }
        }
        if (c == '[') {
            ++i_;
            json_array a;
            if (peek() == ']') return ++i_, json{a};
            for (;;) {
                a.push_back(value());
                if (peek() == ',') { ++i_; continue; }
                expect(']');
                return json{a};
            }
        }
        if (c == '"') return json{string()};
        if (s_.compare(i_, 4, "true") == 0) return i_ += 4, json{true};
        if (s_.compare(i_, 5, "false") == 0) return i_ += 5, json{false};
        if (s_.compare(i_, 4, "null") == 0) return i_ += 4, json{nullptr};
        std::size_t used = 0;
        const double d = std::stod(s_.substr(i_), &used);
        if (used == 0) fail("bad value");
        i_ += used;
        return json{d};
    }
    std::string string() {
        expect('"');
        std::string r;
        while (i_ < s_.size() && s_[i_] != '"') {
            char c = s_[i_++];
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
            if (c == '\\') {
                const char e = s_[i_++];
                switch (e) {
                    case '"': r += '"'; break;
                    case '\\': r += '\\'; break;
                    case '/': r += '/'; break;
                    case 'n': r += '\n'; break;
                    case 't': r += '\t'; break;
                    case 'u': r += static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16)); i_ += 4; break;
                    default: fail("bad escape");
                }
            } else {
                r += c;
            }
        }
        expect('"');
        return r;
    }
    std::string s_;
    std::size_t i_ = 0;
};

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
    return n;
}
}  // namespace

TEST_CASE("Chrome trace of a simulation: one complete event per span, microseconds, named tracks and stages",
          "[sync][trace]") {
    const auto sc = ps::zb_h1(3, 4, true);
    const auto sim = ps::simulate(sc, {{1, 2, 1, -1, 0.5}});
    std::ostringstream os;
    ps::write_chrome_trace(os, {{"zb_h1 \"sim\"\n", sim.spans, 1e-3}});  // units of 1 ms
    const json doc = json_reader(os.str()).parse();
    CHECK(doc["displayTimeUnit"].str() == "ms");
    const auto& ev = doc["traceEvents"].array();
    std::size_t complete = 0;
    std::map<std::string, std::size_t> per_cat;
    for (const auto& e : ev) {
        if (e["ph"].str() == "M") {
            if (e["name"].str() == "process_name") CHECK(e["args"]["name"].str() == "zb_h1 \"sim\"\n");
            if (e["name"].str() == "thread_name")
                CHECK(e["args"]["name"].str() == "stage " + std::to_string(static_cast<int>(e["tid"].num())));
            continue;
        }
        REQUIRE(e["ph"].str() == "X");
        const auto& sp = sim.spans[complete++];
        CHECK(e["ts"].num() == Approx(sp.start * 1000));
        CHECK(e["dur"].num() == Approx((sp.end - sp.start) * 1000));
        CHECK(e["tid"].num() == static_cast<double>(sp.stage));
        CHECK(e["pid"].num() == 0);
        CHECK(e["args"]["micro_batch"].num() == static_cast<double>(sp.micro_batch));
        ++per_cat[e["cat"].str()];
    }
    CHECK(complete == sim.spans.size());
    CHECK(per_cat["F"] == 12);
    CHECK(per_cat["p1"] == 12);
    CHECK(per_cat["p2"] == 12);
    CHECK(per_cat["optimizer"] == 3);
}

TEST_CASE("executor spans and the prediction in one trace; SVG Gantt chart", "[sync][trace]") {
    openblas_set_num_threads(1);
    using net = pp::network<pp::shape<5>, pp::dense<6>, pp::relu, pp::dense<3>>;
    ps::pipeline_executor<net, float, ps::schedule_kind::gpipe, true> ex(pp::partition_at(3, {2}),
                                                                         {.micro_batches = 3, .max_batch = 6});
    std::vector<float> x(30, 0.25f);
    std::vector<std::int32_t> y{0, 1, 2, 0, 1, 2};
    ex.step(x, y, {.learning_rate = 0.1, .momentum = 0.9});
    const auto sim = ps::simulate(ex.current_schedule(), {ps::stage_costs{}});
    std::ostringstream os;
    ps::write_chrome_trace(os, {{"measured", ex.spans(), 1}, {"simulated (unit costs)", sim.spans, 1e-3}});
    const json doc = json_reader(os.str()).parse();
    std::size_t x_events[2] = {0, 0};
    for (const auto& e : doc["traceEvents"].array())
        if (e["ph"].str() == "X") ++x_events[static_cast<int>(e["pid"].num())];
    CHECK(x_events[0] == ex.spans().size());
    CHECK(x_events[1] == sim.spans.size());
    CHECK(ex.spans().size() == 2 * (3 * 3 + 1));

    std::ostringstream svg;
    ps::write_svg_gantt(svg, {"gpipe+2bp <p=2>", sim.spans, 1}, "T");
    const std::string s = svg.str();
    CHECK(s.rfind("<svg", 0) == 0);
    CHECK(s.find("</svg>") != std::string::npos);
    CHECK(s.find("gpipe+2bp &lt;p=2&gt;") != std::string::npos);
    CHECK(count(s, "<title>") == sim.spans.size());
    CHECK(count(s, "fill=\"#e0a030\"><title>") + count(s, "fill=\"#e0a030\" stroke") == 6);  // p2 rectangles
    CHECK(count(s, "<rect") == sim.spans.size() + 2 + 5 + 1);  // spans, stage rows, legend, background

    CHECK_THROWS_WITH(ps::write_chrome_trace_file("/nonexistent-dir/trace.json", {}),
                      Catch::Contains("/nonexistent-dir/trace.json"));
    CHECK_THROWS_AS(ps::write_chrome_trace(os, {{"bad", {}, 0}}), std::invalid_argument);
}
