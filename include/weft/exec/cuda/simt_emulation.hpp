// Device code run on the CPU: an emulated thread block, for testing kernels where no GPU is.
//
// The machines that build weft have no GPU, and most changes to its kernels come before their
// next run on one. So that every kernel exec::cuda launches runs in CI all the same
// (tests/exec/cuda/kernels_emulated_test.cpp, under both sanitizers), the kernels compile
// with a host compiler too (kernels/device_or_emulated.cuh, each set in a kernels/*_kernels.cuh
// of its own): each GPU thread becomes a host thread, and what threads
// share or do together on a GPU is emulated here, as the CUDA programming guide and the PTX
// ISA define it:
//   - threadIdx, blockIdx, gridDim and blockDim, per host thread;
//   - the block's shared memory (dynamic, and __shared__ variables as statics: one block of
//     one launch runs at a time), and __syncthreads as a barrier of the block;
//   - __syncwarp, __shfl_xor_sync, and the warp-wide instructions ldmatrix.x4 (.trans) and
//     mma.sync.m16n8k16 (bf16 inputs, fp32 accumulators), each an exchange of the 32 lanes'
//     registers through the warp's own barrier;
//   - cp.async of 16 bytes, its commit_group and wait_group, at the latest their PTX allows:
//     the destination reads as NaN bytes from the copy's start, and the copy lands only when
//     its thread waits for its group. So a read before the wait, or a wait for too few groups,
//     shows in the results at every run, where on a GPU it shows only when a copy is late.
// The two instructions are written here from the PTX ISA apart from mma_fragments.hpp, whose
// layouts the kernels use; tests/exec/mma_fragments_test.cpp checks both against the ISA's
// fragment figures: what the emulation computes is what the ISA says they compute.
//
// Blocks run one after another; a block's threads all at once. A lane that skips a warp-wide
// instruction the others run would hang the block, as it would on a GPU (the test's timeout
// catches it).
//
// Warp exchanges use two sets of slots, alternately: a lane writes its registers into the
// set of this exchange, waits at the warp's barrier, then reads the others'. The next
// exchange writes the other set, and the one after reuses this one only after every lane
// has passed the next exchange's barrier, hence finished reading: one barrier an exchange.
#pragma once

#include <array>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::exec::cuda_detail::simt {

struct index3 {
    unsigned int x = 0, y = 0, z = 0;
};

inline constexpr int warp_size = 32;

// What the emulation shows where shared memory holds nothing defined yet: a block's memory
// before the block writes it, a cp.async's destination before its wait. 0xff bytes are NaN in
// float and bf16, so a read of them shows in the results.
inline constexpr unsigned char undefined_byte = 0xff;

// One running block: its shared memory, barriers and warp exchange slots.
class block_state {
public:
    block_state(int threads, std::size_t shared_bytes)
        : shared_(shared_bytes == 0 ? 1 : shared_bytes), block_barrier_(threads, phase_end{this}) {
        // A last warp of fewer lanes (a block of one thread, say) waits for those it has.
        for (int first = 0; first < threads; first += warp_size)
            warps_.push_back(std::make_unique<warp>(threads - first < warp_size ? threads - first : warp_size));
    }

    [[nodiscard]] unsigned char* shared_memory() { return shared_.data(); }
    void fill_shared_memory(unsigned char byte) { std::memset(shared_.data(), byte, shared_.size()); }
    void synchronize_block() { block_barrier_.arrive_and_wait(); }

    // Thread `rank` threw: it leaves its warp's barrier and the block's, so that the threads
    // still running the block pass them without it rather than wait for it forever. The
    // first exception is kept for launch to throw; the launch's later blocks do not run.
    void leave_after_throw(int rank, std::exception_ptr error) {
        {
            const std::lock_guard lock(error_mutex_);
            if (!error_) error_ = std::move(error);
        }
        failed_.store(true);
        warps_[std::size_t(rank / warp_size)]->barrier.arrive_and_drop();
        block_barrier_.arrive_and_drop();
    }
    // Whether a thread had thrown when the block's barrier last opened: the same answer for
    // every thread between two openings, so all stop at the same block.
    [[nodiscard]] bool stopping() const { return stopping_; }
    [[nodiscard]] std::exception_ptr error() {
        const std::lock_guard lock(error_mutex_);
        return error_;
    }

    // What one lane hands the others at a warp-wide instruction.
    struct slot {
        const void* address = nullptr;
        std::array<std::uint32_t, 4> a{};
        std::array<std::uint32_t, 2> b{};
        float value = 0;
        double wide = 0;  // __shfl_xor_sync's of a double
    };

