// The CUDA compute backend: the same member kernels as exec::cpu (weft/exec/cpu.hpp), on one
// GPU, over device matrices (weft/exec/cuda/device_matrix.hpp), so nn/ layers, the models and
// the engine run on it unchanged. The object holds what the kernels need: its device, a
// compute stream, the cuBLASLt handle and workspace.
//
// Numerics: activations and their gradients (the matrices) are bf16; weights, gradients and
// the statistics backward reads (layer norm's mean and rstd, attention's log-sum-exp) are
// fp32. Every kernel computes in fp32; the GEMMs read bf16 on tensor cores and accumulate in
// fp32, weights rounded to bf16 as each GEMM reads them, so the fp32 master weights in the
// stage's flat buffer are what the optimizer updates, and weight gradients accumulate in
// fp32. Results match exec::cpu within bf16 rounding, not bit for bit. Reductions run in a
// fixed order (no atomics), so a run repeats bit for bit on the same GPU.
//
// Weight and gradient spans must point at device-accessible memory (device or managed): the
// engine makes its training state in state_memory(), CUDA managed memory; a host pointer is
// refused with a message rather than read by a kernel. Token ids and labels
// are host spans, as on the CPU: they are checked there and copied up through pinned
// buffers (weft/exec/cuda/pinned_uploads.hpp), so the copy queues behind the kernels and the
// caller may reuse its span as soon as the call returns.
//
// Work is queued on the backend's stream and returns without waiting, except cross_entropy,
// whose loss the caller reads on the host (cross_entropy_deferred hands it out to be read
// later). synchronize() waits for everything queued, within the wait limit where one is set
// (set_wait_limit; the engine sets its communicator's timeout).
//
// Host code: the kernels it launches are compiled once per program by nvcc
// (weft/exec/cuda/backend_kernels.cu; link weft::cuda_backend).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/core/deferred_value.hpp"
#include "weft/core/error.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/exec/action_key.hpp"
#include "weft/exec/compute_backend.hpp"
#include "weft/exec/compute_timing.hpp"
#include "weft/exec/cuda/action_graphs.hpp"
#include "weft/exec/cuda/action_recording.hpp"
#include "weft/exec/cuda/backend_kernels.hpp"
#include "weft/exec/cuda/column_sums_layout.hpp"
#include "weft/exec/cuda/device_matrix.hpp"
#include "weft/exec/cuda/gemm.hpp"
#include "weft/exec/cuda/interval_clock.hpp"
#include "weft/exec/cuda/managed_state_memory.hpp"
#include "weft/exec/cuda/memory_high_water.hpp"
#include "weft/exec/cuda/operation_profile.hpp"
#include "weft/exec/cuda/pinned_uploads.hpp"
#include "weft/exec/cuda/stream_memory.hpp"
#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/exec/operation_times.hpp"
#include "weft/exec/token_groups.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"
#include "weft/optim/adamw_update.hpp"
#include "weft/optim/gradient_scale.hpp"
#include "weft/optim/gradient_summary.hpp"
#include "weft/optim/sgd_update.hpp"

namespace weft::exec {

class cuda_backend {
public:
    static constexpr std::string_view name = "cuda";
    using scalar = float;
    using memory_space = device_space;
    using matrix = weft::exec::cuda_detail::device_matrix;  // bf16
    using bf16 = __nv_bfloat16;

    // Makes `device` this thread's current device and creates the stream and cuBLASLt handle
    // on it. No GPU, or a device out of range, is a weft::error naming `device`.
    explicit cuda_backend(int device = 0) : device_(select(device)) {
        weft::exec::cuda_detail::set_allocation_stream(stream_.get());
    }

    [[nodiscard]] int device() const { return device_; }
    [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }
    // The training state lives in CUDA managed memory (weft/exec/cuda/managed_state_memory.hpp).
    [[nodiscard]] const weft::state_memory& state_memory() const { return weft::exec::cuda_detail::managed_state_memory(); }
    // Waits for everything queued on the stream (and reports an error a kernel hit); past the
    // wait limit, a comm::timeout_error.
    void synchronize() const {
        weft::exec::cuda_detail::synchronize(stream_.get(), wait_limit_,
                                "a wait for GPU " + std::to_string(device_) + "'s compute stream");
    }

    // How long a host wait for the queued work (synchronize(), the copies to and from the host
    // and the kernels that return host values, reading a deferred loss, an upload waiting for
    // its pinned buffer) may take before it aborts the GPU's registered communicators and
    // throws comm::timeout_error naming `rank` (weft/exec/cuda/wait_limit.hpp): work stopped
    // behind communication that never finishes then ends the run instead of holding it. The
    // engine sets it to its communicator's timeout. Unset: no limit. `limit` must be > 0;
    // comm::no_timeout (or 100 years and more) removes it.
    template <class Rep, class Period>
    void set_wait_limit(std::chrono::duration<Rep, Period> limit, int rank) {
        wait_limit_ = {.limit = comm::checked_timeout(limit, "wait limit"), .rank = rank, .device = device_};
        uploads_.platform().limit = wait_limit_;
        weft::exec::cuda_detail::set_thread_wait_limit(wait_limit_);
    }
    [[nodiscard]] weft::exec::cuda_detail::wait_limit wait_limit() const { return wait_limit_; }

    // CUDA graphs per action (weft/exec/cuda/action_graphs.hpp): each F, B, I and W a stage
    // runner asks for (exec::run_action) runs eagerly once, is captured into a graph at its
    // second call and replayed by one launch after. Off by default. What runs inside an action
    // must queue on this backend's stream only and never wait for it, and read buffers that
    // keep their addresses: true of the engine's actions at tensor-parallel degree 1 and ZeRO
    // stages 0 and 1 (train_gpt --cuda-graphs refuses the rest). Turning it off drops the
    // graphs.
    void enable_action_graphs(bool on = true) {
        require(!on || !weft::exec::cuda_detail::operation_profile::process().enabled(), "enable_action_graphs: operation profile",
                "on", "must be off (a graph replays its kernels without the launches the profile times)");
        graphs_ = on ? std::make_unique<weft::exec::cuda_detail::action_graphs>(stream()) : nullptr;
    }
    [[nodiscard]] bool action_graphs_enabled() const { return graphs_ != nullptr; }
    // The GPU time of every kernel and GEMM queued from now on, by operation
    // (weft/exec/cuda/operation_profile.hpp): the process's profile, so rank threads sharing
    // a process are all in it. Eager runs only: a graph's replay queues nothing to time.
    void enable_operation_profile(bool on = true) {
        require(!on || graphs_ == nullptr, "enable_operation_profile: action graphs", "on",
                "must be off (a graph replays its kernels without the launches the profile times)");
        weft::exec::cuda_detail::operation_profile::process().enable(on);
    }
    // What the profile timed since the last take, once the GPU has run it; starts over.
    [[nodiscard]] std::vector<operation_time> take_operation_times() {
        return weft::exec::cuda_detail::operation_profile::process().take(wait_limit_);
    }
    // Graph launches so far (0 with graphs off): a run's log says the graphs ran.
    [[nodiscard]] std::size_t action_graph_launches() const { return graphs_ ? graphs_->launches() : 0; }
    // The most memory this GPU's eager work and its action graphs have held at once, each in
    // its own pool (weft/exec/cuda/memory_high_water.hpp): device-wide, so rank threads
    // sharing the GPU count together.
    [[nodiscard]] weft::exec::cuda_detail::memory_high_water memory_high_water() const {
        return weft::exec::cuda_detail::memory_high_water_of(device_);
    }

