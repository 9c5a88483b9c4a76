// detail::make_remote_part / register_remote_part (pipeprop/remote_seam.hpp): an executor finds the exchange
// with other processes only when a program registered it. Without pb/remote_stages.hpp or sync/remote_stages.hpp in
// the program (this test includes neither), a PB engine and a schedule executor given a transport refuse with
// std::invalid_argument naming the header to include; a registered factory makes the exchange, for float and double
// separately. The registered path through the real executors runs in tests/mpi/.
#include <catch2/catch.hpp>

#include <pipeprop/pb.hpp>
#include <pipeprop/remote_seam.hpp>
#include <pipeprop/sync.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

namespace pp = pipeprop;

/// Two processes: this one runs stage 0. An executor that refuses before it exchanges anything never calls send or
/// receive, so they fail the test if it does.
class idle_transport final : public pp::remote_transport {
public:
    bool is_local(std::size_t stage) const override { return stage == 0; }
    int rank() const override { return 0; }
    void send(std::size_t, const pp::boundary_message&, std::span<const std::byte>, std::span<const std::int32_t>,
              const pp::boundary_note&) override {
        FAIL("send() called");
    }
    std::size_t receive(std::chrono::milliseconds, const std::function<void(const pp::remote_message&)>&) override {
        FAIL("receive() called");
        return 0;
    }
    std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(100); }
    int rank_of(std::size_t stage) const override { return stage == 0 ? 0 : 1; }
    void report_failure(std::string_view) noexcept override {}
    bool sending() override { return false; }
};

template <class T>
struct toy_host {
    const char* who() const { return "toy_executor"; }
    T value = T(3);
};

template <class T>
class toy_part {
public:
    using host_type = toy_host<T>;
    virtual ~toy_part() = default;
    virtual T read() const = 0;
};

template <class T>
class toy_stages final : public toy_part<T> {
public:
    explicit toy_stages(const toy_host<T>& host) : host_(host) {}
    T read() const override { return host_.value; }

private:
    const toy_host<T>& host_;
};

using mlp = pp::network<pp::shape<6>, pp::dense<8>, pp::relu, pp::dense<4>>;

bool names(const std::invalid_argument& e, const std::string& header) {
    return std::string(e.what()).find(header) != std::string::npos;
}

}  // namespace

TEST_CASE("make_remote_part: refused until a factory is registered, then makes the registered exchange",
          "[remote][registry]") {
    const toy_host<float> hf;
    const toy_host<double> hd{.value = 5.0};
    try {
        (void)pp::detail::make_remote_part<toy_part<float>>(hf, "toy/remote_stages.hpp");
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        CHECK(names(e, "toy_executor: stages in other processes (options::remote) need toy/remote_stages.hpp"));
    }
    CHECK(pp::detail::register_remote_part<toy_part, toy_stages>());
    const auto pf = pp::detail::make_remote_part<toy_part<float>>(hf, "toy/remote_stages.hpp");
    const auto pd = pp::detail::make_remote_part<toy_part<double>>(hd, "toy/remote_stages.hpp");
    REQUIRE(pf != nullptr);
    REQUIRE(pd != nullptr);
    CHECK(pf->read() == 3.0f);
    CHECK(pd->read() == 5.0);
}

TEST_CASE("a PB engine given a transport without pb/remote_stages.hpp in the program names the header",
          "[remote][registry][pb]") {
    idle_transport t;
    using pipe = pp::pb::pipeline<mlp, pp::fine_grained<>, pp::pb::policy::sc_lwp<>>;
    pp::pb::options<pp::pb::policy::sc_lwp<>> o;
    o.max_batch = 1;
    o.executor = pp::pb::executor_kind::concurrent;
    o.remote = &t;
    try {
        pipe p(o);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        INFO(e.what());
        CHECK(names(e, "need pipeprop/pb/remote_stages.hpp (or pipeprop/mpi/mpi_transport.hpp) included"));
    }
}

TEST_CASE("a schedule executor given a transport without sync/remote_stages.hpp in the program names the header",
          "[remote][registry][sync]") {
    idle_transport t;
    pp::sync::executor_options o{.micro_batches = 2, .max_batch = 2};
    o.remote = &t;
    try {
        pp::sync::pipeline_executor<mlp, float, pp::sync::schedule_kind::one_f_one_b, true> ex(
            pp::partition_at(3, {2}), o);
        FAIL("no exception");
    } catch (const std::invalid_argument& e) {
        INFO(e.what());
        CHECK(names(e, "need pipeprop/sync/remote_stages.hpp (or pipeprop/mpi/mpi_transport.hpp) included"));
    }
}
