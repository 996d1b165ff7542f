// The whole training state of an engine, tensor by tensor, as every rank sees it: what the
// switch and recovery tests compare before and after a move (bit for bit).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "weft/train/checkpoint.hpp"

namespace weft_test {

// Every tensor's values by name, each optimizer state tensor as "<name>.<state>", and the
// optimizer's step count as "<name>.steps".
using whole_state = std::map<std::string, std::vector<float>>;

// Collective over `world` (ranks as threads sharing `shared` and `lock`): the engine's whole
// state, merged from every rank that holds a part (spares hold none).
template <class Engine, class Comm>
whole_state gather_whole_state(Engine& engine, Comm& world, whole_state& shared, std::mutex& lock) {
    if (!engine.is_spare()) {
        const auto full = weft::train::gather_full_stages(engine);
        const std::lock_guard guard(lock);
        for (const auto& f : full)
            for (const auto& info : f.registry.entries()) {
                auto part = [&](std::span<const float> v) {
                    if (v.empty()) return std::vector<float>{};
                    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                              v.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
                };
                shared[info.name] = part(f.parameters);
                for (const auto& t : f.optimizer.tensors) shared[info.name + "." + t.name] = part(t.values);
                shared[info.name + ".steps"] = {static_cast<float>(f.optimizer.steps)};
            }
    }
    world.barrier();
    whole_state out;
    {
        const std::lock_guard guard(lock);
        out = shared;
    }
    world.barrier();
    if (world.rank() == 0) shared.clear();
    world.barrier();
    return out;
}

}  // namespace weft_test
