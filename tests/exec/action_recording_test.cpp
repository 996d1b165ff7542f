// The bookkeeping behind exec::cuda's CUDA graphs per action (weft/exec/cuda/action_recording.hpp),
// which has no CUDA in it: a shadow call that repeats the capture's work, allocations, frees
// and uploads gets the capture's addresses and skips every piece of work; one that differs
// anywhere is stopped at that point with the action and the operation named; exec::run_action
// hands an action to a backend without recordings untouched.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "weft/exec/action_key.hpp"
#include "weft/exec/cuda/action_recording.hpp"

using weft::exec::cuda_detail::action_recording;
using weft::exec::cuda_detail::recording_mode;
using weft::exec::cuda_detail::recording_scope;
using weft::exec::cuda_detail::skip_recorded_work;

namespace {

// One action's host code as the layers would run it: a kernel on `weights`, an allocation of
// `bytes`, a GEMM-like call with a scalar, a free of that allocation; returns the allocation
// (what a capture's allocator gave, what a shadow got back) and whether each piece was skipped.
struct pass_result {
    void* allocated = nullptr;
    std::vector<bool> skipped;
};
pass_result one_pass(action_recording& r, const float* weights, std::size_t bytes, float alpha, void* fresh) {
    pass_result out;
    out.skipped.push_back(skip_recorded_work("kernel", weights, 128));
    if (r.mode() == recording_mode::replaying) {
        out.allocated = r.replayed_allocation(bytes);
    } else {
        out.allocated = fresh;
        if (r.mode() == recording_mode::capturing) r.note_allocation(fresh, bytes);
    }
    out.skipped.push_back(skip_recorded_work("gemm", weights, out.allocated, alpha));
    if (r.mode() != recording_mode::measuring) r.note_free(out.allocated, true, nullptr);
    return out;
}

}  // namespace

TEST_CASE("a shadow of the capture skips its work and gets its addresses back", "[exec][graphs]") {
    action_recording r("F of stage 0, micro-batch 1 (8 rows)");
    std::array<float, 4> weights{};
    std::array<std::byte, 64> captured_memory{};
    std::array<std::byte, 64> other_memory{};
    {
        const recording_scope scope(r, recording_mode::measuring);
        CHECK(weft::exec::cuda_detail::current_recording() == &r);
        const auto measured = one_pass(r, weights.data(), 64, 0.5f, other_memory.data());
        CHECK(measured.skipped == std::vector<bool>{false, false});  // eager: nothing skipped, nothing noted
        r.finish();
    }
    CHECK(weft::exec::cuda_detail::current_recording() == nullptr);
    CHECK_FALSE(r.captured());
    {
        const recording_scope scope(r, recording_mode::capturing);
        const auto captured = one_pass(r, weights.data(), 64, 0.5f, captured_memory.data());
        CHECK(captured.skipped == std::vector<bool>{false, false});  // captured work is queued
        r.finish();
    }
    CHECK(r.captured());
    CHECK(r.operations() == 4);  // kernel, allocation, gemm, free
    CHECK(r.allocations() == 1);
    for (int step = 0; step < 3; ++step) {
        const recording_scope scope(r, recording_mode::replaying);
        const auto shadow = one_pass(r, weights.data(), 64, 0.5f, other_memory.data());
        CHECK(shadow.allocated == captured_memory.data());
        CHECK(shadow.skipped == std::vector<bool>{true, true});
        CHECK_NOTHROW(r.finish());
    }
    // No recording current: nothing is skipped.
    CHECK_FALSE(skip_recorded_work("kernel", weights.data(), 128));
}

