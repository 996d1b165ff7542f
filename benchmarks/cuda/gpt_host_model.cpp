#include "gpt_host_model.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "weft/exec/cpu.hpp"
#include "weft/nn/gpt_init.hpp"
#include "weft/nn/gpt_stage.hpp"

namespace weft_bench {

gpt_host_model make_gpt_host_model(const weft::nn::gpt_config& config) {
    using backend = weft::exec::cpu;
    config.validate();
    gpt_host_model model;
    model.registry = weft::nn::gpt_stage<backend>::layout(config, {0, config.num_units()});

    model.parameters.assign(model.registry.total_size(), 0.0f);
    std::uint64_t state = (config.seed * 0x9E3779B97F4A7C15ull) | 1;  // xorshift needs a non-zero state
    for (const weft::nn::parameter_info& info : model.registry.entries()) {
        const double std_dev = weft::nn::gpt_init_std(info.name, config.num_layers);
        float* values = model.parameters.data() + info.offset;
        if (std_dev == 0.0) {
            const float constant = float(weft::nn::gpt_initial_constant(info.name));
            for (std::size_t i = 0; i < info.size; ++i) values[i] = constant;
            continue;
        }
        // Uniform on [-a, a] has standard deviation a / sqrt(3).
        const double a = std_dev * std::sqrt(3.0);
        for (std::size_t i = 0; i < info.size; ++i) {
            state ^= state << 13;  // xorshift64
            state ^= state >> 7;
            state ^= state << 17;
            const double u = double(state >> 11) * 0x1.0p-53;  // [0, 1)
            values[i] = float((2.0 * u - 1.0) * a);
        }
    }
    return model;
}

}  // namespace weft_bench
