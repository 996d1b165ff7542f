// GPT's input layer: token embedding wte [vocab, width] plus learned position
// embedding wpe [seq_len, width]. Its input is token ids, so it has no input gradient;
// its whole backward is the weight half (a scatter-add into wte and wpe).
// Tensor parallelism splits wte by vocabulary rows (Megatron's VocabParallelEmbedding): through
// the backend's exec::vocab_parallel_embedding_kernels where it has them and its matrices
// can be summed where they are, on a host copy otherwise.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/core/parameter_registry.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/nn/token_view.hpp"

namespace weft::nn {

template <compute_backend Backend>
class embedding {
public:
    using scalar = typename Backend::scalar;
    using matrix = typename Backend::matrix;

    struct saved {
        std::vector<std::int32_t> tokens;  // copied: the caller's buffer may be reused before W runs
        matrix d_out;                      // gradient of the output, kept for backward_weight
    };

    embedding() = default;
    // Registers "wte.weight" [vocab, width] and "wpe.weight" [seq_len, width]. Under a tp
    // group of size n this rank holds the wte rows split_range(vocab, rank, n) (vocab need
    // not divide by n); wpe stays whole on every rank.
    embedding(parameter_registry& registry, int vocab, int width, int seq_len, const tp_group<scalar>& tp = {})
        : vocab_(vocab), width_(width), seq_len_(seq_len) {
        wte_offset_ = registry.add("wte.weight", {vocab, width}, {0, 1, tp.rank, tp.size});
        wpe_offset_ = registry.add("wpe.weight", {seq_len, width});
        rows_ = split_range(vocab, tp.rank, tp.size);
        if (tp.size > 1) tp_ = tp;
    }

    [[nodiscard]] std::size_t wte_offset() const { return wte_offset_; }
    // The vocabulary rows of wte this rank holds ([0, vocab) without tensor parallelism).
    [[nodiscard]] index_range vocab_rows() const { return rows_; }

    [[nodiscard]] matrix forward(Backend& backend, std::span<const scalar> params,
                                 std::span<const std::int32_t> tokens, saved& s) const {
        s.tokens.assign(tokens.begin(), tokens.end());
        if (tp_.size == 1)
            return backend.embedding_forward(tokens, wte(params), wpe(params), vocab_, width_, seq_len_);
        check_tokens(tokens, "embedding forward");
        if constexpr (exec::vocab_parallel_embedding_kernels<Backend>) {
            // The group's sum of the backend's memory: host memory, or a device communicator's.
            if (std::same_as<typename Backend::memory_space, host_space> || tp_.moves_device_memory)
                return backend.vocab_parallel_embedding_forward(tokens, wte(params), rows_.first, wpe(params), width_,
                                                                seq_len_,
                                                                [this](std::span<scalar> v) { tp_.allreduce_sum(v); });
        }
        return parallel_forward_on_host(backend, params, tokens);
    }
    // Nothing upstream of token ids: only keeps dy for backward_weight.
    void backward_input(Backend& /*backend*/, matrix dy, saved& s) const { s.d_out = std::move(dy); }
    void backward_weight(Backend& backend, std::span<scalar> grads, const saved& s) const {
        if (tp_.size == 1) {
            backend.embedding_backward_weight(s.tokens, s.d_out, wte(grads), wpe(grads), vocab_, seq_len_);
            return;
        }
        check_tokens(s.tokens, "embedding backward_weight");
        if constexpr (exec::vocab_parallel_embedding_kernels<Backend>) {
            backend.vocab_parallel_embedding_backward_weight(s.tokens, s.d_out, wte(grads), rows_.first, wpe(grads),
                                                             seq_len_);
        } else {
            parallel_backward_weight_on_host(backend, grads, s);
        }
    }

private:
    template <class T>
    std::span<T> wte(std::span<T> buffer) const {
        return buffer.subspan(wte_offset_, std::size_t(rows_.size()) * std::size_t(width_));
    }
    template <class T>
    std::span<T> wpe(std::span<T> buffer) const {
        return buffer.subspan(wpe_offset_, std::size_t(seq_len_) * std::size_t(width_));
    }

    void check_tokens(std::span<const std::int32_t> tokens, const char* kernel) const {
        require(tokens.size() % std::size_t(seq_len_) == 0, std::string(kernel) + ": tokens.size()", tokens.size(),
                "must be a positive multiple of seq_len = " + std::to_string(seq_len_));
        for (std::size_t n = 0; n < tokens.size(); ++n)
            if (tokens[n] < 0 || tokens[n] >= vocab_)
                throw invalid_argument(std::string(kernel) + ": tokens[" + std::to_string(n) + "]", tokens[n],
                                       "must be a token id in [0, vocab_size = " + std::to_string(vocab_) + ")");
    }