TEST_CASE("a shadow that differs from the capture is stopped where it differs", "[exec][graphs]") {
    action_recording r("W of stage 2, micro-batch 0 (0 rows)");
    std::array<float, 8> weights{};
    std::array<std::byte, 64> memory{};
    {
        const recording_scope scope(r, recording_mode::capturing);
        static_cast<void>(one_pass(r, weights.data(), 64, 0.5f, memory.data()));
        r.finish();
    }
    const auto replay_throws = [&](auto&& body, const std::string& expected) {
        const recording_scope scope(r, recording_mode::replaying);
        CHECK_THROWS_WITH(body(), Catch::Contains("CUDA graph of W of stage 2, micro-batch 0") &&
                                      Catch::Contains(expected) && Catch::Contains("--cuda-graphs"));
    };
    // A weight buffer that moved: the first kernel's pointer.
    replay_throws([&] { static_cast<void>(one_pass(r, weights.data() + 1, 64, 0.5f, memory.data())); },
                  "operation 0 (kernel): its pointers, sizes or scalars differ");
    // A new shape: the allocation's size.
    replay_throws([&] { static_cast<void>(one_pass(r, weights.data(), 32, 0.5f, memory.data())); },
                  "operation 1 (allocation)");
    // A scalar.
    replay_throws([&] { static_cast<void>(one_pass(r, weights.data(), 64, 0.25f, memory.data())); },
                  "operation 2 (gemm)");
    // Other work in the capture's place.
    replay_throws([&] { static_cast<void>(skip_recorded_work("another kernel", weights.data(), 128)); },
                  "operation 0 (another kernel): the capture did kernel there");
    // Less than the capture did: the end check.
    replay_throws(
        [&] {
            static_cast<void>(skip_recorded_work("kernel", weights.data(), 128));
            r.finish();
        },
        "the end of the action: the capture went on to operation 1 (allocation)");
    // More than the capture did.
    replay_throws(
        [&] {
            static_cast<void>(one_pass(r, weights.data(), 64, 0.5f, memory.data()));
            static_cast<void>(skip_recorded_work("kernel", weights.data(), 128));
        },
        "the capture ended after 4 operations");
    // A free of memory from outside the graph where the capture freed the graph's.
    replay_throws(
        [&] {
            static_cast<void>(skip_recorded_work("kernel", weights.data(), 128));
            void* p = r.replayed_allocation(64);
            static_cast<void>(skip_recorded_work("gemm", weights.data(), p, 0.5f));
            r.note_free(p, false, nullptr);
        },
        "operation 3 (free outside the graph): the capture did free there");
}

TEST_CASE("frees of memory from outside the graph wait for the launch", "[exec][graphs]") {
    action_recording r("I of stage 1, micro-batch 2 (4 rows)");
    int stream_token = 0;
    std::array<std::byte, 16> outside{};
    for (const auto mode : {recording_mode::capturing, recording_mode::replaying}) {
        const recording_scope scope(r, mode);
        r.note_free(outside.data(), false, &stream_token);
        r.finish();
        const auto deferred = r.take_deferred_frees();
        REQUIRE(deferred.size() == 1);
        CHECK(deferred[0].pointer == outside.data());
        CHECK(deferred[0].stream == &stream_token);
        CHECK(r.take_deferred_frees().empty());
    }
    // A measuring call frees at once, so it notes no free.
    const recording_scope scope(r, recording_mode::measuring);
    CHECK_THROWS_WITH(r.note_free(outside.data(), false, nullptr), Catch::Contains("a measuring call frees at once"));
}

TEST_CASE("uploads are measured, then staged in the graph's buffers at their measured sizes", "[exec][graphs]") {
    action_recording r("F of stage 0, micro-batch 0 (2 rows)");
    {
        const recording_scope scope(r, recording_mode::measuring);
        CHECK(r.note_upload(32) == 0);
        CHECK(r.note_upload(8) == 1);
        r.finish();
    }
    CHECK(r.upload_bytes() == std::vector<std::size_t>{32, 8});
    CHECK_THROWS_WITH(r.set_upload_buffers({nullptr}), Catch::Contains("must be one per measured upload (2)"));
    std::array<std::byte, 32> first{};
    std::array<std::byte, 8> second{};
    r.set_upload_buffers({first.data(), second.data()});
    for (const auto mode : {recording_mode::capturing, recording_mode::replaying}) {
        const recording_scope scope(r, mode);
        CHECK(r.upload_buffer(r.note_upload(32)) == first.data());
        CHECK(r.upload_buffer(r.note_upload(8)) == second.data());
        CHECK_NOTHROW(r.finish());
    }
    {
        const recording_scope scope(r, recording_mode::replaying);
        CHECK_THROWS_WITH(r.note_upload(16), Catch::Contains("upload 0 of 16 bytes: the measured call uploaded 32"));
    }
    {
        const recording_scope scope(r, recording_mode::replaying);
        static_cast<void>(r.note_upload(32));
        CHECK_THROWS_WITH(r.finish(), Catch::Contains("the capture made 2 uploads, this call 1"));
    }
}