    // exec::device_timed (weft/exec/compute_timing.hpp): the program loop marks each F, B, I
    // and W on the stream, and reads their time on the GPU once the program is queued; host
    // time around them would be launch time.
    void begin_compute_interval() { compute_clock_.begin(); }
    void end_compute_interval() { compute_clock_.end(); }
    [[nodiscard]] double take_compute_seconds() { return compute_clock_.take_seconds(wait_limit_); }
    void discard_compute_intervals() { compute_clock_.discard(); }

    // exec::run_action's hooks (weft/exec/action_key.hpp).
    template <class Action>
    auto run_action(const action_key& key, Action&& action) {
        if (!graphs_) return std::forward<Action>(action)();
        return graphs_->run(key, std::forward<Action>(action), wait_limit_);
    }
    template <class Input, class Action>
    auto run_action(const action_key& key, Input&& input, Action&& action) {
        if (!graphs_) return std::forward<Action>(action)(std::forward<Input>(input));
        return graphs_->run(key, std::as_const(input), std::forward<Action>(action), wait_limit_);
    }
    void forget_actions(int stage) {
        if (graphs_) graphs_->forget(stage, wait_limit_);
    }
    void forget_all_actions() {
        if (graphs_) graphs_->forget(std::nullopt, wait_limit_);
    }

    // The attention kernels causal_attention_forward and _backward run (train_gpt
    // --attention-kernel): wmma by default; mma keeps the scores in registers and has not run
    // on a GPU yet (docs/cuda-status.md). A change drops the action graphs captured with the old ones,
    // so it is refused inside an action, whose graph may be the one being recorded.
    void set_attention_kernel(weft::exec::cuda_detail::attention_kernel kernel) {
        require(weft::exec::cuda_detail::current_recording() == nullptr, "set_attention_kernel", "inside an action",
                "is only valid between actions (it drops the captured graphs)");
        if (kernel != attention_kernel_) forget_all_actions();
        attention_kernel_ = kernel;
    }
    [[nodiscard]] weft::exec::cuda_detail::attention_kernel attention_kernel() const { return attention_kernel_; }

    // Copies between a matrix and fp32 host memory of its size: what host code (tests, model
    // inputs) reads and writes matrices with. The matrix's bf16 values widen exactly on the
    // way down and round to nearest even on the way up. Both wait for the copy, so `host` may
    // be read or reused when they return.
    void copy_to_host(const matrix& m, std::span<float> host) {
        require_size(host.size(), m.size(), "copy_to_host: host.size()");
        if (m.size() == 0) return;
        scratch<float> wide(m.size(), stream());
        weft::exec::cuda_detail::launch::to_float(m.data(), wide.data(), m.size(), stream());
        synchronize();  // a copy into pageable memory would wait for the stream, without a limit
        weft::gpu::check(cudaMemcpyAsync(host.data(), wide.data(), m.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                          stream()),
                          "cudaMemcpyAsync (matrix to host)");
        synchronize();
    }
    void copy_from_host(std::span<const float> host, matrix& m) {
        require_size(host.size(), m.size(), "copy_from_host: host.size()");
        if (m.size() == 0) return;
        scratch<float> wide(m.size(), stream());
        synchronize();  // a copy from pageable memory may wait for the stream, without a limit
        weft::gpu::check(cudaMemcpyAsync(wide.data(), host.data(), m.size() * sizeof(float), cudaMemcpyHostToDevice,
                                          stream()),
                          "cudaMemcpyAsync (matrix to the device)");
        weft::exec::cuda_detail::launch::to_bf16(wide.data(), m.data(), m.size(), stream());
        // From pageable memory the copy may still be reading `host` when the call returns.
        synchronize();
    }

    // Tensor parallelism's sum (exec::matrix_reduction_kernels): m widened to fp32 in device
    // memory, summed there by `reduce` (a device communicator's all-reduce; comm::nccl's wait
    // orders this stream after it), the bias added in fp32 and the result rounded back into
    // m: a host copy's arithmetic, without the copies or a wait of the host. `reduce` is
    // called even for an empty m, since it is collective over the group.
    template <class Reduce>
    void reduce_matrix(matrix& m, std::span<const float> bias, Reduce&& reduce) {
        if (!bias.empty()) {
            require_size(bias.size(), std::size_t(m.cols()), "reduce_matrix: bias size");
            require_device(bias, "reduce_matrix: bias");
        }
        scratch<float> wide(m.size(), stream());
        weft::exec::cuda_detail::launch::to_float(m.data(), wide.data(), m.size(), stream());
        std::forward<Reduce>(reduce)(std::span<float>(wide.data(), wide.size()));
        if (bias.empty())
            weft::exec::cuda_detail::launch::to_bf16(wide.data(), m.data(), m.size(), stream());
        else
            weft::exec::cuda_detail::launch::to_bf16_adding_periodic(wide.data(), bias.data(), bias.size(), m.data(), m.size(),
                                                        stream());
    }

    [[nodiscard]] int rows(const matrix& x) const { return x.rows(); }
    [[nodiscard]] int cols(const matrix& x) const { return x.cols(); }

    [[nodiscard]] matrix add(const matrix& a, const matrix& b) {
        require_shape(b, a.rows(), a.cols(), "add: b");
        matrix y(a.rows(), a.cols());
        weft::exec::cuda_detail::launch::add(a.data(), b.data(), y.data(), y.size(), stream());
        return y;
    }

    // y = x W + b, W stored [in, out].
    [[nodiscard]] matrix linear_forward(const matrix& x, std::span<const float> w, std::span<const float> b, int in,
                                        int out) {
        require_shape(x, x.rows(), in, "linear_forward: x");
        require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_forward: weight size");
        if (!b.empty()) require_size(b.size(), std::size_t(out), "linear_forward: bias size");  // empty: no bias
        require_device(w, "linear_forward: weight");
        require_device(b, "linear_forward: bias");
        matrix y(x.rows(), out);
        if (y.size() == 0) return y;
        // cuBLASLt's bias epilogue reads the bias in the output's type; a null bias: no epilogue.
        const auto wb = bf16_copy(w.data(), w.size());
        const auto bb = bf16_copy(b.data(), b.size());
        gemm_.linear_forward<bf16>(x.data(), wb.data(), b.empty() ? nullptr : bb.data(), y.data(), x.rows(), in, out,
                                   stream());
        return y;
    }

