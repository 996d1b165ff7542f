// exec::staging_ring over a fake platform whose copies run only when a fence is waited for
// (or at the end), as a device's queue does: the values reach their destination although the
// caller reuses its memory at once, a buffer is written again only after the copy that read
// it, buffers grow for larger values, and the ring waits for its copies when it goes.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/exec/staging_ring.hpp"

namespace {

// A queue of copies that run when a fence behind them is waited for.
struct fake_device {
    struct queued {
        void* to;
        const void* staged;
        std::size_t bytes;
        std::vector<unsigned char> staged_when_queued;  // what the buffer held then
        bool done = false;
    };
    std::vector<queued> queue;
    bool waits_fail = false;  // a failing device, or a wait past its limit
    std::vector<void*> live;  // allocated and not yet deallocated
    int allocations = 0, deallocations = 0, waits = 0;
    int overwritten_while_queued = 0;  // a staged buffer changed before its copy ran

    void run_until(std::size_t end) {
        for (std::size_t i = 0; i < end && i < queue.size(); ++i) {
            queued& q = queue[i];
            if (q.done) continue;
            if (std::memcmp(q.staged, q.staged_when_queued.data(), q.bytes) != 0) ++overwritten_while_queued;
            std::memcpy(q.to, q.staged, q.bytes);
            q.done = true;
        }
    }
};

struct fake_platform {
    fake_device* device;
    struct fence {
        std::size_t behind = 0;  // the copies queued before it
    };
    void* allocate(std::size_t bytes) {
        ++device->allocations;
        device->live.push_back(std::malloc(bytes));
        return device->live.back();
    }
    void deallocate(void* buffer) noexcept {
        ++device->deallocations;
        std::erase(device->live, buffer);
        std::free(buffer);
    }
    void copy_async(void* to, const void* staged, std::size_t bytes) {
        const auto* b = static_cast<const unsigned char*>(staged);
        device->queue.push_back({to, staged, bytes, std::vector<unsigned char>(b, b + bytes)});
    }
    void record(fence& f) { f.behind = device->queue.size(); }
    void wait(fence& f) {
        ++device->waits;
        if (device->waits_fail) throw weft::error("the device failed");
        device->run_until(f.behind);
    }
};

using ring = weft::exec::staging_ring<fake_platform>;

}  // namespace

TEST_CASE("staged values reach the device although the caller reuses its memory at once") {
    fake_device device;
    std::vector<int> destination(4, 0);
    {
        ring uploads(fake_platform{&device}, 2);
        std::vector<int> values{1, 2, 3, 4};
        uploads.copy(destination.data(), values.data(), values.size() * sizeof(int));
        values.assign(4, -1);  // the caller's next batch, before the device has copied anything
        CHECK(destination == std::vector<int>(4, 0));
        device.run_until(device.queue.size());
        CHECK(destination == std::vector<int>{1, 2, 3, 4});
    }
    CHECK(device.allocations == 1);
    CHECK(device.deallocations == 1);
}

TEST_CASE("a buffer is written again only after the copy that read it has run") {
    fake_device device;
    constexpr int copies = 7;
    std::vector<std::vector<int>> destinations(copies, std::vector<int>(3, 0));
    {
        ring uploads(fake_platform{&device}, 2);
        for (int i = 0; i < copies; ++i) {
            const std::vector<int> values{i, 10 * i, 100 * i};
            uploads.copy(destinations[std::size_t(i)].data(), values.data(), values.size() * sizeof(int));
        }
        // Two buffers for seven copies: the third and later each waited for the copy two before.
        CHECK(device.waits == copies - 2);
    }  // the ring waits for the last copies as it goes
    CHECK(device.overwritten_while_queued == 0);
    for (int i = 0; i < copies; ++i) CHECK(destinations[std::size_t(i)] == std::vector<int>{i, 10 * i, 100 * i});
    CHECK(device.allocations == 2);  // one per buffer, reused
}

TEST_CASE("a buffer grows for a larger value, after its last copy has run") {
    fake_device device;
    std::vector<char> small_destination(16), large_destination(10000);
    {
        ring uploads(fake_platform{&device}, 1);
        const std::vector<char> small(16, 'a'), large(10000, 'b');
        uploads.copy(small_destination.data(), small.data(), small.size());
        uploads.copy(large_destination.data(), large.data(), large.size());
        CHECK(device.allocations == 2);    // 4 KiB, then 16 KiB
        CHECK(device.deallocations == 1);  // the 4 KiB buffer, once its copy had run
        CHECK(device.waits == 1);
        CHECK(small_destination == small);
    }
    CHECK(device.overwritten_while_queued == 0);
    CHECK(large_destination == std::vector<char>(10000, 'b'));
    CHECK(device.deallocations == 2);
}

TEST_CASE("a ring of no buffers is refused by name") {
    fake_device device;
    CHECK_THROWS_WITH(ring(fake_platform{&device}, 0), Catch::Contains("staging_ring: buffers = 0"));
}

TEST_CASE("a ring whose waits fail goes without freeing a buffer a copy may still read") {
    fake_device device;
    std::vector<int> destinations(3, 0);
    {
        ring uploads(fake_platform{&device}, 4);
        const int values[3] = {1, 2, 3};
        for (int i = 0; i < 3; ++i) uploads.copy(&destinations[std::size_t(i)], &values[i], sizeof(int));
        device.waits_fail = true;  // before any of the three copies ran
    }
    // The first wait failed, so no buffer whose copy is queued is freed, and the ring waited
    // once, not once per buffer (each wait as long as the first, past a limit).
    CHECK(device.waits == 1);
    CHECK(device.deallocations == 0);
    CHECK(device.live.size() == 3);
    for (void* leaked : device.live) std::free(leaked);
}