TEST_CASE("recordings are used in order: one at a time, a capture before a shadow", "[exec][graphs]") {
    action_recording first("F of stage 0, micro-batch 0 (1 rows)");
    action_recording second("F of stage 1, micro-batch 0 (1 rows)");
    CHECK_THROWS_WITH(recording_scope(first, recording_mode::replaying),
                      Catch::Contains("needs a finished capture of F of stage 0"));
    CHECK(weft::exec::cuda_detail::current_recording() == nullptr);
    const recording_scope scope(first, recording_mode::measuring);
    CHECK_THROWS_WITH(recording_scope(second, recording_mode::measuring),
                      Catch::Contains("cannot be recorded inside another's"));
    CHECK(weft::exec::cuda_detail::current_recording() == &first);
}

namespace {

// A matrix that counts its copies: run_action must hand an action its input untouched.
struct counted {
    static inline int copies = 0;
    int value = 0;
    counted() = default;
    explicit counted(int v) : value(v) {}
    counted(const counted& other) : value(other.value) { ++copies; }
    counted(counted&&) noexcept = default;
    counted& operator=(const counted&) = default;
    counted& operator=(counted&&) noexcept = default;
};
struct plain_backend {};

}  // namespace

TEST_CASE("run_action runs an action on a backend without recordings as it is", "[exec][graphs]") {
    plain_backend backend;
    const weft::exec::action_key key{.stage = 1, .part = weft::exec::action_part::backward_input, .microbatch = 3,
                                     .rows = 4};
    CHECK(weft::exec::to_string(key) == "I of stage 1, micro-batch 3 (4 rows)");
    CHECK(weft::exec::run_action(backend, key, [] { return 7; }) == 7);
    counted::copies = 0;
    counted moved(5);
    CHECK(weft::exec::run_action(backend, key, std::move(moved), [](counted c) { return c.value; }) == 5);
    const counted kept(6);
    CHECK(weft::exec::run_action(backend, key, kept, [&](const counted& c) { return &c == &kept; }));
    CHECK(counted::copies == 0);
    static_assert(!weft::exec::records_actions<plain_backend>);
}

TEST_CASE("a failed capture or shadow abandons the addresses it handed out and still held", "[exec][graphs]") {
    action_recording r("F of stage 0, micro-batch 0 (2 rows)");
    std::array<std::byte, 3> memory{};
    void* const freed_in_action = &memory[0];
    void* const kept = &memory[1];
    void* const other_graph = &memory[2];
    {
        const recording_scope scope(r, recording_mode::capturing);
        r.note_allocation(freed_in_action, 8);
        r.note_allocation(kept, 8);
        r.note_free(freed_in_action, true, nullptr);
        r.note_free(other_graph, true, nullptr);  // another graph's allocation, freed here
        r.finish();
    }
    {
        // A shadow that fails after handing out both addresses and freeing the first.
        const recording_scope scope(r, recording_mode::replaying);
        CHECK(r.replayed_allocation(8) == freed_in_action);
        CHECK(r.replayed_allocation(8) == kept);
        r.note_free(freed_in_action, true, nullptr);
        r.note_free(other_graph, true, nullptr);
        r.abandon();
        // The other graph's memory: its free node will not run, so it is freed by the owner.
        const auto to_free = r.take_deferred_frees();
        REQUIRE(to_free.size() == 1);
        CHECK(to_free[0].pointer == other_graph);
    }
    CHECK_FALSE(r.captured());  // the next call starts again
    // Only the address still held is abandoned, and only once: its owner's free is skipped,
    // a later allocation at that address is freed as usual.
    CHECK_FALSE(action_recording::take_abandoned(freed_in_action));
    CHECK_FALSE(action_recording::take_abandoned(other_graph));
    CHECK(action_recording::take_abandoned(kept));
    CHECK_FALSE(action_recording::take_abandoned(kept));
}