    // act = gelu(x W + b), keeping pre_act = x W + b (exec::fused_kernels): one GEMM with
    // cuBLASLt's bias+GELU epilogue where out is a multiple of 8 (its layout's need) and
    // cuBLASLt has an algorithm for it, the two kernels otherwise.
    [[nodiscard]] matrix linear_gelu_forward(const matrix& x, std::span<const float> w, std::span<const float> b,
                                             int in, int out, matrix& pre_act) {
        // cuBLASLt's GELU epilogue needs out a multiple of 8 and comes with a bias; no bias
        // (an empty one) is linear_forward's "none".
        if (out % 8 != 0 || x.rows() == 0 || b.empty()) {
            pre_act = linear_forward(x, w, b, in, out);
            return gelu_forward(pre_act);
        }
        require_shape(x, x.rows(), in, "linear_gelu_forward: x");
        require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_gelu_forward: weight size");
        require_size(b.size(), std::size_t(out), "linear_gelu_forward: bias size");
        require_device(w, "linear_gelu_forward: weight");
        require_device(b, "linear_gelu_forward: bias");
        pre_act = matrix(x.rows(), out);
        matrix act(x.rows(), out);
        const auto wb = bf16_copy(w.data(), w.size());
        const auto bb = bf16_copy(b.data(), b.size());
        if (gemm_.linear_gelu_forward(x.data(), wb.data(), bb.data(), act.data(), pre_act.data(), x.rows(), in, out,
                                      stream()))
            return act;
        // cuBLASLt has no bias+GELU algorithm for this shape: the plain GEMM on the bf16
        // weights already made, then GELU.
        gemm_.linear_forward<bf16>(x.data(), wb.data(), bb.data(), pre_act.data(), x.rows(), in, out, stream());
        return gelu_forward(pre_act);
    }

    // gelu_backward(pre_act, dY W^T) (exec::fused_kernels): one GEMM with cuBLASLt's
    // GELU-gradient epilogue where in is a multiple of 8 and cuBLASLt has an algorithm for
    // it, the two kernels otherwise.
    [[nodiscard]] matrix linear_backward_input_gelu(const matrix& dy, std::span<const float> w, int in, int out,
                                                    const matrix& pre_act) {
        if (in % 8 == 0 && dy.rows() > 0) {
            require_shape(dy, dy.rows(), out, "linear_backward_input_gelu: dy");
            require_shape(pre_act, dy.rows(), in, "linear_backward_input_gelu: pre_act");
            require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_backward_input_gelu: weight size");
            require_device(w, "linear_backward_input_gelu: weight");
            matrix d_pre_act(dy.rows(), in);
            const auto wb = bf16_copy(w.data(), w.size());
            if (gemm_.linear_backward_input_gelu(dy.data(), wb.data(), pre_act.data(), d_pre_act.data(), dy.rows(),
                                                 in, out, stream()))
                return d_pre_act;
            // No GELU-gradient algorithm for this shape: dY W^T as a plain GEMM on the bf16
            // weights already made, then GELU's backward.
            matrix& d_act = d_pre_act;
            gemm_.linear_backward_input<bf16>(dy.data(), wb.data(), d_act.data(), dy.rows(), in, out, stream());
            return gelu_backward(pre_act, d_act);
        }
        return gelu_backward(pre_act, linear_backward_input(dy, w, in, out));
    }

    // dX = dY W^T
    [[nodiscard]] matrix linear_backward_input(const matrix& dy, std::span<const float> w, int in, int out) {
        require_shape(dy, dy.rows(), out, "linear_backward_input: dy");
        require_size(w.size(), std::size_t(in) * std::size_t(out), "linear_backward_input: weight size");
        require_device(w, "linear_backward_input: weight");
        matrix dx(dy.rows(), in);
        if (dx.size() == 0) return dx;
        const auto wb = bf16_copy(w.data(), w.size());
        gemm_.linear_backward_input<bf16>(dy.data(), wb.data(), dx.data(), dy.rows(), in, out, stream());
        return dx;
    }

    // dW += X^T dY, db += column sums of dY
    void linear_backward_weight(const matrix& x, const matrix& dy, std::span<float> dw, std::span<float> db) {
        require_shape(dy, x.rows(), dy.cols(), "linear_backward_weight: dy");
        const int in = x.cols(), out = dy.cols();
        require_size(dw.size(), std::size_t(in) * std::size_t(out), "linear_backward_weight: weight size");
        require_size(db.size(), std::size_t(out), "linear_backward_weight: bias size");
        require_device(dw, "linear_backward_weight: weight gradient");
        require_device(db, "linear_backward_weight: bias gradient");
        if (x.rows() == 0 || in == 0 || out == 0) return;
        gemm_.linear_backward_weight(x.data(), dy.data(), dw.data(), x.rows(), in, out, stream());
        scratch<float> partials(weft::exec::cuda_detail::column_sum_scratch_floats(x.rows(), out, 1), stream());
        weft::exec::cuda_detail::launch::bias_grad(dy.data(), db.data(), partials.data(), x.rows(), out, stream());
    }

    [[nodiscard]] matrix gelu_forward(const matrix& x) {
        matrix y(x.rows(), x.cols());
        weft::exec::cuda_detail::launch::gelu_forward(x.data(), y.data(), y.size(), stream());
        return y;
    }
    [[nodiscard]] matrix gelu_backward(const matrix& x, const matrix& dy) {
        require_shape(dy, x.rows(), x.cols(), "gelu_backward: dy");
        matrix dx(x.rows(), x.cols());
        weft::exec::cuda_detail::launch::gelu_backward(x.data(), dy.data(), dx.data(), dx.size(), stream());
        return dx;
    }

    // Per-row layer norm; mean and rstd are saved for both backward halves, in fp32: each is a
    // rows x 2 matrix whose bf16 pairs hold one float per row (see fp32_matrix), a layout
    // only this backend reads.
    [[nodiscard]] matrix layer_norm_forward(const matrix& x, std::span<const float> gamma, std::span<const float> beta,
                                            float eps, matrix& mean, matrix& rstd) {
        const int n = x.cols();
        require_size(gamma.size(), std::size_t(n), "layer_norm_forward: weight size");
        require_size(beta.size(), std::size_t(n), "layer_norm_forward: bias size");
        require(n > 0, "layer_norm_forward: x.cols()", n, "must be positive");
        require_device(gamma, "layer_norm_forward: weight");
        require_device(beta, "layer_norm_forward: bias");
        mean = fp32_matrix(x.rows());
        rstd = fp32_matrix(x.rows());
        matrix y(x.rows(), n);
        if (x.rows() == 0) return y;
        weft::exec::cuda_detail::launch::layer_norm_forward(x.data(), gamma.data(), beta.data(), y.data(), floats(mean),
                                               floats(rstd), x.rows(), n, eps, stream());
        return y;
    }

    // sum = a + b, then layer_norm_forward(sum) (exec::fused_kernels): one kernel.
    [[nodiscard]] matrix residual_layer_norm_forward(const matrix& a, const matrix& b, std::span<const float> gamma,
                                                     std::span<const float> beta, float eps, matrix& sum,
                                                     matrix& mean, matrix& rstd) {
        const int n = a.cols();
        require_shape(b, a.rows(), n, "residual_layer_norm_forward: b");
        require_size(gamma.size(), std::size_t(n), "residual_layer_norm_forward: weight size");
        require_size(beta.size(), std::size_t(n), "residual_layer_norm_forward: bias size");
        require(n > 0, "residual_layer_norm_forward: a.cols()", n, "must be positive");
        require_device(gamma, "residual_layer_norm_forward: weight");
        require_device(beta, "residual_layer_norm_forward: bias");
        sum = matrix(a.rows(), n);
        mean = fp32_matrix(a.rows());
        rstd = fp32_matrix(a.rows());
        matrix y(a.rows(), n);
        if (a.rows() == 0) return y;
        weft::exec::cuda_detail::launch::residual_layer_norm_forward(a.data(), b.data(), sum.data(), gamma.data(), beta.data(),
                                                        y.data(), floats(mean), floats(rstd), a.rows(), n, eps,
                                                        stream());
        return y;
    }

