// bf16 matrix products on cuBLASLt with fp32 accumulation, in weft's row-major
// convention (y = x W, x [rows, in], W [in, out] as the CPU backend stores it).
// One gemm object owns the cuBLASLt handle and its workspace; usable inside CUDA graphs.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/exec/cuda/action_recording.hpp"
#include "weft/exec/cuda/operation_profile.hpp"
#include "weft/gpu/device_buffer.hpp"
#include "weft/gpu/runtime.hpp"

namespace weft::exec::cuda_detail {

using bf16 = __nv_bfloat16;

// Throws weft::error("<what> failed: cuBLAS status <n>") unless `status` is success.
inline void check_cublas(cublasStatus_t status, std::string_view what) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw error(std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)) + " (" +
                cublasLtGetStatusString(status) + ")");
}

enum class transpose : bool { no = false, yes = true };

// cuBLASLt's GELU epilogues, with their [m, n] GELU input (row-major, like c):
// forward: c = gelu(product + bias), writing the GELU input (needs a bias);
// backward: c = product * gelu'(GELU input), reading it (the gradient through the GELU).
enum class gelu_epilogue { none, forward, backward };

class gemm {
public:
    // 32 MiB is what cuBLAS itself asks for on Hopper; big enough for every algorithm.
    static constexpr std::size_t default_workspace_bytes = std::size_t(32) << 20;

