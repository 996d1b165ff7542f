// The mma.sync attention kernels' index arithmetic (weft/exec/cuda/mma_fragments.hpp), checked
// on the host: this file emulates ldmatrix.x4 and mma.sync.m16n8k16 for a whole warp as the
// PTX ISA describes them, independently of the header, then runs the kernels' three register
// products (kernels/flash_attention_mma.cuh: load_rows, rows_times_tile_transposed and
// accumulate_times_tile, with scores_as_a) through the emulation and compares each with the
// plain matrix product. A wrong lane address, a swapped register or a misplaced accumulator
// gives a wrong product here, in every CI build, without a GPU.
//
// Values are small integers, exact in bf16 and in the products, so results compare exactly.
// A tile's padding columns (the kernels' rows are D + 8 elements) hold NaN, so reading one
// shows up as a NaN in the product.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <vector>

#include "weft/exec/cuda/mma_fragments.hpp"

namespace {

namespace fragments = weft::cuda::mma_fragments;

constexpr int warp_size = 32;
constexpr int tile_rows = 64;      // flash::tile: rows of a block's tile
constexpr int rows_per_warp = 16;  // mma's m: a warp's rows of the tile

// A row-major shared-memory tile as the kernels lay it out: `ld` = D + 8 elements a row.
struct shared_tile {
    int rows;
    int cols;
    int ld;
    std::vector<double> values;

    shared_tile(int rows_, int cols_, int seed) : rows(rows_), cols(cols_), ld(cols_ + 8) {
        values.assign(std::size_t(rows) * std::size_t(ld), std::numeric_limits<double>::quiet_NaN());
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) at(r, c) = double((r * 7 + c * 3 + seed) % 7 - 3);
    }
    double& at(int r, int c) { return values[std::size_t(r) * std::size_t(ld) + std::size_t(c)]; }
    [[nodiscard]] double at(int r, int c) const { return values[std::size_t(r) * std::size_t(ld) + std::size_t(c)]; }
};

using pair = std::array<double, 2>;  // a 32-bit register's two bf16 (low half first)
using x4_registers = std::array<std::array<pair, 4>, warp_size>;
using accumulators = std::array<std::array<double, 4>, warp_size>;

// ldmatrix.sync.aligned.m8n8.x4(.trans).b16, per the PTX ISA: lane 8 i + r gives the address
// of row r of matrix i (8 consecutive elements); without .trans lane l receives in register i
// row l / 4, elements 2 (l % 4) and + 1 of matrix i; with .trans, the same of its transpose.
x4_registers load_matrices(const shared_tile& tile, const std::array<fragments::element, warp_size>& address,
                           bool transposed) {
    x4_registers out{};
    for (int lane = 0; lane < warp_size; ++lane)
        for (int i = 0; i < 4; ++i)
            for (int half = 0; half < 2; ++half) {
                const int r = lane / 4, c = 2 * (lane % 4) + half;
                const fragments::element row_start =
                    transposed ? address[std::size_t(8 * i + c)] : address[std::size_t(8 * i + r)];
                out[std::size_t(lane)][std::size_t(i)][std::size_t(half)] =
                    tile.at(row_start.row, row_start.col + (transposed ? r : c));
            }
    return out;
}

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

// The emulated mma.sync: d += A B with A and B gathered from the warp's registers.
void multiply_add(accumulators& d, const std::array<std::array<pair, 4>, warp_size>& a,
                  const std::array<std::array<pair, 2>, warp_size>& b) {
    double A[16][16] = {}, B[16][8] = {};
    for (int lane = 0; lane < warp_size; ++lane)
        for (int half = 0; half < 2; ++half) {
            for (int r = 0; r < 4; ++r) {
                const fragments::element at = ptx_a(lane, r, half);
                A[at.row][at.col] = a[std::size_t(lane)][std::size_t(r)][std::size_t(half)];
            }
            for (int r = 0; r < 2; ++r) {
                const fragments::element at = ptx_b(lane, r, half);
                B[at.row][at.col] = b[std::size_t(lane)][std::size_t(r)][std::size_t(half)];
            }
        }
    for (int lane = 0; lane < warp_size; ++lane)
        for (int e = 0; e < 4; ++e) {
            const fragments::element at = ptx_d(lane, e);
            double sum = 0;
            for (int k = 0; k < 16; ++k) sum += A[at.row][k] * B[k][at.col];
            d[std::size_t(lane)][std::size_t(e)] += sum;
        }
}

// The two B operands (registers 0, 1 and 2, 3) that one ldmatrix.x4 loads.
std::array<std::array<pair, 2>, warp_size> b_registers(const x4_registers& loaded, int which) {
    std::array<std::array<pair, 2>, warp_size> b{};
    for (int lane = 0; lane < warp_size; ++lane)
        for (int r = 0; r < 2; ++r)
            b[std::size_t(lane)][std::size_t(r)] = loaded[std::size_t(lane)][std::size_t(2 * which + r)];
    return b;
}

std::array<fragments::element, warp_size> addresses(fragments::element (*in_block)(int), int block_row, int block_col) {
    std::array<fragments::element, warp_size> out{};
    for (int lane = 0; lane < warp_size; ++lane) {
        const fragments::element at = in_block(lane);
        out[std::size_t(lane)] = {block_row + at.row, block_col + at.col};
    }
    return out;
}

// load_rows: a warp's 16 rows of a 64 x D tile as D / 16 A operands.
std::vector<x4_registers> load_rows(const shared_tile& tile, int warp) {
    std::vector<x4_registers> rows;
    for (int kk = 0; kk < tile.cols / 16; ++kk)
        rows.push_back(load_matrices(tile, addresses(fragments::a_rows, warp * rows_per_warp, kk * 16), false));
    return rows;
}

