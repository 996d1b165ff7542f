// The mma.sync attention kernels' index arithmetic (weft/exec/cuda/mma_fragments.hpp) and the
// host emulation of the two warp instructions they rest on (weft/exec/cuda/simt_emulation.hpp),
// both checked against the PTX ISA's fragment figures, written out here apart from either
// ("Matrix Fragments for mma.m16n8k16 with floating point type", "ldmatrix"). The kernels
// themselves run on that emulation in test_cuda_kernels_emulated; these checks are what make its
// verdict the PTX ISA's rather than the emulation's. No GPU and no CUDA toolkit needed.
//
// Values are small integers, exact in bf16 and in the products, so results compare exactly.
#include <array>
#include <bit>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "weft/exec/cuda/mma_fragments.hpp"
#include "weft/exec/cuda/simt_emulation.hpp"

namespace {

namespace fragments = weft::exec::cuda_detail::mma_fragments;
namespace simt = weft::exec::cuda_detail::simt;

constexpr int warp_size = 32;
constexpr int tile_rows = 64;  // flash::tile: rows of a block's tile

// Where mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 takes and leaves its elements, per
// the PTX ISA's fragment figures (groupID = lane >> 2, threadID_in_group = lane & 3), written
// here apart from the header that they check: A's a0..a7 at (groupID, 2t + {0, 1}),
// (groupID + 8, ...), (groupID, 2t + 8 + {0, 1}), (groupID + 8, ...); B's b0..b3 at
// (2t + {0, 1}, groupID), (2t + 8 + {0, 1}, groupID); D's c0..c3 at (groupID, 2t + {0, 1}),
// (groupID + 8, 2t + {0, 1}). Register r holds elements 2r and 2r + 1 (`half` 0 and 1).
fragments::element ptx_a(int lane, int r, int half) {
    const int group = lane >> 2, t = lane & 3;
    return {group + 8 * (r & 1), 2 * t + 8 * (r >> 1) + half};
}
fragments::element ptx_b(int lane, int r, int half) {
    const int group = lane >> 2, t = lane & 3;
    return {2 * t + 8 * r + half, group};
}
fragments::element ptx_d(int lane, int e) {
    const int group = lane >> 2, t = lane & 3;
    return {group + 8 * (e >> 1), 2 * t + (e & 1)};
}

std::array<fragments::element, warp_size> addresses(fragments::element (*in_block)(int), int block_row, int block_col) {
    std::array<fragments::element, warp_size> out{};
    for (int lane = 0; lane < warp_size; ++lane) {
        const fragments::element at = in_block(lane);
        out[std::size_t(lane)] = {block_row + at.row, block_col + at.col};
    }
    return out;
}

// The bf16 bits of a small integer (exact in bf16: the top half of its float).
std::uint32_t bf16_bits(double v) {
    return std::bit_cast<std::uint32_t>(float(v)) >> 16;
}
std::uint32_t pack(double low, double high) {
    return bf16_bits(low) | (bf16_bits(high) << 16);
}

}  // namespace

TEST_CASE("mma fragments: the header's operand layouts are the PTX ISA's", "[exec][mma_fragments]") {
    // The figures above place each element of A (16 x 16), B (16 x 8) and D (16 x 8) in exactly
    // one lane and register, and the header agrees with them.
    int a_seen[16][16] = {}, b_seen[16][8] = {}, d_seen[16][8] = {};
    for (int lane = 0; lane < warp_size; ++lane) {
        for (int half = 0; half < 2; ++half) {
            for (int r = 0; r < 4; ++r) {
                const fragments::element at = ptx_a(lane, r, half);
                ++a_seen[at.row][at.col];
                CHECK(fragments::a_operand(lane, r, half) == at);
            }
            for (int r = 0; r < 2; ++r) {
                const fragments::element at = ptx_b(lane, r, half);
                ++b_seen[at.row][at.col];
                CHECK(fragments::b_operand(lane, r, half) == at);
            }
        }
        for (int e = 0; e < 4; ++e) {
            const fragments::element at = ptx_d(lane, e);
            ++d_seen[at.row][at.col];
            CHECK(fragments::accumulator(lane, e) == at);
        }
    }
    for (int i = 0; i < 16; ++i) {
        for (int k = 0; k < 16; ++k) CHECK(a_seen[i][k] == 1);
        for (int j = 0; j < 8; ++j) {
            CHECK(b_seen[i][j] == 1);
            CHECK(d_seen[i][j] == 1);
        }
    }
}