    explicit gemm(std::size_t workspace_bytes = default_workspace_bytes) : workspace_(workspace_bytes) {
        check_cublas(cublasLtCreate(&handle_), "cublasLtCreate");
    }
    gemm(const gemm&) = delete;
    gemm& operator=(const gemm&) = delete;
    gemm(gemm&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)),
          workspace_(std::move(other.workspace_)),
          algorithms_(std::move(other.algorithms_)) {}
    gemm& operator=(gemm&& other) noexcept {
        if (this != &other) {
            release();
            handle_ = std::exchange(other.handle_, nullptr);
            workspace_ = std::move(other.workspace_);
            algorithms_ = std::move(other.algorithms_);
        }
        return *this;
    }
    ~gemm() { release(); }

    // Row-major c[m, n] = alpha op(a) op(b) + beta c (+ bias[n] on every row when bias is
    // given), where op(a) is [m, k] (a stored [k, m] when ta is yes) and op(b) is [k, n]
    // (b stored [n, k] when tb is yes). Out is float or bf16; bias has the type of c. A GELU
    // epilogue (gelu_epilogue) writes or reads gelu_input, [m, n] of Out; it needs n to be a
    // multiple of 8.
    template <class Out>
    void matmul(const bf16* a, transpose ta, const bf16* b, transpose tb, Out* c, int m, int n, int k,
                float alpha, float beta, const Out* bias, cudaStream_t stream,
                gelu_epilogue gelu = gelu_epilogue::none, const void* gelu_input = nullptr) {
        if (!try_matmul(a, ta, b, tb, c, m, n, k, alpha, beta, bias, stream, gelu, gelu_input))
            throw error("gemm: cuBLASLt has no algorithm for m=" + std::to_string(m) + ", n=" + std::to_string(n) +
                        ", k=" + std::to_string(k) + " with these transposes, types, epilogue and alignments");
    }

    // matmul, or false (and nothing queued) where cuBLASLt has no algorithm for the shape,
    // types, epilogue and alignments, so that the caller can compute it another way.
    template <class Out>
    [[nodiscard]] bool try_matmul(const bf16* a, transpose ta, const bf16* b, transpose tb, Out* c, int m, int n,
                                  int k, float alpha, float beta, const Out* bias, cudaStream_t stream,
                                  gelu_epilogue gelu = gelu_epilogue::none, const void* gelu_input = nullptr) {
        static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, bf16>, "gemm output is float or bf16");
        require(handle_ != nullptr, "gemm", "moved-from", "must own a cuBLASLt handle");
        require(m > 0, "gemm: m", m, "must be positive");
        require(n > 0, "gemm: n", n, "must be positive");
        require(k > 0, "gemm: k", k, "must be positive");
        require(a != nullptr && b != nullptr && c != nullptr, "gemm: a, b, c", "a null pointer",
                "must all be device pointers");
        require((gelu == gelu_epilogue::none) == (gelu_input == nullptr), "gemm: gelu_input",
                gelu_input == nullptr ? "null" : "given", "goes with a GELU epilogue, and only with one");
        require(gelu != gelu_epilogue::forward || bias != nullptr, "gemm: bias", "null",
                "is needed by the forward GELU epilogue (cuBLASLt's bias+GELU)");
        require(gelu != gelu_epilogue::backward || bias == nullptr, "gemm: bias", "given",
                "cannot go with the backward GELU epilogue");
        require(gelu == gelu_epilogue::none || n % 8 == 0, "gemm: n", n,
                "must be a multiple of 8 with a GELU epilogue");
        constexpr cudaDataType_t out_type = std::is_same_v<Out, float> ? CUDA_R_32F : CUDA_R_16BF;
        const bool a_t = ta == transpose::yes;
        const bool b_t = tb == transpose::yes;

        // cuBLASLt is column-major: a row-major [r, c] matrix is a column-major [c, r] one,
        // so c^T = op(b)^T op(a)^T is computed with cuBLASLt's A = b and B = a.
        const std::uint64_t lt_m = std::uint64_t(n), lt_n = std::uint64_t(m), lt_k = std::uint64_t(k);
        const cublasOperation_t op_a = b_t ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t op_b = a_t ? CUBLAS_OP_T : CUBLAS_OP_N;

        const cublasLtEpilogue_t epilogue = gelu == gelu_epilogue::forward    ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                            : gelu == gelu_epilogue::backward ? CUBLASLT_EPILOGUE_DGELU
                                            : bias != nullptr                 ? CUBLASLT_EPILOGUE_BIAS
                                                                              : CUBLASLT_EPILOGUE_DEFAULT;
        const std::array<std::uint32_t, 4> alignments = {alignment_of(b), alignment_of(a), alignment_of(c),
                                                         bias != nullptr ? alignment_of(bias) : 256u};
        const key_type key = {m, n, k, int(a_t), int(b_t), int(out_type), int(epilogue),
                              int(alignments[0]), int(alignments[1]), int(alignments[2]), int(alignments[3])};
        // What an action graph notes of this GEMM under capture and compares in a shadow, where
        // the graph holds it (action_recording.hpp): true when it must not be queued.
        const auto recorded = [&] {
            return skip_recorded_work("cublasLtMatmul", a, b, c, bias, gelu_input, m, n, k, a_t, b_t, alpha, beta,
                                      epilogue);
        };
        // A shadow skips it with the algorithm its capture found, without making descriptors.
        if (const auto* recording = current_recording(); recording != nullptr && recording->replaying()) {
            if (const auto cached = algorithms_.find(key); cached != algorithms_.end()) {
                if (!cached->second) return false;
                if (recorded()) return true;
            }
        }

        detail_handles h;
        check_cublas(cublasLtMatmulDescCreate(&h.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
              "cublasLtMatmulDescSetAttribute(TRANSA)");
        check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
              "cublasLtMatmulDescSetAttribute(TRANSB)");
        if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
            check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
                  "cublasLtMatmulDescSetAttribute(EPILOGUE)");
        if (bias != nullptr)
            check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                  "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
        if (gelu_input != nullptr) {
            const std::int64_t gelu_ld = std::int64_t(lt_m);  // the output's: [m, n] row-major
            check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_input,
                                                 sizeof(gelu_input)),
                  "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
            check_cublas(cublasLtMatmulDescSetAttribute(h.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &gelu_ld, sizeof(gelu_ld)),
                  "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
        }
        // Stored (pre-op) shapes, column-major.
        check_cublas(cublasLtMatrixLayoutCreate(&h.a, CUDA_R_16BF, b_t ? lt_k : lt_m, b_t ? lt_m : lt_k,
                                         std::int64_t(b_t ? lt_k : lt_m)),
              "cublasLtMatrixLayoutCreate(A)");
        check_cublas(cublasLtMatrixLayoutCreate(&h.b, CUDA_R_16BF, a_t ? lt_n : lt_k, a_t ? lt_k : lt_n,
                                         std::int64_t(a_t ? lt_n : lt_k)),
              "cublasLtMatrixLayoutCreate(B)");
        check_cublas(cublasLtMatrixLayoutCreate(&h.c, out_type, lt_m, lt_n, std::int64_t(lt_m)),
              "cublasLtMatrixLayoutCreate(C)");

        auto found = algorithms_.find(key);
        if (found == algorithms_.end()) {
            found = algorithms_.emplace(key, choose_algorithm(h, alignments)).first;
        }
        if (!found->second) return false;
        if (recorded()) return true;
        profile_scope timed(operation_profile::process().enabled()
                                      ? profile_name(m, n, k, a_t, b_t, epilogue, beta != 0.0f)
                                      : std::string(),
                                  stream);
        const cublasStatus_t status = cublasLtMatmul(handle_, h.op, &alpha, b, h.a, a, h.b, &beta, c, h.c, c, h.c,
                                                     &*found->second, workspace_.data(), workspace_.bytes(), stream);
        // A heuristic's algorithm may still be refused at the call (cuBLASLt says so); then
        // nothing was queued, and the caller may compute it another way, as with no algorithm.
        if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
            timed.cancel();
            found->second.reset();
            return false;
        }
        check_cublas(status, "cublasLtMatmul(m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" +
                          std::to_string(k) + ")");
        return true;
    }

    // y[rows, out] = x[rows, in] W[in, out] (+ b[out]).
    template <class Out>
    void linear_forward(const bf16* x, const bf16* w, const Out* b, Out* y, int rows, int in, int out,
                        cudaStream_t stream) {
        matmul(x, transpose::no, w, transpose::no, y, rows, out, in, 1.0f, 0.0f, b, stream);
    }
    // act[rows, out] = gelu(x W + b), keeping pre_act = x W + b for GELU's backward: one GEMM
    // with cuBLASLt's bias+GELU epilogue. out must be a multiple of 8. False (nothing queued)
    // where cuBLASLt has no algorithm with that epilogue for the shape.
    [[nodiscard]] bool linear_gelu_forward(const bf16* x, const bf16* w, const bf16* b, bf16* act, bf16* pre_act,
                                           int rows, int in, int out, cudaStream_t stream) {
        return try_matmul(x, transpose::no, w, transpose::no, act, rows, out, in, 1.0f, 0.0f, b, stream,
                          gelu_epilogue::forward, pre_act);
    }
    // d_pre_act[rows, in] = (dy W^T) * gelu'(pre_act): the input gradient of a layer whose
    // input was gelu(pre_act), through the GELU, as one GEMM with cuBLASLt's GELU-gradient
    // epilogue. in must be a multiple of 8. False (nothing queued) where cuBLASLt has no
    // algorithm with that epilogue for the shape.
    [[nodiscard]] bool linear_backward_input_gelu(const bf16* dy, const bf16* w, const bf16* pre_act, bf16* d_pre_act,
                                                  int rows, int in, int out, cudaStream_t stream) {
        return try_matmul(dy, transpose::no, w, transpose::yes, d_pre_act, rows, in, out, 1.0f, 0.0f,
                          static_cast<const bf16*>(nullptr), stream, gelu_epilogue::backward, pre_act);
    }
    // dx[rows, in] = dy[rows, out] W^T.
    template <class Out>
    void linear_backward_input(const bf16* dy, const bf16* w, Out* dx, int rows, int in, int out,
                               cudaStream_t stream) {
        matmul(dy, transpose::no, w, transpose::yes, dx, rows, in, out, 1.0f, 0.0f, static_cast<const Out*>(nullptr),
               stream);
    }
    // dW[in, out] += x^T dy, fp32 so that gradients accumulate at master precision.
    void linear_backward_weight(const bf16* x, const bf16* dy, float* dw, int rows, int in, int out,
                                cudaStream_t stream) {
        matmul(x, transpose::yes, dy, transpose::no, dw, in, out, rows, 1.0f, 1.0f,
               static_cast<const float*>(nullptr), stream);
    }

    [[nodiscard]] std::size_t workspace_bytes() const { return workspace_.bytes(); }

