// The MLP of the foundation as a pipeline model: classification batches from
// synthetic_dataset, inputs entering the first stage as a matrix, mean softmax
// cross-entropy over the micro-batch's samples. No tied weights.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

#include "weft/core/memory_space.hpp"
#include "weft/nn/cross_entropy.hpp"
#include "weft/nn/mlp_config.hpp"
#include "weft/nn/mlp_stage.hpp"
#include "weft/models/pipeline_model.hpp"
#include "weft/data/synthetic_dataset.hpp"

namespace weft::models {

struct mlp {
    using config = nn::mlp_config;
    using batch = data::classification_batch;
    template <class Backend>
    using stage = nn::mlp_stage<Backend>;

    static int num_units(const config& c) { return c.num_units(); }
    static void validate(const config& c) { c.validate(); }
    static int batch_rows(const batch& b) { return b.rows; }
    static int activation_rows(const config&, int rows) { return rows; }
    static std::vector<tied_parameter> tied_parameters(const config&) { return {}; }

    // Rows [first, first + count) of the inputs as a backend matrix, filled through data():
    // row-major host memory, as the CPU backend's.
    template <class Backend>
    static typename Backend::matrix first_input(Backend& /*backend*/, const batch& b, int first, int count) {
        using scalar = typename Backend::scalar;
        static_assert(std::is_same_v<typename Backend::memory_space, host_space>,
                      "weft::models::mlp fills its input matrix in host memory");
        typename Backend::matrix x(count, b.input_dim);
        scalar* out = x.data();
        const auto width = static_cast<std::size_t>(b.input_dim);
        for (std::size_t i = 0; i < static_cast<std::size_t>(count) * width; ++i)
            out[i] = static_cast<scalar>(b.inputs[static_cast<std::size_t>(first) * width + i]);
        return x;
    }

    template <class Backend>
    static nn::cross_entropy_result<Backend> loss(const stage<Backend>& last_stage,
                                                  const typename Backend::matrix& logits, const batch& b, int first,
                                                  int count, typename Backend::scalar scale) {
        const auto labels = std::span<const int>(b.labels).subspan(static_cast<std::size_t>(first),
                                                                   static_cast<std::size_t>(count));
        return nn::cross_entropy(last_stage.backend(), logits, labels, scale);
    }
};

}  // namespace weft::models