    // Publishes `mine` as lane `lane` of warp `w`, waits for the warp, and returns the 32
    // lanes' slots of this exchange (valid until this lane's next exchange but one).
    const std::array<slot, warp_size>& exchange(int w, int lane, const slot& mine) {
        warp& each = *warps_[std::size_t(w)];
        // On a GPU too, a full mask that names lanes the block does not have is undefined. (A
        // throw on a block's thread reaches launch's caller: see leave_after_throw.)
        require(each.lanes == warp_size, "simt emulation: a warp-wide instruction's warp", each.lanes,
                "must have 32 lanes (the block's last warp is partial)");
        int& parity = each.parity[std::size_t(lane)];
        auto& set = each.slots[std::size_t(parity)];
        parity ^= 1;
        set[std::size_t(lane)] = mine;
        each.barrier.arrive_and_wait();
        return set;
    }

private:
    struct warp {
        explicit warp(int lanes_in_block) : lanes(lanes_in_block), barrier(lanes_in_block) {}
        int lanes;
        std::barrier<> barrier;
        std::array<std::array<slot, warp_size>, 2> slots{};
        std::array<int, warp_size> parity{};  // each lane's next set (only that lane touches it)
    };
    // 128-byte aligned, as CUDA's dynamic shared memory is at least.
    struct alignas(128) line {
        unsigned char bytes[128];
    };
    struct shared_bytes {
        explicit shared_bytes(std::size_t n) : lines((n + sizeof(line) - 1) / sizeof(line)) {}
        unsigned char* data() { return lines.front().bytes; }
        [[nodiscard]] std::size_t size() const { return lines.size() * sizeof(line); }
        std::vector<line> lines;
    };
    // Runs as the block's barrier opens, before any thread passes it.
    struct phase_end {
        block_state* block;
        void operator()() const noexcept { block->stopping_ = block->failed_.load(); }
    };
    shared_bytes shared_;
    std::barrier<phase_end> block_barrier_;
    std::vector<std::unique_ptr<warp>> warps_;
    std::atomic<bool> failed_{false};
    bool stopping_ = false;
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

namespace detail {
inline thread_local block_state* current_block = nullptr;
// The thread's place in its block, x fastest, then y, then z: CUDA's order, which makes warps
// of 32 consecutive ranks.
inline thread_local int thread_rank = 0;

// One cp.async of the thread still in flight: where its 16 bytes go and what they are.
struct async_copy {
    void* to = nullptr;
    std::array<unsigned char, 16> bytes{};
};
// The thread's cp.async copies in flight: those since its last commit, then its committed
// groups, oldest first. A block starts with none (launch drops what the last one left).
struct async_copies {
    std::vector<async_copy> uncommitted;
    std::deque<std::vector<async_copy>> committed;
};
inline thread_local async_copies copies_in_flight;
}  // namespace detail

[[nodiscard]] inline block_state& current_block() {
    require(detail::current_block != nullptr, "simt emulation: the calling thread", "outside a launch",
            "device code runs only inside simt::launch");
    return *detail::current_block;
}

[[nodiscard]] inline int lane() {
    return detail::thread_rank % warp_size;
}

// Publishes this thread's slot in its warp's exchange and returns the warp's 32 slots.
inline const std::array<block_state::slot, warp_size>& exchange_in_warp(const block_state::slot& mine) {
    return current_block().exchange(detail::thread_rank / warp_size, lane(), mine);
}

}  // namespace weft::exec::cuda_detail::simt

// CUDA's built-in variables and functions under their own names, so that device code compiles
// unchanged: only where no CUDA compiler defines them (device_or_emulated.cuh includes this
// header only then).
inline thread_local weft::exec::cuda_detail::simt::index3 threadIdx, blockIdx, gridDim, blockDim;

inline void __syncthreads() {
    weft::exec::cuda_detail::simt::current_block().synchronize_block();
}

// The warp's lanes wait for each other (full mask): what each wrote before is seen by all after.
inline void __syncwarp(unsigned int /*mask*/ = 0xffffffffu) {
    static_cast<void>(weft::exec::cuda_detail::simt::exchange_in_warp({}));
}

// math_constants.h spells CUDART_INF_F and its kin with this device intrinsic.
inline float __int_as_float(int bits) {
    return std::bit_cast<float>(bits);
}

// The value of lane (this lane ^ lane_mask); every lane of the warp takes part (full mask).
inline float __shfl_xor_sync(unsigned int /*mask*/, float value, int lane_mask) {
    weft::exec::cuda_detail::simt::block_state::slot mine;
    mine.value = value;
    const auto& all = weft::exec::cuda_detail::simt::exchange_in_warp(mine);
    return all[std::size_t(weft::exec::cuda_detail::simt::lane() ^ lane_mask)].value;
}

