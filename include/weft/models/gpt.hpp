// GPT-2 as a pipeline model: llm.c-style token batches (B rows of T tokens, targets
// shifted by one), token ids entering the first stage, mean cross-entropy over every
// token of the micro-batch, and the token embedding tied to the LM head.
#pragma once

#include <charconv>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/gpt_config.hpp"
#include "weft/nn/gpt_stage.hpp"
#include "weft/nn/vocab_parallel_cross_entropy.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/data/token_batches.hpp"

namespace weft::models {

struct gpt {
    using config = nn::gpt_config;
    using batch = data::token_batch;
    template <class Backend>
    using stage = nn::gpt_stage<Backend>;

    static int num_units(const config& c) { return c.num_units(); }
    // Forward flops per token of each unit, what the default partition balances (backward
    // costs about twice forward in every unit, so the ratios hold for a whole step): the
    // embedding a lookup and an add, a block its four GEMMs (24 C^2) and attention over the
    // sequence (4 T C), the head its LM GEMM (2 C V). For GPT-2 124M the head costs about
    // five blocks, for a small vocabulary a fraction of one.
    static std::vector<double> unit_costs(const config& c) {
        const double width = c.d_model, tokens = c.seq_len, vocab = c.vocab_size;
        std::vector<double> costs(static_cast<std::size_t>(c.num_units()), 24 * width * width + 4 * tokens * width);
        costs.front() = 2 * width;
        costs.back() = 2 * width * vocab + 8 * width;
        return costs;
    }
    static void validate(const config& c) { c.validate(); }
    // What a checkpoint records of the model, to refuse loading into another one: some
    // differences (the number of heads) change no tensor's shape.
    static std::string describe(const config& c) {
        return "gpt layers=" + std::to_string(c.num_layers) + " d_model=" + std::to_string(c.d_model) +
               " heads=" + std::to_string(c.num_heads) + " vocab=" + std::to_string(c.vocab_size) +
               " seq_len=" + std::to_string(c.seq_len);
    }
    // The inverse of describe(): the sizes of the model a checkpoint holds (sample_gpt reads
    // them so that a user need not repeat them). The seed is not recorded: it is 0.
    static config parse_description(const std::string& text) {
        const auto fail = [&](const std::string& why) -> config {
            throw invalid_argument("model description", text,
                                   "must read \"gpt layers=L d_model=C heads=H vocab=V seq_len=T\" (" + why + ")");
        };
        if (!text.starts_with("gpt ")) return fail("it is not a GPT");
        config c{.num_layers = 0, .d_model = 0, .num_heads = 0, .vocab_size = 0, .seq_len = 0, .seed = 0};
        const std::pair<const char*, int*> fields[] = {{"layers=", &c.num_layers}, {"d_model=", &c.d_model},
                                                       {"heads=", &c.num_heads},   {"vocab=", &c.vocab_size},
                                                       {"seq_len=", &c.seq_len}};
        for (const auto& [key, value] : fields) {
            const auto at = text.find(std::string(" ") + key);
            if (at == std::string::npos) return fail(std::string("no ") + key);
            const char* first = text.data() + at + 1 + std::strlen(key);
            const auto [end, error] = std::from_chars(first, text.data() + text.size(), *value);
            if (error != std::errc() || end == first) return fail(std::string("a bad ") + key);
        }
        c.validate();
        return c;
    }
    static int batch_rows(const batch& b) { return b.rows; }
    // Stages exchange one row of d_model values per token.
    static int activation_rows(const config& c, int rows) { return rows * c.seq_len; }
    // wte is the embedding (unit 0) and the LM head (the last unit).
    static std::vector<tied_parameter> tied_parameters(const config& c) {
        return {{"wte.weight", {0, c.num_units() - 1}}};
    }

    // Token ids stay where the batch is; the first stage reads them (GPT has no input matrix).
    template <class Backend>
    static nn::token_view first_input(Backend& /*backend*/, const batch& b, int first, int count) {
        return {rows_of(b.inputs, b, first, count), count, b.seq_len};
    }

    // Under tensor parallelism the last stage's logits are its tp rank's vocabulary
    // columns: the loss is then computed across the tp group (the same on every tp rank)
    // and dlogits are this rank's columns. Every tp rank of the stage must call it.
    template <class Backend>
    static nn::cross_entropy_result<Backend> loss(const stage<Backend>& last_stage,
                                                  const typename Backend::matrix& logits, const batch& b, int first,
                                                  int count, typename Backend::scalar scale) {
        const auto targets = rows_of(b.targets, b, first, count);
        if (last_stage.tp().size > 1)
            return nn::vocab_parallel_cross_entropy(last_stage.backend(), logits, targets, last_stage.vocab_rows(),
                                                    last_stage.config().vocab_size, last_stage.tp(), scale);
        return nn::cross_entropy(last_stage.backend(), logits, targets, scale);
    }

private:
    static std::span<const std::int32_t> rows_of(const std::vector<std::int32_t>& tokens, const batch& b, int first,
                                                 int count) {
        require(first >= 0 && count >= 1 && first + count <= b.rows, "batch rows",
                "[" + std::to_string(first) + ", " + std::to_string(first + count) + ")",
                "must lie within the batch's " + std::to_string(b.rows) + " rows");
        return std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(first) * b.seq_len,
                                                             static_cast<std::size_t>(count) * b.seq_len);
    }
};

}  // namespace weft::models