    [[nodiscard]] matrix layer_norm_backward_input(const matrix& x, const matrix& mean, const matrix& rstd,
                                                   std::span<const float> gamma, const matrix& dy) {
        const int n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_input: dy");
        require_shape(mean, x.rows(), fp32_pair, "layer_norm_backward_input: mean");
        require_shape(rstd, x.rows(), fp32_pair, "layer_norm_backward_input: rstd");
        require_size(gamma.size(), std::size_t(n), "layer_norm_backward_input: weight size");
        require_device(gamma, "layer_norm_backward_input: weight");
        matrix dx(x.rows(), n);
        if (dx.size() == 0) return dx;
        weft::exec::cuda_detail::launch::layer_norm_backward_input(x.data(), floats(mean), floats(rstd), gamma.data(), dy.data(),
                                                      dx.data(), x.rows(), n, stream());
        return dx;
    }

    void layer_norm_backward_weight(const matrix& x, const matrix& mean, const matrix& rstd, const matrix& dy,
                                    std::span<float> dgamma, std::span<float> dbeta) {
        const int n = x.cols();
        require_shape(dy, x.rows(), n, "layer_norm_backward_weight: dy");
        require_shape(mean, x.rows(), fp32_pair, "layer_norm_backward_weight: mean");
        require_shape(rstd, x.rows(), fp32_pair, "layer_norm_backward_weight: rstd");
        require_size(dgamma.size(), std::size_t(n), "layer_norm_backward_weight: weight size");
        require_size(dbeta.size(), std::size_t(n), "layer_norm_backward_weight: bias size");
        require_device(dgamma, "layer_norm_backward_weight: weight gradient");
        require_device(dbeta, "layer_norm_backward_weight: bias gradient");
        if (x.rows() == 0 || n == 0) return;
        scratch<float> partials(weft::exec::cuda_detail::column_sum_scratch_floats(x.rows(), n, 2), stream());
        weft::exec::cuda_detail::launch::layer_norm_backward_weight(x.data(), floats(mean), floats(rstd), dy.data(), dgamma.data(),
                                                       dbeta.data(), partials.data(), x.rows(), n, stream());
    }

    // Mean softmax cross-entropy over rows; dlogits = scale * d(mean loss)/d(logits). Returns
    // the unscaled mean loss, which it waits for.
    [[nodiscard]] float cross_entropy(const matrix& logits, std::span<const std::int32_t> labels, float scale,
                                      matrix& dlogits) {
        const scratch<float> mean = queue_cross_entropy(logits, labels, scale, dlogits);
        float loss = 0;
        synchronize();  // the copy into pageable memory below would wait without a limit
        weft::gpu::check(cudaMemcpyAsync(&loss, mean.data(), sizeof(float), cudaMemcpyDeviceToHost, stream()),
                          "cudaMemcpyAsync (loss to host)");
        synchronize();
        return loss;
    }
    // The same, without waiting (exec::deferred_loss_kernels): the kernels are queued and the
    // mean stays on the device until the returned value is read, which waits for the stream to
    // reach it (only it, not what was queued after). Read it before the backend goes.
    [[nodiscard]] deferred_value<float> cross_entropy_deferred(const matrix& logits,
                                                               std::span<const std::int32_t> labels, float scale,
                                                               matrix& dlogits) {
        return read_when_asked(queue_cross_entropy(logits, labels, scale, dlogits));
    }

    // ---- GPT kernels ------------------------------------------------------------------

    // Row n = wte[tokens[n]] + wpe[n % seq_len]: tokens are whole sequences, row-major.
    [[nodiscard]] matrix embedding_forward(std::span<const std::int32_t> tokens, std::span<const float> wte,
                                           std::span<const float> wpe, int vocab, int width, int seq_len) {
        const int sequences = checked_sequences(tokens, seq_len, "embedding_forward");
        require_size(wte.size(), std::size_t(vocab) * std::size_t(width), "embedding_forward: wte size");
        require_size(wpe.size(), std::size_t(seq_len) * std::size_t(width), "embedding_forward: wpe size");
        require_tokens(tokens, vocab, "embedding_forward");
        require_device(wte, "embedding_forward: wte");
        require_device(wpe, "embedding_forward: wpe");
        matrix y(static_cast<int>(tokens.size()), width);
        if (y.size() == 0) return y;
        const auto device_tokens = upload(tokens);
        weft::exec::cuda_detail::launch::embedding_forward(device_tokens.data(), wte.data(), wpe.data(), y.data(), sequences,
                                              seq_len, width, vocab, stream());
        return y;
    }

    // dwte[v] += sum of dy rows whose token is v, dwpe[t] += sum of dy rows at position t.
    void embedding_backward_weight(std::span<const std::int32_t> tokens, const matrix& dy, std::span<float> dwte,
                                   std::span<float> dwpe, int vocab, int seq_len) {
        // The vocabulary's own checks; the rest are the row-range kernel's, which this is over
        // every row.
        require_size(dwte.size(), std::size_t(vocab) * std::size_t(dy.cols()), "embedding_backward_weight: wte size");
        require_tokens(tokens, vocab, "embedding_backward_weight");
        vocab_parallel_embedding_backward_weight(tokens, dy, dwte, 0, dwpe, seq_len);
    }

