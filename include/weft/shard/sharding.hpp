// The weft::sharding concept: how a stage's training state is spread over the data-parallel
// group. A policy is a tag (a name and a ZeRO stage: `replicate` 0, `zero<1..3>`, `any_zero`
// -1 for the parallel_config's stage) that selects its code by specializing
// shard::stage_sharding<Policy, Scalar, Comm>: the communication and the form of the stage's
// tensors that the program's REDUCE_GRAD, UNSHARD and RESHARD actions and the optimizer
// step go through. The primary template is only declared: a tag without a specialization
// has no code, and require_sharding says so.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

#include <vector>

#include "weft/nn/final_gradients.hpp"
#include "weft/shard/collective_traffic.hpp"
#include "weft/shard/flat_shard.hpp"
#include "weft/shard/stage_tensors.hpp"
#include "weft/shard/zero_reduce.hpp"

namespace weft::shard {

// Default replicate bucket: 4 Mi elements (16 MiB of fp32), in the range PyTorch DDP's
// 25 MB buckets and Megatron's 40 M-element buckets put it: big enough that each
// all-reduce runs near bandwidth, small enough that several overlap the compute after them.
inline constexpr std::size_t default_bucket_elements = std::size_t{1} << 22;

struct sharding_options {
    // The ZeRO stage of the run (parallel_config::zero_stage): any_zero takes it, the typed
    // policies check it is theirs.
    int zero_stage = 0;
    // Elements per data-parallel all-reduce bucket (replicate).
    std::size_t bucket_elements = default_bucket_elements;
    // ZeRO-2/3: reduce once per step or per micro-batch (shard/zero_reduce.hpp).
    zero_reduce reduce = zero_reduce::step;
    // Ranges of the stage's gradients reduced only after the program (tied copies, summed
    // over the pipeline first): the per-micro-batch mode keeps them whole all step.
    std::vector<nn::gradient_range> reduced_after_program{};
};

// How finish_reduce averages the group's summed gradients (values *= 1 / group size). The
// default, host_averaging, completes the reduction for the host and multiplies there. The
// engine passes instead its compute backend's scale kernel, scale(values, factor), when the
// backend has one (exec::optimizer_kernels): then the reduction's wait() only orders the
// backend's stream after it (comm::nccl's wait), the kernel multiplies where the gradients
// live, and the host waits for neither.
struct host_averaging {};

// One stage's sharding under `Policy`, over the ranks of a data-parallel group. Every
// specialization takes (stage_tensors<Scalar>&, Comm& data_group, const sharding_options&),
// brings the tensors into its between-steps form, and provides the operations that
// sharding_for checks.
template <class Policy, class Scalar, class Comm>
class stage_sharding;

// A tag: a name for messages and the ZeRO stage it stands for (-1: the config's).
template <class S>
concept sharding = requires {
    { S::name } -> std::convertible_to<std::string_view>;
    { S::zero_stage } -> std::convertible_to<int>;
};

namespace detail {
// A specialization exists (the primary template is only declared, so it is incomplete).
template <class T>
concept complete_type = requires { sizeof(T); };
}  // namespace detail

// The tag has code for this scalar and communicator: a stage_sharding specialization with
// the operations the engine calls.
template <class S, class Scalar, class Comm>
concept sharding_implemented =
    detail::complete_type<stage_sharding<S, Scalar, Comm>> &&
    std::constructible_from<stage_sharding<S, Scalar, Comm>, stage_tensors<Scalar>&, Comm&, const sharding_options&> &&
    requires(stage_sharding<S, Scalar, Comm>& s, const stage_sharding<S, Scalar, Comm>& cs) {
        s.begin_step();
        s.start_unshard();
        s.finish_unshard();
        s.reshard();
        s.start_reduce();
        s.finish_reduce();
        { cs.zero_stage() } -> std::convertible_to<int>;
        { cs.shard() } -> std::same_as<const flat_shard&>;
        { cs.held_now() } -> std::same_as<memory_figures>;
        { cs.peak() } -> std::same_as<const memory_figures&>;
        { cs.traffic() } -> std::same_as<const collective_traffic&>;
        { cs.owned_gradients() } -> std::same_as<std::span<const Scalar>>;
    };

template <class S, class Scalar, class Comm>
concept sharding_for = sharding<S> && sharding_implemented<S, Scalar, Comm>;

namespace detail {
// The first part S lacks, as a failed static_assert; true otherwise.
template <class S, class Scalar, class Comm>
constexpr bool diagnose_sharding() {
    if constexpr (!sharding<S>)
        static_assert(sharding<S>,
                      "weft: this type does not model weft::sharding: it needs a static `name` and `zero_stage` "
                      "(weft::shard::sharding); see weft/shard/sharding.hpp");
    else if constexpr (!sharding_implemented<S, Scalar, Comm>)
        static_assert(sharding_implemented<S, Scalar, Comm>,
                      "weft: this sharding policy has no code: specialize weft::shard::stage_sharding<Policy, Scalar, "
                      "Comm> with its operations (weft::shard::sharding_implemented); see weft/shard/replicate.hpp");
    return true;
}
}  // namespace detail

// Instantiate where a policy is taken (the engine does): a type that is not a sharding
// policy stops the build with one message naming what it lacks.
template <class S, class Scalar, class Comm>
struct require_sharding {
    static_assert(detail::diagnose_sharding<S, Scalar, Comm>());
};

}  // namespace weft::shard

namespace weft {
using shard::sharding;
}  // namespace weft
