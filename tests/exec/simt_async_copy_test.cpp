// The host emulation's cp.async (weft/exec/cuda/simt_emulation.hpp): a copy lands when its
// thread waits for its group (cp.async.wait_group), and not before, so that an emulated kernel
// that reads a tile before waiting for it, or waits for too few groups, reads NaN bytes and
// fails its checks (test_cuda_kernels_emulated), where an immediate copy would hide it. The
// PTX ISA ("cp.async.wait_group"): the wait lets all but the newest N committed groups
// complete; copies not yet committed belong to no group and are not waited for.
// No GPU and no CUDA toolkit needed.
#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include "weft/exec/cuda/simt_emulation.hpp"

namespace {

namespace simt = weft::exec::cuda_detail::simt;

constexpr int copy_threads = 64;  // two warps
constexpr int copy_bytes = 16;

// What the thread's 16 bytes at `at` are now: landed (the source's first `bytes`, then zeros),
// not landed (all undefined_byte), or neither.
enum class seen { landed, not_landed, other };

seen look(const unsigned char* at, const unsigned char* source, int bytes) {
    bool landed = true, absent = true;
    for (int i = 0; i < copy_bytes; ++i) {
        landed = landed && at[i] == (i < bytes ? source[i] : 0);
        absent = absent && at[i] == simt::undefined_byte;
    }
    return landed ? seen::landed : absent ? seen::not_landed : seen::other;
}

// Bytes that are neither 0 nor undefined_byte, so that a landed copy is told apart from both.
std::vector<unsigned char> source_bytes(std::size_t n) {
    std::vector<unsigned char> bytes(n);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(1 + i % 250);
    return bytes;
}

}  // namespace

TEST_CASE("simt emulation: cp.async lands at its thread's wait_group, oldest group first", "[exec][simt]") {
    // Each thread copies three 16-byte pieces of its own: group 1 whole, group 2 of `partial`
    // bytes (zeros after), and a third it has not committed at the first waits.
    const auto source = source_bytes(3 * copy_threads * copy_bytes);
    enum step { issued, waited_one, waited_none, uncommitted_after_wait, committed_and_waited, steps };
    std::array<std::array<std::array<seen, 3>, steps>, copy_threads> sights{};
    simt::launch({1, 1, 1}, copy_threads, source.size(), [&] {
        const int t = int(threadIdx.x);
        const int partial = t % (copy_bytes + 1);  // 0 to 16: every source size
        unsigned char* shared = simt::dynamic_shared_memory();
        auto piece = [&](int which) { return std::size_t((which * copy_threads + t) * copy_bytes); };
        auto look_all = [&](step at) {
            for (int which = 0; which < 3; ++which) {
                const int bytes = which == 1 ? partial : copy_bytes;
                sights[std::size_t(t)][at][std::size_t(which)] =
                    look(shared + piece(which), source.data() + piece(which), bytes);
            }
        };
        simt::copy_16_async(shared + piece(0), source.data() + piece(0), copy_bytes);
        simt::commit_copies();
        simt::copy_16_async(shared + piece(1), source.data() + piece(1), partial);
        simt::commit_copies();
        simt::copy_16_async(shared + piece(2), source.data() + piece(2), copy_bytes);
        look_all(issued);
        simt::wait_copies(1);
        look_all(waited_one);
        simt::wait_copies(0);
        look_all(waited_none);
        simt::wait_copies(0);
        look_all(uncommitted_after_wait);
        simt::commit_copies();
        simt::wait_copies(0);
        look_all(committed_and_waited);
    });
    using enum seen;
    const std::array<std::array<seen, 3>, steps> expected{{
        {not_landed, not_landed, not_landed},  // issued: nothing has landed
        {landed, not_landed, not_landed},      // wait_group 1: the older group only
        {landed, landed, not_landed},          // wait_group 0: both groups, not the uncommitted copy
        {landed, landed, not_landed},          // a wait does not complete an uncommitted copy
        {landed, landed, landed},              // committed, then waited for
    }};
    for (int t = 0; t < copy_threads; ++t)
        for (int at = 0; at < steps; ++at) {
            INFO("thread " << t << ", step " << at);
            REQUIRE(sights[std::size_t(t)][std::size_t(at)] == expected[std::size_t(at)]);
        }
}

TEST_CASE("simt emulation: a copy a block never waited for does not land in the next block", "[exec][simt]") {
    // On a GPU the next block has shared memory of its own; in the emulation the blocks share
    // one buffer, so a copy left in flight must be dropped, not landed at the next wait.
    const auto source = source_bytes(copy_bytes);
    std::array<seen, 2> second_block{};
    simt::launch({2, 1, 1}, 1, copy_bytes, [&] {
        unsigned char* shared = simt::dynamic_shared_memory();
        if (blockIdx.x == 0) {
            simt::copy_16_async(shared, source.data(), copy_bytes);
            simt::commit_copies();
            return;  // no wait: the copy stays in flight
        }
        second_block[0] = look(shared, source.data(), copy_bytes);
        simt::wait_copies(0);
        second_block[1] = look(shared, source.data(), copy_bytes);
    });
    CHECK(second_block[0] == seen::not_landed);
    CHECK(second_block[1] == seen::not_landed);
}

TEST_CASE("simt emulation: cp.async refuses a source size outside 0 to 16 bytes", "[exec][simt]") {
    std::array<unsigned char, copy_bytes> to{}, from{};
    REQUIRE_THROWS_WITH(simt::copy_16_async(to.data(), from.data(), 17), Catch::Contains("cp.async's source size") &&
                                                                             Catch::Contains("17") &&
                                                                             Catch::Contains("must be in [0, 16]"));
    REQUIRE_THROWS_WITH(simt::wait_copies(-1), Catch::Contains("wait_group's count") && Catch::Contains("-1"));
}