    // The portable path (a backend without the vocabulary-parallel kernels, or a device
    // backend over a group of host memory). Each rank writes the rows of the tokens in its
    // vocabulary range and zeros elsewhere; the sum over the group is then exactly
    // wte[token] (x + 0 == x), to which wpe is added once: the same values, bit for bit, as
    // without tensor parallelism. The rows are built on the host (parameters in a GPU's
    // managed state memory included) and reach a device backend as one copy
    // (nn/tensor_parallel.hpp).
    matrix parallel_forward_on_host(Backend& backend, std::span<const scalar> params,
                                    std::span<const std::int32_t> tokens) const {
        const auto w = std::size_t(width_);
        return make_on_host(backend, static_cast<int>(tokens.size()), width_, [&](std::span<scalar> out) {
            std::fill(out.begin(), out.end(), scalar(0));
            const auto table = wte(params);
            for (std::size_t n = 0; n < tokens.size(); ++n)
                if (tokens[n] >= rows_.first && tokens[n] < rows_.last)
                    std::copy_n(table.begin() + std::ptrdiff_t(std::size_t(tokens[n] - rows_.first) * w), w,
                                out.begin() + std::ptrdiff_t(n * w));
            tp_.allreduce_sum(out);
            const auto pos = wpe(params);
            for (std::size_t n = 0; n < tokens.size(); ++n) {
                const std::size_t p = (n % std::size_t(seq_len_)) * w;
                for (std::size_t c = 0; c < w; ++c) out[n * w + c] += pos[p + c];
            }
        });
    }

    // Without the kernels: the gradient rows are summed on the host from dy (a host copy on a
    // device backend) into the gradients (host-writable: a GPU's state is in managed memory).
    void parallel_backward_weight_on_host(Backend& backend, std::span<scalar> grads, const saved& s) const {
        const auto& tokens = s.tokens;
        require(std::size_t(backend.rows(s.d_out)) == tokens.size() && backend.cols(s.d_out) == width_,
                "embedding backward_weight: dy", std::to_string(backend.rows(s.d_out)) + "x" +
                std::to_string(backend.cols(s.d_out)),
                "shape must be " + std::to_string(tokens.size()) + "x" + std::to_string(width_));
        read_on_host(backend, s.d_out, [&](std::span<const scalar> dy) { add_parallel_gradients(grads, tokens, dy); });
    }
    // dy is replicated, so every rank takes its own wte rows from it with no communication,
    // and wpe's gradient (computed alike on every rank) is the same on all of them. Summed
    // in the order the CPU kernel uses: per token, its rows in position order, added once.
    void add_parallel_gradients(std::span<scalar> grads, std::span<const std::int32_t> tokens,
                                std::span<const scalar> dy) const {
        const auto w = std::size_t(width_);
        std::vector<std::size_t> order;
        for (std::size_t n = 0; n < tokens.size(); ++n)
            if (tokens[n] >= rows_.first && tokens[n] < rows_.last) order.push_back(n);
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return tokens[a] < tokens[b]; });
        const auto dwte = wte(grads);
        std::vector<scalar> sum(w);
        for (std::size_t i = 0; i < order.size();) {
            const std::int32_t token = tokens[order[i]];
            std::copy_n(dy.begin() + std::ptrdiff_t(order[i] * w), w, sum.begin());
            for (++i; i < order.size() && tokens[order[i]] == token; ++i)
                for (std::size_t c = 0; c < w; ++c) sum[c] += dy[order[i] * w + c];
            scalar* row = dwte.data() + std::size_t(token - rows_.first) * w;
            for (std::size_t c = 0; c < w; ++c) row[c] += sum[c];
        }
        const std::size_t block = std::size_t(seq_len_) * w;
        std::vector<scalar> dpos(dy.begin(), dy.begin() + std::ptrdiff_t(block));
        for (std::size_t first = block; first < dy.size(); first += block)
            for (std::size_t i = 0; i < block; ++i) dpos[i] += dy[first + i];
        const auto dwpe = wpe(grads);
        for (std::size_t i = 0; i < block; ++i) dwpe[i] += dpos[i];
    }

    int vocab_ = 0;  // global
    int width_ = 0;
    int seq_len_ = 0;
    index_range rows_;  // this rank's wte rows
    std::size_t wte_offset_ = 0;
    std::size_t wpe_offset_ = 0;
    tp_group<scalar> tp_;  // only set when split
};

}  // namespace weft::nn