    // The vocabulary-parallel embedding (exec::vocab_parallel_embedding_kernels) over the wte
    // rows [first_row, first_row + wte_rows.size() / width) this rank holds. Forward: their
    // lookup into fp32 device memory (zeros for the other ranks' tokens), summed there by
    // `reduce` (a device communicator's all-reduce, ordered on this stream), then wpe added
    // in fp32 and the result rounded once: embedding_forward's arithmetic without a host
    // copy. Token ids are the caller's to check against the vocabulary (the layer knows it).
    template <class Reduce>
    [[nodiscard]] matrix vocab_parallel_embedding_forward(std::span<const std::int32_t> tokens,
                                                          std::span<const float> wte_rows, int first_row,
                                                          std::span<const float> wpe, int width, int seq_len,
                                                          Reduce&& reduce) {
        const int sequences = checked_sequences(tokens, seq_len, "vocab_parallel_embedding_forward");
        const int held = held_rows(wte_rows.size(), first_row, width, "vocab_parallel_embedding_forward");
        require_size(wpe.size(), std::size_t(seq_len) * std::size_t(width),
                     "vocab_parallel_embedding_forward: wpe size");
        if (held > 0) require_device(wte_rows, "vocab_parallel_embedding_forward: wte");
        require_device(wpe, "vocab_parallel_embedding_forward: wpe");
        matrix y(static_cast<int>(tokens.size()), width);
        scratch<float> wide(y.size(), stream());
        if (y.size() > 0) {
            const auto device_tokens = upload(tokens);
            weft::exec::cuda_detail::launch::vocab_slice_lookup(device_tokens.data(), wte_rows.data(), first_row, held,
                                                   wide.data(), sequences, seq_len, width, stream());
        }
        // Called even with no tokens: the sum is collective over the group.
        std::forward<Reduce>(reduce)(std::span<float>(wide.data(), wide.size()));
        weft::exec::cuda_detail::launch::to_bf16_adding_periodic(wide.data(), wpe.data(), wpe.size(), y.data(), y.size(),
                                                    stream());
        return y;
    }
    // Backward: embedding_backward_weight restricted to the held rows of dwte (dwpe whole).
    void vocab_parallel_embedding_backward_weight(std::span<const std::int32_t> tokens, const matrix& dy,
                                                  std::span<float> dwte_rows, int first_row, std::span<float> dwpe,
                                                  int seq_len) {
        const int width = dy.cols();
        require_shape(dy, static_cast<int>(tokens.size()), width, "embedding_backward_weight: dy");
        const int sequences = checked_sequences(tokens, seq_len, "embedding_backward_weight");
        const int held = held_rows(dwte_rows.size(), first_row, width, "embedding_backward_weight");
        require_size(dwpe.size(), std::size_t(seq_len) * std::size_t(width), "embedding_backward_weight: wpe size");
        if (held > 0) require_device(dwte_rows, "embedding_backward_weight: wte gradient");
        require_device(dwpe, "embedding_backward_weight: wpe gradient");
        if (dy.size() == 0) return;
        // The rows grouped by token on the host (exec/token_groups.hpp): one device block per
        // token that occurs, rather than one per vocabulary row scanning every token.
        std::optional<scratch<std::int32_t>> device_groups;
        if (held > 0) {
            const std::vector<std::int32_t> groups = exec::group_rows_by_token(tokens, first_row, held);
            device_groups.emplace(upload(std::span<const std::int32_t>(groups)));
        }
        weft::exec::cuda_detail::launch::embedding_backward_rows(device_groups ? device_groups->data() : nullptr, dy.data(),
                                                    dwte_rows.data(), first_row, held, dwpe.data(), sequences, seq_len,
                                                    width, stream());
    }

    // y = x W^T with W stored [out, in] (the LM head tied to the [vocab, width] embedding).
    [[nodiscard]] matrix transposed_linear_forward(const matrix& x, std::span<const float> w, int out, int in) {
        require_shape(x, x.rows(), in, "transposed_linear_forward: x");
        require_size(w.size(), std::size_t(out) * std::size_t(in), "transposed_linear_forward: weight size");
        require_device(w, "transposed_linear_forward: weight");
        matrix y(x.rows(), out);
        if (y.size() == 0) return y;
        const auto wb = bf16_copy(w.data(), w.size());
        gemm_.matmul<bf16>(x.data(), weft::exec::cuda_detail::transpose::no, wb.data(), weft::exec::cuda_detail::transpose::yes, y.data(),
                           x.rows(), out, in, 1.0f, 0.0f, nullptr, stream());
        return y;
    }

    // dX = dY W
    [[nodiscard]] matrix transposed_linear_backward_input(const matrix& dy, std::span<const float> w, int out,
                                                          int in) {
        require_shape(dy, dy.rows(), out, "transposed_linear_backward_input: dy");
        require_size(w.size(), std::size_t(out) * std::size_t(in), "transposed_linear_backward_input: weight size");
        require_device(w, "transposed_linear_backward_input: weight");
        matrix dx(dy.rows(), in);
        if (dx.size() == 0) return dx;
        const auto wb = bf16_copy(w.data(), w.size());
        gemm_.matmul<bf16>(dy.data(), weft::exec::cuda_detail::transpose::no, wb.data(), weft::exec::cuda_detail::transpose::no, dx.data(),
                           dy.rows(), in, out, 1.0f, 0.0f, nullptr, stream());
        return dx;
    }

    // dW += dY^T X
    void transposed_linear_backward_weight(const matrix& x, const matrix& dy, std::span<float> dw) {
        require_shape(dy, x.rows(), dy.cols(), "transposed_linear_backward_weight: dy");
        require_size(dw.size(), std::size_t(dy.cols()) * std::size_t(x.cols()),
                     "transposed_linear_backward_weight: weight size");
        require_device(dw, "transposed_linear_backward_weight: weight gradient");
        if (x.rows() == 0 || dw.empty()) return;
        gemm_.matmul<float>(dy.data(), weft::exec::cuda_detail::transpose::yes, x.data(), weft::exec::cuda_detail::transpose::no, dw.data(),
                            dy.cols(), x.cols(), x.rows(), 1.0f, 1.0f, nullptr, stream());
    }

    // Causal multi-head self-attention on qkv = [q | k | v], as exec::cpu's. What backward
    // needs is saved in `saved`: not the probabilities (seq_len^2 per head) but, flash-style,
    // each row's log-sum-exp (fp32) and the output (bf16), from which backward recomputes
    // them; a 1 x n matrix whose layout only this backend reads.
    [[nodiscard]] matrix causal_attention_forward(const matrix& qkv, int seq_len, int heads, matrix& saved) {
        const attention_shape a = attention_dims(qkv, seq_len, heads, "causal_attention_forward");
        matrix y(qkv.rows(), a.width);
        const std::size_t saved_size = fp32_pair * a.lse_size() + y.size();
        require(saved_size <= std::size_t(std::numeric_limits<int>::max()), "causal_attention_forward: qkv.rows()",
                qkv.rows(), "is too many rows for one micro-batch's saved attention state (2^31 elements)");
        saved = matrix(1, static_cast<int>(saved_size));
        if (y.size() == 0) return y;
        float* lse = floats(saved);
        bf16* out = saved.data() + fp32_pair * a.lse_size();
        weft::exec::cuda_detail::launch::attention_forward(qkv.data(), out, lse, a.seqs, a.t, a.heads, a.d, attention_kernel_,
                                              stream());
        if (!weft::exec::cuda_detail::skip_recorded_work("attention output copy", y.data(), out, y.size()))
            weft::gpu::check(cudaMemcpyAsync(y.data(), out, y.size() * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                              stream()),
                              "cudaMemcpyAsync (attention output)");
        return y;
    }

    // Gradient of causal_attention_forward with respect to qkv, from what it saved.
    [[nodiscard]] matrix causal_attention_backward(const matrix& qkv, const matrix& saved, const matrix& dy,
                                                   int seq_len, int heads) {
        const attention_shape a = attention_dims(qkv, seq_len, heads, "causal_attention_backward");
        require_shape(saved, 1, static_cast<int>(fp32_pair * a.lse_size() + std::size_t(qkv.rows()) * a.width),
                      "causal_attention_backward: saved");
        require_shape(dy, qkv.rows(), a.width, "causal_attention_backward: dy");
        matrix dqkv(qkv.rows(), qkv.cols());
        if (dqkv.size() == 0) return dqkv;
        scratch<float> delta(a.lse_size(), stream());
        weft::exec::cuda_detail::launch::attention_backward(qkv.data(), saved.data() + fp32_pair * a.lse_size(), dy.data(),
                                               floats(saved), delta.data(), dqkv.data(), a.seqs, a.t, a.heads, a.d,
                                               attention_kernel_, stream());
        return dqkv;
    }

