// Which lane of a warp holds which matrix element for mma.sync.m16n8k16 (bf16 inputs, fp32
// accumulators) and ldmatrix.x4, and which shared-memory row each lane hands ldmatrix in the
// mma.sync attention kernels (kernels/flash_attention_mma_kernels.cuh).
//
// Why a CUDA-free header: those kernels keep their scores in registers, so all of their
// correctness rests on this index arithmetic, and no GPU has run them yet. Here it is plain
// constexpr code that the kernels call and that a host test (tests/exec/mma_fragments_test.cpp)
// checks in every CI build against an emulation of the two instructions written from the PTX
// ISA ("Matrix Fragments for mma.m16n8k16 with floating point type", "ldmatrix").
//
// Notation: g = lane / 4 (the lane's group) and t = lane % 4 (its place in the group). A
// register of an A or B fragment holds two bf16, `half` 0 in the low 16 bits.
#pragma once

#if defined(__CUDACC__)
#define WEFT_MMA_FRAGMENT_FUNCTION __host__ __device__ constexpr
#else
#define WEFT_MMA_FRAGMENT_FUNCTION constexpr
#endif

namespace weft::exec::cuda_detail::mma_fragments {

// An element's place in its matrix (or, for an address, the first element of the 8 that one
// lane's address covers).
struct element {
    int row;
    int col;
    friend constexpr bool operator==(const element&, const element&) = default;
};

// ---- mma.m16n8k16 operands ---------------------------------------------------------------

// The accumulator (16 x 8, fp32): element e (0..3) of a lane is at row g + 8 (e / 2),
// column 2t + e % 2.
WEFT_MMA_FRAGMENT_FUNCTION element accumulator(int lane, int e) {
    return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

// A (16 x 16, row-major): register r (0..3) holds row g + 8 (r % 2), columns 2t + 8 (r / 2)
// and + 1.
WEFT_MMA_FRAGMENT_FUNCTION element a_operand(int lane, int r, int half) {
    return {lane / 4 + 8 * (r % 2), 2 * (lane % 4) + 8 * (r / 2) + half};
}

// B (16 x 8, "col"): register r (0..1) holds rows 2t + 8 r and + 1 of column g.
WEFT_MMA_FRAGMENT_FUNCTION element b_operand(int lane, int r, int half) {
    return {2 * (lane % 4) + 8 * r + half, lane / 4};
}

// Scores as the next product's A: the 16 x 16 A of keys [16 j, 16 j + 16) is the accumulators
// of the two 16 x 8 score tiles 2 j and 2 j + 1. A's register r packs elements
// accumulator_element(r) and + 1 of tile 2 j + accumulator_tile(r), which the lane holds at
// the very row and columns A wants (checked below).
WEFT_MMA_FRAGMENT_FUNCTION int accumulator_tile(int r) {
    return r / 2;
}
WEFT_MMA_FRAGMENT_FUNCTION int accumulator_element(int r) {
    return 2 * (r % 2);
}

// ---- ldmatrix.x4 addresses ----------------------------------------------------------------
// ldmatrix.x4 loads four 8 x 8 bf16 matrices: lane l gives the address of row l % 8 of
// matrix l / 8, and matrix i arrives in every lane's register i. Each function below says,
// for one 16 x 16 block of a row-major shared tile, where in the block lane l points.

// The block as an A operand: matrices (rows 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15) are A's registers 0 to 3.
WEFT_MMA_FRAGMENT_FUNCTION element a_rows(int lane) {
    return {lane % 16, lane / 16 * 8};
}

// The block's rows as the columns of two 8-column B operands (keys of K in Q K^T), read as
// stored: matrices (rows 0-7, columns 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) are
// registers 0 and 1 of the B of rows 0-7, then of the B of rows 8-15.
WEFT_MMA_FRAGMENT_FUNCTION element b_pair_from_rows(int lane) {
    return {lane / 16 * 8 + lane % 8, lane / 8 % 2 * 8};
}

// The block's columns as the columns of two 8-column B operands (V in P V), read with .trans:
// matrices (rows 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) are registers 0
// and 1 of the B of columns 0-7, then of the B of columns 8-15.
WEFT_MMA_FRAGMENT_FUNCTION element b_pair_from_columns(int lane) {
    return {lane / 8 % 2 * 8 + lane % 8, lane / 16 * 8};
}

// ---- the identities the kernels rely on -----------------------------------------------------

// Every element of the A of keys [16 j, 16 j + 16) sits in the same lane, row and column
// (8 columns further for tile 2 j + 1) as the accumulator the kernels take it from.
constexpr bool accumulators_are_a_operands() {
    for (int lane = 0; lane < 32; ++lane)
        for (int r = 0; r < 4; ++r)
            for (int half = 0; half < 2; ++half) {
                const element from = accumulator(lane, accumulator_element(r) + half);
                const element as_a = a_operand(lane, r, half);
                if (as_a.row != from.row || as_a.col != from.col + 8 * accumulator_tile(r)) return false;
            }
    return true;
}
static_assert(accumulators_are_a_operands());

// The four lanes that hold a row of accumulators differ only in their two low bits, so a
// row's maximum and sum need shuffles across lane ^ 1 and lane ^ 2 only.
constexpr bool rows_live_in_lane_quads() {
    for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e)
            for (int other = 0; other < 32; ++other)
                for (int f = 0; f < 4; ++f) {
                    const bool same_row = accumulator(lane, e).row == accumulator(other, f).row;
                    const bool same_quad = lane / 4 == other / 4 && e / 2 == f / 2;
                    if (same_row != same_quad) return false;
                }
    return true;
}
static_assert(rows_live_in_lane_quads());

}  // namespace weft::exec::cuda_detail::mma_fragments

#undef WEFT_MMA_FRAGMENT_FUNCTION
