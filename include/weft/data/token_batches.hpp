// Batches of (input, target) token rows from a token file with llm.c's DataLoader
// semantics, so weft and llm.c/PyTorch references see the same tokens at every step,
// and the micro-batch views a pipeline schedule feeds to its first and last stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/token_file.hpp"

namespace weft::data {

// rows x seq_len tokens, row-major; targets[i] is the token that follows inputs[i].
struct token_batch {
    int rows = 0;
    int seq_len = 0;
    std::vector<std::int32_t> inputs;
    std::vector<std::int32_t> targets;
};

// Rows of a token_batch, viewed without copying.
struct token_batch_view {
    int rows = 0;
    int seq_len = 0;
    std::span<const std::int32_t> inputs;
    std::span<const std::int32_t> targets;
};

// Batches that fit in the file before llm.c restarts from its beginning.
[[nodiscard]] inline long long batches_per_epoch(const io::token_file& file, int batch_size, int seq_len) {
    require(batch_size > 0, "batch_size", batch_size, "must be positive");
    require(seq_len > 0, "seq_len", seq_len, "must be positive");
    const long long span = static_cast<long long>(batch_size) * seq_len;
    require(static_cast<long long>(file.size()) >= span + 1, "token file", file.path().string(),
            "holds " + std::to_string(file.size()) + " tokens, fewer than batch_size * seq_len + 1 = " +
                std::to_string(span + 1) + " needed for one batch");
    return (static_cast<long long>(file.size()) - 1) / span;
}

// Step k reads the B*T + 1 contiguous tokens starting at (k mod n) * B*T, n being
// batches_per_epoch: like llm.c, a batch that would run past the end of the file
// starts again at token 0 instead (the tail of the file is never split across batches).
[[nodiscard]] inline token_batch batch_at(const io::token_file& file, long long step, int batch_size, int seq_len) {
    require(step >= 0, "step", step, "must be non-negative");
    const long long per_epoch = batches_per_epoch(file, batch_size, seq_len);
    const std::size_t count = std::size_t(batch_size) * std::size_t(seq_len);
    const std::size_t start = std::size_t(step % per_epoch) * count;
    const std::span<const std::uint16_t> window = file.tokens().subspan(start, count + 1);
    token_batch batch{batch_size, seq_len, {}, {}};
    batch.inputs.assign(window.begin(), window.end() - 1);
    batch.targets.assign(window.begin() + 1, window.end());
    return batch;
}

// Micro-batch j of m takes rows [j*B/m, (j+1)*B/m): sizes differ by at most one row
// when m does not divide B. The view borrows from `batch`.
[[nodiscard]] inline token_batch_view micro_batch(const token_batch& batch, int index, int count) {
    require(count >= 1 && count <= batch.rows, "micro-batch count", count,
            "must be in [1, rows = " + std::to_string(batch.rows) + "] so that no micro-batch is empty");
    require(index >= 0 && index < count, "micro-batch index", index,
            "must be in [0, " + std::to_string(count) + ")");
    const std::size_t first = std::size_t(static_cast<long long>(index) * batch.rows / count);
    const std::size_t last = std::size_t(static_cast<long long>(index + 1) * batch.rows / count);
    const std::size_t t = std::size_t(batch.seq_len);
    return {int(last - first), batch.seq_len,
            std::span<const std::int32_t>(batch.inputs).subspan(first * t, (last - first) * t),
            std::span<const std::int32_t>(batch.targets).subspan(first * t, (last - first) * t)};
}
// A view into a temporary batch would dangle.
token_batch_view micro_batch(const token_batch&& batch, int index, int count) = delete;

}  // namespace weft::data