    // The vocabulary-parallel loss's passes (exec::vocab_parallel_loss_kernels): the logits stay
    // on the GPU; only per-row scalars (maxima, sums) come back to the host, where the engine
    // reduces them over the tensor-parallel group.
    [[nodiscard]] std::vector<float> row_max(const matrix& logits) {
        require(logits.rows() >= 1 && logits.cols() >= 1, "row_max: logits",
                std::to_string(logits.rows()) + "x" + std::to_string(logits.cols()), "must not be empty");
        scratch<float> max(std::size_t(logits.rows()), stream());
        weft::exec::cuda_detail::launch::row_max(logits.data(), max.data(), logits.rows(), logits.cols(), stream());
        return download(max);
    }
    [[nodiscard]] std::vector<float> softmax_partial_sums(const matrix& logits, std::span<const float> max,
                                                          std::span<const std::int32_t> labels, int first_column) {
        require_loss_rows(logits, max.size(), labels.size(), "softmax_partial_sums");
        const auto device_max = upload(max);
        const auto device_labels = upload(labels);
        scratch<float> sums(2 * max.size(), stream());
        weft::exec::cuda_detail::launch::softmax_partial_sums(logits.data(), device_max.data(), device_labels.data(), first_column,
                                                 sums.data(), logits.rows(), logits.cols(), stream());
        return download(sums);
    }
    [[nodiscard]] matrix softmax_gradient(const matrix& logits, std::span<const float> max, std::span<const float> sums,
                                          std::span<const std::int32_t> labels, int first_column, float row_scale) {
        require_loss_rows(logits, max.size(), labels.size(), "softmax_gradient");
        require_size(sums.size(), 2 * max.size(), "softmax_gradient: sums.size()");
        const auto device_max = upload(max);
        const auto device_sums = upload(sums);
        const auto device_labels = upload(labels);
        matrix d(logits.rows(), logits.cols());
        weft::exec::cuda_detail::launch::softmax_gradient(logits.data(), device_max.data(), device_sums.data(),
                                             device_labels.data(), first_column, row_scale, d.data(), logits.rows(),
                                             logits.cols(), stream());
        return d;
    }

    // The whole vocabulary-parallel loss (exec::vocab_parallel_loss_reduction_kernels): the
    // three passes, the group's maxima and sums reduced by `gather` and `sum` on device
    // buffers (a device communicator's, ordered on this stream), each row's loss and their
    // mean on the GPU. Nothing waits: the loss is read when the returned value is.
    template <class Gather, class Sum>
    [[nodiscard]] deferred_value<float> vocab_parallel_cross_entropy(const matrix& logits,
                                                                     std::span<const std::int32_t> labels,
                                                                     int first_column, float row_scale, int group_size,
                                                                     Gather&& gather, Sum&& sum, matrix& dlogits) {
        require(group_size >= 1, "vocab_parallel_cross_entropy: group_size", group_size, "must be positive");
        require_loss_rows(logits, std::size_t(logits.rows()), labels.size(), "vocab_parallel_cross_entropy");
        const int n = logits.rows(), cols = logits.cols();
        scratch<float> mine(std::size_t(n), stream());
        weft::exec::cuda_detail::launch::row_max(logits.data(), mine.data(), n, cols, stream());
        scratch<float> all(std::size_t(n) * std::size_t(group_size), stream());
        std::forward<Gather>(gather)(std::span<const float>(mine.data(), mine.size()),
                                     std::span<float>(all.data(), all.size()));
        scratch<float> max(std::size_t(n), stream());
        weft::exec::cuda_detail::launch::max_over_blocks(all.data(), n, group_size, max.data(), stream());
        const auto device_labels = upload(labels);
        scratch<float> sums(2 * std::size_t(n), stream());
        weft::exec::cuda_detail::launch::softmax_partial_sums(logits.data(), max.data(), device_labels.data(), first_column,
                                                 sums.data(), n, cols, stream());
        std::forward<Sum>(sum)(std::span<float>(sums.data(), sums.size()));
        dlogits = matrix(n, cols);
        weft::exec::cuda_detail::launch::softmax_gradient(logits.data(), max.data(), sums.data(), device_labels.data(),
                                             first_column, row_scale, dlogits.data(), n, cols, stream());
        scratch<float> terms(std::size_t(n), stream());
        weft::exec::cuda_detail::launch::loss_terms(sums.data(), n, terms.data(), stream());
        scratch<float> mean(1, stream());
        weft::exec::cuda_detail::launch::mean(terms.data(), n, mean.data(), stream());
        return read_when_asked(std::move(mean));
    }