// rows_times_tile_transposed: the warp's 16 x 64 scores, 8 accumulator tiles of 8 columns.
std::vector<accumulators> rows_times_tile_transposed(const std::vector<x4_registers>& rows, const shared_tile& tile) {
    std::vector<accumulators> s(tile_rows / 8, accumulators{});
    for (int kk = 0; kk < tile.cols / 16; ++kk)
        for (int pair_index = 0; pair_index < tile_rows / 16; ++pair_index) {
            const x4_registers b =
                load_matrices(tile, addresses(fragments::b_pair_from_rows, pair_index * 16, kk * 16), false);
            multiply_add(s[std::size_t(2 * pair_index)], rows[std::size_t(kk)], b_registers(b, 0));
            multiply_add(s[std::size_t(2 * pair_index + 1)], rows[std::size_t(kk)], b_registers(b, 1));
        }
    return s;
}

// scores_as_a: the A operand of keys [16 j, 16 j + 16) from score tiles 2 j and 2 j + 1.
x4_registers scores_as_a(const std::vector<accumulators>& p, int j) {
    x4_registers a{};
    for (int lane = 0; lane < warp_size; ++lane)
        for (int r = 0; r < 4; ++r) {
            const auto& from = p[std::size_t(2 * j + fragments::accumulator_tile(r))][std::size_t(lane)];
            const int e = fragments::accumulator_element(r);
            a[std::size_t(lane)][std::size_t(r)] = {from[std::size_t(e)], from[std::size_t(e + 1)]};
        }
    return a;
}

// accumulate_times_tile: the warp's 16 x D sums += p (16 x 64) times the 64 x D tile.
void accumulate_times_tile(std::vector<accumulators>& sums, const std::vector<accumulators>& p,
                           const shared_tile& tile) {
    for (int j = 0; j < tile_rows / 16; ++j) {
        const x4_registers a = scores_as_a(p, j);
        for (int pair_index = 0; pair_index < tile.cols / 16; ++pair_index) {
            const x4_registers b =
                load_matrices(tile, addresses(fragments::b_pair_from_columns, j * 16, pair_index * 16), true);
            multiply_add(sums[std::size_t(2 * pair_index)], a, b_registers(b, 0));
            multiply_add(sums[std::size_t(2 * pair_index + 1)], a, b_registers(b, 1));
        }
    }
}

// The matrix a warp's accumulator tiles hold, placed by fragments::accumulator.
std::vector<std::vector<double>> as_matrix(const std::vector<accumulators>& tiles) {
    std::vector<std::vector<double>> m(rows_per_warp, std::vector<double>(tiles.size() * 8, std::nan("")));
    for (std::size_t n = 0; n < tiles.size(); ++n)
        for (int lane = 0; lane < warp_size; ++lane)
            for (int e = 0; e < 4; ++e) {
                const fragments::element at = fragments::accumulator(lane, e);
                m[std::size_t(at.row)][n * 8 + std::size_t(at.col)] = tiles[n][std::size_t(lane)][std::size_t(e)];
            }
    return m;
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

TEST_CASE("mma fragments: scores = rows times a tile transposed, as the kernels compute them",
          "[exec][mma_fragments]") {
    for (const int head_dim : {32, 64, 96, 128}) {
        const shared_tile queries(tile_rows, head_dim, 1), keys(tile_rows, head_dim, 4);
        for (int warp = 0; warp < tile_rows / rows_per_warp; ++warp) {
            const auto scores = as_matrix(rows_times_tile_transposed(load_rows(queries, warp), keys));
            for (int i = 0; i < rows_per_warp; ++i)
                for (int key = 0; key < tile_rows; ++key) {
                    double expected = 0;
                    for (int d = 0; d < head_dim; ++d)
                        expected += queries.at(warp * rows_per_warp + i, d) * keys.at(key, d);
                    INFO("D " << head_dim << ", warp " << warp << ", row " << i << ", key " << key);
                    REQUIRE(scores[std::size_t(i)][std::size_t(key)] == expected);
                }
        }
    }
}

TEST_CASE("mma fragments: sums += scores (as A operands) times a tile, as the kernels compute them",
          "[exec][mma_fragments]") {
    for (const int head_dim : {32, 64, 96, 128}) {
        const shared_tile values(tile_rows, head_dim, 2);
        // Probabilities in the accumulators' places: tile n, lane, element e.
        std::vector<accumulators> p(tile_rows / 8, accumulators{});
        for (std::size_t n = 0; n < p.size(); ++n)
            for (int lane = 0; lane < warp_size; ++lane)
                for (int e = 0; e < 4; ++e)
                    p[n][std::size_t(lane)][std::size_t(e)] = double((int(n) * 5 + lane * 3 + e) % 5 - 2);
        std::vector<accumulators> sums(std::size_t(head_dim / 8), accumulators{});
        accumulate_times_tile(sums, p, values);

        const auto probabilities = as_matrix(p);
        const auto result = as_matrix(sums);
        for (int i = 0; i < rows_per_warp; ++i)
            for (int d = 0; d < head_dim; ++d) {
                double expected = 0;
                for (int key = 0; key < tile_rows; ++key)
                    expected += probabilities[std::size_t(i)][std::size_t(key)] * values.at(key, d);
                INFO("D " << head_dim << ", row " << i << ", column " << d);
                REQUIRE(result[std::size_t(i)][std::size_t(d)] == expected);
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