TEST_CASE("simt emulation: mma.sync m16n8k16 is D = A B + C in the PTX ISA's fragment layout",
          "[exec][mma_fragments]") {
    double A[16][16], B[16][8], C[16][8];
    for (int i = 0; i < 16; ++i) {
        for (int k = 0; k < 16; ++k) A[i][k] = double((i * 3 + k * 5) % 7 - 3);
        for (int j = 0; j < 8; ++j) B[i][j] = double((i * 5 + j * 3) % 5 - 2), C[i][j] = double(i - j);
    }
    std::array<std::array<float, 4>, warp_size> result{};
    simt::launch({1, 1, 1}, warp_size, 0, [&] {
        const int lane = int(threadIdx.x);
        std::uint32_t a[4], b[2];
        for (int r = 0; r < 4; ++r) {
            const fragments::element low = ptx_a(lane, r, 0), high = ptx_a(lane, r, 1);
            a[r] = pack(A[low.row][low.col], A[high.row][high.col]);
        }
        for (int r = 0; r < 2; ++r) {
            const fragments::element low = ptx_b(lane, r, 0), high = ptx_b(lane, r, 1);
            b[r] = pack(B[low.row][low.col], B[high.row][high.col]);
        }
        float d[4];
        for (int e = 0; e < 4; ++e) d[e] = float(C[ptx_d(lane, e).row][ptx_d(lane, e).col]);
        simt::multiply_add(d, a, b[0], b[1]);
        for (int e = 0; e < 4; ++e) result[std::size_t(lane)][std::size_t(e)] = d[e];
    });
    for (int lane = 0; lane < warp_size; ++lane)
        for (int e = 0; e < 4; ++e) {
            const fragments::element at = ptx_d(lane, e);
            double expected = C[at.row][at.col];
            for (int k = 0; k < 16; ++k) expected += A[at.row][k] * B[k][at.col];
            INFO("lane " << lane << ", element " << e);
            REQUIRE(double(result[std::size_t(lane)][std::size_t(e)]) == expected);
        }
}

TEST_CASE("simt emulation: ldmatrix.x4 (and .trans) hands each lane the PTX ISA's pairs", "[exec][mma_fragments]") {
    // A 16 x 24 row-major tile of distinct 16-bit values; matrix i of the x4 is the 8 x 8 block
    // at rows 8 (i / 2), columns 8 (i % 2) + 4 (an offset, as the kernels' blocks have).
    std::vector<std::uint16_t> tile(16 * 24);
    for (std::size_t i = 0; i < tile.size(); ++i) tile[i] = std::uint16_t(1000 + i);
    const auto value = [&](int matrix, int row, int col) {
        return tile[std::size_t((8 * (matrix / 2) + row) * 24 + 8 * (matrix % 2) + 4 + col)];
    };
    for (const bool transposed : {false, true}) {
        std::array<std::array<std::uint32_t, 4>, warp_size> result{};
        simt::launch({1, 1, 1}, warp_size, 0, [&] {
            const int lane = int(threadIdx.x), matrix = lane / 8, row = lane % 8;  // lane 8 i + r: row r of i
            std::uint32_t r[4];
            simt::load_matrices(r, &tile[std::size_t((8 * (matrix / 2) + row) * 24 + 8 * (matrix % 2) + 4)],
                                transposed);
            for (int i = 0; i < 4; ++i) result[std::size_t(lane)][std::size_t(i)] = r[i];
        });
        // Lane l, register i: row l / 4, columns 2 (l % 4) and + 1 of matrix i (of its
        // transpose with .trans), the lower column in the low half.
        for (int lane = 0; lane < warp_size; ++lane)
            for (int i = 0; i < 4; ++i) {
                const int row = lane / 4, col = 2 * (lane % 4);
                const std::uint32_t low = transposed ? value(i, col, row) : value(i, row, col);
                const std::uint32_t high = transposed ? value(i, col + 1, row) : value(i, row, col + 1);
                INFO((transposed ? ".trans" : "") << " lane " << lane << ", register " << i);
                REQUIRE(result[std::size_t(lane)][std::size_t(i)] == (low | (high << 16)));
            }
    }
}

TEST_CASE("mma fragments: every ldmatrix address is 16-byte aligned and each 8x8 matrix hits 8 bank groups",
          "[exec][mma_fragments]") {
    // An 8 x 8 bf16 matrix is one shared-memory wavefront when its 8 rows of 16 bytes fall in
    // distinct 16-byte slots of the 128-byte bank window; the kernels' D + 8 row padding is
    // what spreads them.
    for (const int head_dim : {32, 64, 96, 128}) {
        const int ld = head_dim + 8;
        for (auto* in_block : {fragments::a_rows, fragments::b_pair_from_rows, fragments::b_pair_from_columns})
            for (int block_row = 0; block_row < tile_rows; block_row += 16)
                for (int block_col = 0; block_col < head_dim; block_col += 16) {
                    const auto address = addresses(in_block, block_row, block_col);
                    for (int matrix = 0; matrix < 4; ++matrix) {
                        std::set<int> slots;
                        for (int r = 0; r < 8; ++r) {
                            const auto& at = address[std::size_t(8 * matrix + r)];
                            const int byte = (at.row * ld + at.col) * 2;
                            REQUIRE(byte % 16 == 0);
                            REQUIRE(at.col + 8 <= head_dim);
                            slots.insert(byte / 16 % 8);
                        }
                        INFO("D " << head_dim << ", block (" << block_row << ", " << block_col << "), matrix "
                                  << matrix);
                        CHECK(slots.size() == 8);
                    }
                }
    }
}