    // The optimizer kernels (exec::optimizer_kernels): the step after backward on the GPU,
    // over the training state's managed buffers, so that no page of it moves to the host. A
    // buffer in host memory (state made outside the backend's state memory) takes the host's
    // code instead, with the same result.
    // Stream-ordered, like the reduction it follows: the host need not wait for either.
    void scale(std::span<float> values, float factor) {
        if (!on_device(values)) {
            synchronize();
            optim::scale_on_host<float>(values, factor);
            return;
        }
        weft::exec::cuda_detail::launch::scale(values.data(), values.size(), factor, stream());
    }
    void adamw_update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                      const optim::adamw_factors<float>& f, bool decays) {
        require_size(grads.size(), params.size(), "adamw_update: grads.size()");
        require_size(m.size(), params.size(), "adamw_update: m.size()");
        require_size(v.size(), params.size(), "adamw_update: v.size()");
        if (!on_device(params) || !on_device(grads) || !on_device(m) || !on_device(v)) {
            synchronize();
            optim::adamw_update_on_host<float>(params, grads, m, v, f, decays);
            return;
        }
        weft::exec::cuda_detail::launch::adamw_update(params.data(), grads.data(), m.data(), v.data(), params.size(), f, decays,
                                         stream());
    }
    void sgd_update(std::span<float> params, std::span<const float> grads, std::span<float> momentum_buffer,
                    const optim::sgd_factors<float>& f, bool decays) {
        require_size(grads.size(), params.size(), "sgd_update: grads.size()");
        require_size(momentum_buffer.size(), f.use_momentum ? params.size() : 0, "sgd_update: momentum_buffer.size()");
        if (!on_device(params) || !on_device(grads) || !on_device(momentum_buffer)) {
            synchronize();
            optim::sgd_update_on_host<float>(params, grads, momentum_buffer, f, decays);
            return;
        }
        weft::exec::cuda_detail::launch::sgd_update(params.data(), grads.data(),
                                       momentum_buffer.empty() ? nullptr : momentum_buffer.data(), params.size(), f,
                                       decays, stream());
    }
    // Waits for the result (the engine reduces it over the world on the host).
    [[nodiscard]] optim::gradient_summary summarize_gradients(std::span<const float> owned, std::size_t offset,
                                                              std::span<const optim::flat_run> counted) {
        if (owned.empty()) return {};
        if (!on_device(owned)) {
            synchronize();
            return optim::summarize_gradients_on_host<float>(owned, offset, counted);
        }
        const std::vector<weft::exec::cuda_detail::gradient_segment> segments = gradient_segments(owned.size(), offset, counted);
        std::size_t longest = 0;
        for (const auto& s : segments) longest = std::max(longest, s.last - s.first);
        const int blocks = weft::exec::cuda_detail::launch::summary_blocks_per_segment(longest);
        require(segments.size() <= 65535, "summarize_gradients: counted runs", counted.size(),
                "must leave at most 65535 segments of the owned gradients");
        const auto device_segments = upload(std::span<const weft::exec::cuda_detail::gradient_segment>(segments));
        scratch<double> partials(segments.size() * std::size_t(blocks), stream());
        scratch<double> sums(2, stream());  // counted, all
        weft::exec::cuda_detail::launch::summarize_gradients(owned.data(), device_segments.data(), int(segments.size()), blocks,
                                                partials.data(), sums.data(), stream());
        const std::vector<double> host = download(sums);
        return {.sum_of_squares = host[0], .finite = std::isfinite(host[1])};
    }

private:
    // Whether a kernel may read values: device or managed memory (an empty span: nothing to read).
    template <class T>
    static bool on_device(std::span<T> values) {
        if (values.empty()) return true;
        const cudaMemoryType type = weft::gpu::memory_type(values.data());
        return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
    }
    // The owned gradients [offset, offset + size) of the flat buffer cut at the counted runs'
    // edges, in order, each piece marked counted or not (relative to the first owned element).
    static std::vector<weft::exec::cuda_detail::gradient_segment> gradient_segments(std::size_t size, std::size_t offset,
                                                                       std::span<const optim::flat_run> counted) {
        std::vector<weft::exec::cuda_detail::gradient_segment> segments;
        std::size_t at = 0;             // relative to offset
        std::size_t previous_last = 0;  // absolute
        for (const optim::flat_run& run : counted) {
            require(run.first <= run.last && run.first >= previous_last, "summarize_gradients: counted run",
                    "[" + std::to_string(run.first) + ", " + std::to_string(run.last) + ")",
                    "must be ascending and not overlap the run before it");
            previous_last = run.last;
            const std::size_t first = std::clamp(run.first, offset, offset + size) - offset;
            const std::size_t last = std::clamp(run.last, offset, offset + size) - offset;
            if (first >= last) continue;
            if (first > at) segments.push_back({at, first, 0});
            segments.push_back({first, last, 1});
            at = last;
        }
        if (at < size) segments.push_back({at, size, 0});
        return segments;
    }

    // Device memory for one kernel call's temporaries, freed in stream order after it.
    template <class T>
    class scratch {
    public:
        scratch(std::size_t n, cudaStream_t stream) : stream_(stream), size_(n) {
            if (n == 0) return;
            memory_ = weft::exec::cuda_detail::allocate_on_stream(n * sizeof(T), stream);
        }
        scratch(const scratch&) = delete;
        scratch& operator=(const scratch&) = delete;
        scratch(scratch&& other) noexcept
            : stream_(other.stream_), size_(std::exchange(other.size_, 0)), memory_(std::exchange(other.memory_, {})) {}
        scratch& operator=(scratch&&) = delete;
        ~scratch() { weft::exec::cuda_detail::free_on_stream(memory_, stream_); }
        [[nodiscard]] T* data() { return static_cast<T*>(memory_.pointer); }
        [[nodiscard]] const T* data() const { return static_cast<const T*>(memory_.pointer); }
        [[nodiscard]] std::size_t size() const { return size_; }

    private:
        cudaStream_t stream_;
        std::size_t size_;
        weft::exec::cuda_detail::stream_allocation memory_;
    };

    // Queues cross_entropy's kernels; returns the device scalar its mean loss will be in.
    scratch<float> queue_cross_entropy(const matrix& logits, std::span<const std::int32_t> labels, float scale,
                                       matrix& dlogits) {
        const int rows_n = logits.rows(), classes = logits.cols();
        require_size(labels.size(), std::size_t(rows_n), "cross_entropy: labels.size()");
        require(rows_n > 0, "cross_entropy: logits.rows()", rows_n, "must be positive");
        require(std::isfinite(scale), "cross_entropy: scale", scale, "must be finite");
        for (std::size_t r = 0; r < labels.size(); ++r)
            if (labels[r] < 0 || labels[r] >= classes)
                throw invalid_argument("cross_entropy: labels[" + std::to_string(r) + "]", labels[r],
                                       "must be a class id in [0, " + std::to_string(classes) + ")");
        const auto device_labels = upload(labels);
        scratch<float> losses(std::size_t(rows_n), stream());
        scratch<float> mean(1, stream());
        dlogits = matrix(rows_n, classes);
        weft::exec::cuda_detail::launch::cross_entropy(logits.data(), device_labels.data(), losses.data(), dlogits.data(), rows_n,
                                          classes, scale, stream());
        weft::exec::cuda_detail::launch::mean(losses.data(), rows_n, mean.data(), stream());
        return mean;
    }

    // A device scalar handed out to be read later: an event marks where the stream computes it,
    // and a read waits for that event only (not for what the stream does after), then copies
    // it over the legacy default stream. The scalar's buffer lives until the value is read.
    [[nodiscard]] deferred_value<float> read_when_asked(scratch<float> value) {
        auto kept = std::make_shared<scratch<float>>(std::move(value));
        auto computed = std::make_shared<weft::gpu::event>();
        computed->record(stream());
        return deferred_value<float>::when_read([kept, computed, limit = wait_limit_] {
            weft::exec::cuda_detail::synchronize(computed->get(), limit, "a wait for a loss the GPU computes");
            float host = 0;
            weft::gpu::check(cudaMemcpy(&host, kept->data(), sizeof(float), cudaMemcpyDeviceToHost),
                              "cudaMemcpy (deferred scalar to host)");
            return host;
        });
    }

    static int select(int device) {
        const int count = weft::gpu::device_count();
        require(count > 0, "device", device, "needs a CUDA GPU, and this machine has none (exec::cuda)");
        require(device >= 0 && device < count, "device", device,
                "must be in [0, " + std::to_string(count) + ") on this machine");
        weft::gpu::check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
        return device;
    }

