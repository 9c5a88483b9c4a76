// detail::remote_backlog (pipeprop/remote_backlog.hpp), the store both executors keep early messages from other
// processes in: copies outlive the transport's buffers; deliver hands over exactly the due messages in
// arrival order and keeps the others in theirs, across several deliveries. The MPI tests reach it only when a rank
// happens to run ahead; this checks it directly, with due and not-due messages interleaved.
#include <catch2/catch.hpp>

#include <pipeprop/remote_backlog.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using pipeprop::detail::held_message;
using pipeprop::detail::remote_backlog;

/// A message to stage `to` of micro-batch `mb` with one payload byte and one label equal to mb, in buffers that the
/// caller overwrites after keep() (as the transport reuses its receive buffer).
struct source {
    std::vector<std::byte> values{std::byte{0}};
    std::vector<std::int32_t> labels{0};
    pipeprop::remote_message make(std::size_t to, std::size_t mb) {
        values[0] = static_cast<std::byte>(mb);
        labels[0] = static_cast<std::int32_t>(mb);
        pipeprop::remote_message m;
        m.to = to;
        m.header.micro_batch = mb;
        m.header.batch = 1;
        m.values = values;
        m.labels = labels;
        m.note.run = mb;
        return m;
    }
};

}  // namespace

TEST_CASE("remote_backlog: due messages in arrival order, the rest kept in theirs, payloads copied",
          "[remote][backlog]") {
    remote_backlog backlog;
    source src;
    for (std::size_t mb : {5u, 1u, 7u, 2u, 9u, 3u}) backlog.keep(src.make(mb % 2, mb));
    src.values[0] = std::byte{99};  // the transport's buffer is reused: the kept copies must not change
    src.labels[0] = 99;
    REQUIRE(backlog.size() == 6);

    std::vector<std::size_t> accepted;
    const auto accept = [&](const pipeprop::remote_message& m) {
        CHECK(static_cast<std::size_t>(m.values[0]) == m.header.micro_batch);
        CHECK(static_cast<std::size_t>(m.labels[0]) == m.header.micro_batch);
        CHECK(m.note.run == m.header.micro_batch);
        CHECK(m.to == m.header.micro_batch % 2);
        accepted.push_back(m.header.micro_batch);
    };
    std::size_t next = 4;  // micro-batches below `next` are due (PB: already pushed into the graph)
    const auto due = [&](const held_message& h) { return h.header.micro_batch < next; };

    backlog.deliver(due, accept);
    CHECK(accepted == std::vector<std::size_t>{1, 2, 3});
    CHECK(backlog.size() == 3);

    accepted.clear();
    backlog.deliver(due, accept);  // nothing new is due
    CHECK(accepted.empty());
    CHECK(backlog.size() == 3);

    next = 8;
    backlog.deliver(due, accept);
    CHECK(accepted == std::vector<std::size_t>{5, 7});
    CHECK(backlog.size() == 1);

    backlog.keep(src.make(0, 4));  // a message kept after a delivery goes behind the one still waiting
    src.values[0] = std::byte{98};
    accepted.clear();
    next = 100;
    backlog.deliver(due, accept);
    CHECK(accepted == std::vector<std::size_t>{9, 4});
    CHECK(backlog.size() == 0);

    backlog.keep(src.make(1, 11));
    backlog.clear();
    CHECK(backlog.size() == 0);
}