private:
    using key_type = std::array<int, 11>;

    struct detail_handles {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        detail_handles() = default;
        detail_handles(const detail_handles&) = delete;
        detail_handles& operator=(const detail_handles&) = delete;
        ~detail_handles() {
            if (c != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(c));
            if (b != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(b));
            if (a != nullptr) static_cast<void>(cublasLtMatrixLayoutDestroy(a));
            if (op != nullptr) static_cast<void>(cublasLtMatmulDescDestroy(op));
        }
    };

    // The operation profile's name of a GEMM (operation_profile.hpp): c[m, n] = op(a)[m, k]
    // op(b)[k, n] in weft's row-major terms, which operand is transposed, what the epilogue
    // adds, and += where it accumulates. A GPT-2 step's GEMMs are told apart by these.
    static std::string profile_name(int m, int n, int k, bool a_t, bool b_t, cublasLtEpilogue_t epilogue,
                                    bool accumulates) {
        std::string name = "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
        if (a_t) name += " A^T";
        if (b_t) name += " B^T";
        if (epilogue == CUBLASLT_EPILOGUE_BIAS) name += " +bias";
        if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) name += " +bias,GELU";
        if (epilogue == CUBLASLT_EPILOGUE_DGELU) name += " *GELU'";
        if (accumulates) name += " +=";
        return name;
    }

    // The largest power of two (up to 256) dividing the address: cuBLASLt assumes 256
    // unless told, and an algorithm chosen for 256 fails on an offset into a flat buffer.
    static std::uint32_t alignment_of(const void* pointer) {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        std::uint32_t alignment = 256;
        while (alignment > 1 && address % alignment != 0) alignment /= 2;
        return alignment;
    }

    // cuBLASLt's best algorithm, or none where it has none (or does not support the epilogue).
    std::optional<cublasLtMatmulAlgo_t> choose_algorithm(const detail_handles& h,
                                                         const std::array<std::uint32_t, 4>& alignments) {
        cublasLtMatmulPreference_t preference = nullptr;
        check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
        struct preference_guard {
            cublasLtMatmulPreference_t p;
            ~preference_guard() { static_cast<void>(cublasLtMatmulPreferenceDestroy(p)); }
        } guard{preference};
        const std::size_t workspace = workspace_.bytes();
        check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                   sizeof(workspace)),
              "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
        const std::array<cublasLtMatmulPreferenceAttributes_t, 4> which = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (std::size_t i = 0; i < which.size(); ++i) {
            const std::uint32_t value = i < 3 ? alignments[i] : alignments[2];
            check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, which[i], &value, sizeof(value)),
                  "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
        }
        cublasLtMatmulHeuristicResult_t result{};
        int returned = 0;
        const cublasStatus_t status =
            cublasLtMatmulAlgoGetHeuristic(handle_, h.op, h.a, h.b, h.c, h.c, preference, 1, &result, &returned);
        if (status == CUBLAS_STATUS_NOT_SUPPORTED) return std::nullopt;
        check_cublas(status, "cublasLtMatmulAlgoGetHeuristic");
        if (returned == 0) return std::nullopt;
        return result.algo;
    }

    void release() noexcept {
        if (handle_ != nullptr) static_cast<void>(cublasLtDestroy(handle_));
        handle_ = nullptr;
    }

    cublasLtHandle_t handle_ = nullptr;
    gpu::device_buffer<std::byte> workspace_;
    std::map<key_type, std::optional<cublasLtMatmulAlgo_t>> algorithms_;  // none: cuBLASLt has none
};

}  // namespace weft::exec::cuda_detail