// CUDA's reciprocal square root. The GPU's is within 2 ulp; this one rounds twice (the square
// root, then the quotient): the tests' tolerances allow either.
inline float rsqrtf(float x) {
    return 1.0f / std::sqrt(x);
}

inline double __shfl_xor_sync(unsigned int /*mask*/, double value, int lane_mask) {
    weft::exec::cuda_detail::simt::block_state::slot mine;
    mine.wide = value;
    const auto& all = weft::exec::cuda_detail::simt::exchange_in_warp(mine);
    return all[std::size_t(weft::exec::cuda_detail::simt::lane() ^ lane_mask)].wide;
}

// CUDA's IEEE-rounded single operations (round to nearest even), which nvcc never fuses into
// an FMA. Here plain operations, which a host compiler may fuse where the target has FMA:
// compile emulated kernels with -ffp-contract=off (test_cuda_kernels_emulated does).
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __fsqrt_rn(float a) {
    return std::sqrt(a);
}

// CUDA's integer min and max, which device code calls unqualified.
inline int min(int a, int b) {
    return a < b ? a : b;
}
inline int max(int a, int b) {
    return a < b ? b : a;
}

namespace weft::exec::cuda_detail::simt {

[[nodiscard]] inline unsigned char* dynamic_shared_memory() {
    return current_block().shared_memory();
}

// The bf16 in the low (half 0) or high half of a register, as a float (exact).
[[nodiscard]] inline float bf16_half(std::uint32_t reg, int half) {
    return std::bit_cast<float>(((reg >> (16 * half)) & 0xffffu) << 16);
}

// cp.async.cg.shared.global [to], [from], 16, bytes: `bytes` (0 to 16) copied, the rest zeros.
// What the destination holds until its thread's cp.async.wait_group lets the copy's group
// complete is undefined: here undefined_byte, and the copy lands at that wait, no sooner. The
// source is read now (the kernels never write what they copy).
inline void copy_16_async(void* to, const void* from, int bytes) {
    require(bytes >= 0 && bytes <= 16, "simt emulation: cp.async's source size", bytes, "must be in [0, 16]");
    detail::async_copy copy{to, {}};
    if (bytes > 0) std::memcpy(copy.bytes.data(), from, std::size_t(bytes));
    std::memset(to, undefined_byte, copy.bytes.size());
    detail::copies_in_flight.uncommitted.push_back(copy);
}

// cp.async.commit_group: the thread's copies since its last commit become one group (an empty
// one if there are none).
inline void commit_copies() {
    auto& flight = detail::copies_in_flight;
    flight.committed.push_back(std::move(flight.uncommitted));
    flight.uncommitted.clear();
}

// cp.async.wait_group `pending`: the thread's committed groups but the `pending` newest
// complete, in order. Copies not yet committed stay in flight, as on a GPU.
inline void wait_copies(int pending) {
    require(pending >= 0, "simt emulation: cp.async.wait_group's count", pending, "must not be negative");
    auto& groups = detail::copies_in_flight.committed;
    while (groups.size() > std::size_t(pending)) {
        for (const detail::async_copy& copy : groups.front())
            std::memcpy(copy.to, copy.bytes.data(), copy.bytes.size());
        groups.pop_front();
    }
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8 i + r hands the address of row r
// of 8 x 8 matrix i; lane l receives in register i the pair at row l / 4, columns 2 (l % 4)
// and + 1 of matrix i (with .trans, of its transpose).
inline void load_matrices(std::uint32_t (&r)[4], const void* row_address, bool transposed) {
    block_state::slot mine;
    mine.address = row_address;
    const int lane = simt::lane();
    const auto& all = exchange_in_warp(mine);
    for (int i = 0; i < 4; ++i) {
        std::uint16_t halves[2];
        for (int half = 0; half < 2; ++half) {
            const int row = lane / 4, col = 2 * (lane % 4) + half;
            // M_i[row][col], or of the transpose: M_i[col][row].
            const int source_row = transposed ? col : row, source_col = transposed ? row : col;
            const auto* at = static_cast<const std::uint16_t*>(all[std::size_t(8 * i + source_row)].address);
            halves[half] = at[source_col];
        }
        r[i] = std::uint32_t(halves[0]) | (std::uint32_t(halves[1]) << 16);
    }
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d (16 x 8) += A (16 x 16) B (16 x 8),
// with g = lane / 4 and t = lane % 4: A's register r holds row g + 8 (r % 2), columns
// 2t + 8 (r / 2) and + 1; B's register r rows 2t + 8 r and + 1 of column g; d's element e is
// at row g + 8 (e / 2), column 2t + e % 2. Products of bf16 are exact in fp32; the sum runs
// in fp32.
inline void multiply_add(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    block_state::slot mine;
    for (int r = 0; r < 4; ++r) mine.a[std::size_t(r)] = a[r];
    mine.b = {b0, b1};
    const int lane = simt::lane();
    const auto& all = exchange_in_warp(mine);
    float A[16][16], B[16][8];
    for (int l = 0; l < warp_size; ++l) {
        const int g = l / 4, t = l % 4;
        for (int half = 0; half < 2; ++half) {
            for (int r = 0; r < 4; ++r)
                A[g + 8 * (r % 2)][2 * t + 8 * (r / 2) + half] = bf16_half(all[std::size_t(l)].a[std::size_t(r)], half);
            for (int r = 0; r < 2; ++r)
                B[2 * t + 8 * r + half][g] = bf16_half(all[std::size_t(l)].b[std::size_t(r)], half);
        }
    }
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float sum = d[e];
        for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
        d[e] = sum;
    }
}

namespace detail {
// Starts one of a block's host threads: std::jthread's constructor, which throws
// std::system_error when the system has no thread to give (launch_with's test plants that).
struct start_host_thread {
    template <class Body>
    void operator()(std::vector<std::jthread>& running, Body&& body) const {
        running.emplace_back(std::forward<Body>(body));
    }
};

// launch, with each host thread started by `start_thread(running, body)`.
template <class StartThread>
void launch_with(StartThread start_thread, index3 grid, index3 block, std::size_t shared_bytes,
                 const std::function<void()>& kernel) {
    const unsigned long long threads = 1ull * block.x * block.y * block.z;
    require(threads > 0 && threads <= 1024, "simt::launch: threads a block", threads, "must be in [1, 1024]");
    block_state state(int(threads), shared_bytes);
    {
        std::vector<std::jthread> running;
        running.reserve(std::size_t(threads));
        for (int t = 0; t < int(threads); ++t) {
            auto body = [&, t] {
                const auto rank = unsigned(t);
                threadIdx = {rank % block.x, rank / block.x % block.y, rank / (block.x * block.y)};
                gridDim = grid;
                blockDim = block;
                thread_rank = t;
                current_block = &state;
                try {
                    const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
                    for (unsigned long long b = 0; b < blocks; ++b) {  // x fastest, as CUDA numbers them
                        if (t == 0) state.fill_shared_memory(undefined_byte);
                        state.synchronize_block();  // no thread starts the block before its memory is fresh
                        if (state.stopping()) break;
                        blockIdx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / grid.x / grid.y)};
                        copies_in_flight = {};  // a copy never waited for lands nowhere
                        kernel();
                        state.synchronize_block();  // nor refills it while another still runs the last
                    }
                } catch (...) {
                    state.leave_after_throw(t, std::current_exception());
                }
                current_block = nullptr;
            };
            try {
                start_thread(running, std::move(body));
            } catch (...) {
                // Thread t and those after it never start: they leave the barriers as a thread
                // that threw does, so the started ones stop at the block's first barrier (none
                // passes it before the last of these leaves) instead of waiting there forever.
                const std::exception_ptr error = std::current_exception();
                for (int never = t; never < int(threads); ++never) state.leave_after_throw(never, error);
                break;
            }
        }
    }  // the threads join here
    if (const std::exception_ptr error = state.error()) std::rethrow_exception(error);
}
}  // namespace detail

// Runs `kernel()` as a grid of `grid` blocks of `block` threads (at most 1,024) with
// `shared_bytes` of dynamic shared memory: the blocks one after another, a block's threads as
// host threads at once (the same host threads for every block of the launch: starting them
// costs more than a small block's work). Each block's shared memory starts as undefined_byte,
// so a read of what the block never wrote shows in its results. An exception on a block's
// thread (a `require` of the emulation, say) ends the launch: the block's other threads finish
// it without that one, no later block starts, and launch throws the first such exception once
// they have all stopped. So does a host thread that fails to start (std::system_error), before
// any block runs.
inline void launch(index3 grid, index3 block, std::size_t shared_bytes, const std::function<void()>& kernel) {
    detail::launch_with(detail::start_host_thread{}, grid, block, shared_bytes, kernel);
}

// One-dimensional blocks of `threads` threads.
inline void launch(index3 grid, int threads, std::size_t shared_bytes, const std::function<void()>& kernel) {
    require(threads > 0, "simt::launch: threads", threads, "must be positive");
    launch(grid, index3{unsigned(threads), 1, 1}, shared_bytes, kernel);
}

}  // namespace weft::exec::cuda_detail::simt