    static void require_size(std::size_t got, std::size_t want, std::string_view what) {
        if (got != want) throw invalid_argument(what, got, "must equal " + std::to_string(want));
    }
    static void require_shape(const matrix& m, int rows, int cols, std::string_view what) {
        if (m.rows() != rows || m.cols() != cols)
            throw invalid_argument(what, std::to_string(m.rows()) + "x" + std::to_string(m.cols()),
                                   "shape must be " + std::to_string(rows) + "x" + std::to_string(cols));
    }
    // A kernel reading a host pointer would fault the whole context: refuse it here.
    template <class T>
    static void require_device(std::span<T> values, std::string_view what) {
        if (!on_device(values))
            throw invalid_argument(what, "host memory",
                                   "must be device or managed memory: exec::cuda computes on the GPU, so the "
                                   "training state must be allocated in the backend's state memory");
    }
    static void require_tokens(std::span<const std::int32_t> tokens, int vocab, std::string_view kernel) {
        for (std::size_t n = 0; n < tokens.size(); ++n)
            if (tokens[n] < 0 || tokens[n] >= vocab)
                throw invalid_argument(std::string(kernel) + ": tokens[" + std::to_string(n) + "]", tokens[n],
                                       "must be a token id in [0, vocab_size = " + std::to_string(vocab) + ")");
    }
    static int checked_sequences(std::span<const std::int32_t> tokens, int seq_len, std::string_view kernel) {
        require(seq_len >= 1 && tokens.size() % std::size_t(seq_len) == 0, std::string(kernel) + ": tokens.size()",
                tokens.size(), "must be a positive multiple of seq_len = " + std::to_string(seq_len));
        return static_cast<int>(tokens.size() / std::size_t(seq_len));
    }
    // How many wte rows a vocabulary-parallel embedding kernel holds (its slice's size over width).
    static int held_rows(std::size_t wte_size, int first_row, int width, std::string_view kernel) {
        const std::string k(kernel);
        require(width >= 1, k + ": width", width, "must be positive");
        require(first_row >= 0, k + ": first_row", first_row, "must be a vocabulary row (>= 0)");
        require(wte_size % std::size_t(width) == 0 && wte_size / std::size_t(width) <= std::size_t(0x7fffffff),
                k + ": wte size", wte_size, "must be a whole number of rows of width " + std::to_string(width));
        return static_cast<int>(wte_size / std::size_t(width));
    }

    struct attention_shape {
        int seqs, t, heads, width, d;
        [[nodiscard]] std::size_t lse_size() const { return std::size_t(seqs) * std::size_t(heads) * std::size_t(t); }
    };
    static attention_shape attention_dims(const matrix& qkv, int seq_len, int heads, std::string_view kernel) {
        const std::string k(kernel);
        require(seq_len >= 1, k + ": seq_len", seq_len, "must be at least 1");
        require(heads >= 1, k + ": heads", heads, "must be at least 1");
        require(qkv.cols() > 0 && qkv.cols() % (3 * heads) == 0, k + ": qkv.cols()", qkv.cols(),
                "must be 3 * width with width a positive multiple of heads = " + std::to_string(heads));
        require(qkv.rows() % seq_len == 0, k + ": qkv.rows()", qkv.rows(),
                "must be a multiple of seq_len = " + std::to_string(seq_len) + " (whole sequences)");
        const int width = qkv.cols() / 3;
        return {qkv.rows() / seq_len, seq_len, heads, width, width / heads};
    }

    // Statistics backward needs at full precision, kept in the concept's matrix type: a
    // matrix's storage is bf16, so n floats take n pairs of its elements, at the start of
    // the matrix's device allocation (aligned for floats).
    static constexpr int fp32_pair = sizeof(float) / sizeof(bf16);
    [[nodiscard]] static matrix fp32_matrix(int n) { return matrix(n, fp32_pair); }
    [[nodiscard]] static float* floats(matrix& m) { return reinterpret_cast<float*>(m.data()); }
    [[nodiscard]] static const float* floats(const matrix& m) { return reinterpret_cast<const float*>(m.data()); }

    // The GEMMs' bf16 weights: the fp32 values rounded to nearest even.
    [[nodiscard]] scratch<__nv_bfloat16> bf16_copy(const float* values, std::size_t n) {
        scratch<__nv_bfloat16> out(n, stream());
        weft::exec::cuda_detail::launch::to_bf16(values, out.data(), n, stream());
        return out;
    }
    // Waits for the stream: the values are the kernels' results.
    template <class T>
    [[nodiscard]] std::vector<T> download(const scratch<T>& values) {
        std::vector<T> out(values.size());
        synchronize();  // the copy into pageable memory below would wait without a limit
        if (!out.empty())
            weft::gpu::check(cudaMemcpyAsync(out.data(), values.data(), out.size() * sizeof(T), cudaMemcpyDeviceToHost,
                                              stream()),
                              "cudaMemcpyAsync (results to the host)");
        synchronize();
        return out;
    }
    static void require_loss_rows(const matrix& logits, std::size_t max_size, std::size_t labels_size,
                                  std::string_view kernel) {
        require(logits.rows() >= 1 && logits.cols() >= 1, std::string(kernel) + ": logits",
                std::to_string(logits.rows()) + "x" + std::to_string(logits.cols()), "must not be empty");
        require_size(max_size, std::size_t(logits.rows()), std::string(kernel) + ": max.size()");
        require_size(labels_size, std::size_t(logits.rows()), std::string(kernel) + ": labels.size()");
    }
    // A new device buffer holding the host values, copied in stream order.
    // Inside an action's graph (a capture or its shadow) the values go through the graph's own
    // pinned buffer for this upload, which its copy node reads at every launch.
    template <class T>
    [[nodiscard]] scratch<T> upload(std::span<const T> values) {
        scratch<T> out(values.size(), stream());
        auto* recording = weft::exec::cuda_detail::current_recording();
        if (recording == nullptr || values.empty()) {
            uploads_.copy(out.data(), values.data(), values.size_bytes());
            return out;
        }
        const std::size_t index = recording->note_upload(values.size_bytes());
        if (recording->mode() == weft::exec::cuda_detail::recording_mode::measuring) {
            uploads_.copy(out.data(), values.data(), values.size_bytes());
            return out;
        }
        void* staged = recording->upload_buffer(index);
        std::memcpy(staged, values.data(), values.size_bytes());
        if (!weft::exec::cuda_detail::skip_recorded_work("upload", out.data(), staged, values.size_bytes()))
            weft::gpu::check(cudaMemcpyAsync(out.data(), staged, values.size_bytes(), cudaMemcpyHostToDevice,
                                              stream()),
                              "cudaMemcpyAsync (an action's staged upload)");
        return out;
    }

    int device_;
    weft::exec::cuda_detail::wait_limit wait_limit_{};
    weft::gpu::stream stream_;
    // Token ids, labels and other small host values go up through pinned buffers, so that an
    // upload queues behind the kernels instead of waiting for them.
    weft::exec::cuda_detail::pinned_uploads uploads_{weft::exec::cuda_detail::pinned_upload_platform{stream_.get()}};
    weft::exec::cuda_detail::interval_clock compute_clock_{stream_.get()};
    weft::exec::cuda_detail::gemm gemm_;
    std::unique_ptr<weft::exec::cuda_detail::action_graphs> graphs_;  // null: actions run eagerly
    weft::exec::cuda_detail::attention_kernel attention_kernel_ = weft::exec::cuda_detail::attention_kernel::wmma;
};

using cuda = cuda_backend;

static_assert(compute_backend<cuda_backend>);
static_assert(device_timed<cuda_backend>);
static_assert(fused_kernels<cuda_backend> && optimizer_kernels<cuda_backend> &&
              vocab_parallel_loss_kernels<cuda_backend> && matrix_reduction_kernels<cuda_backend>);

}  // namespace weft::exec
