// CPU references for the CUDA kernel tests: weft's CPU backend where it has the kernel,
// plain double-precision loops for causal attention (which the CPU backend lacks).
#include "cpu_reference.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include "weft/core/parameter_registry.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/optim/adamw.hpp"

namespace weft_test {

namespace {

using matrix = weft::exec::cpu::matrix;
const weft::exec::cpu cpu;

matrix to_matrix(const vec& v, int rows, int cols) {
    return Eigen::Map<const matrix>(v.data(), rows, cols);
}
vec to_vec(const matrix& m) {
    return vec(m.data(), m.data() + m.size());
}

}  // namespace

vec linear_forward(const vec& x, const vec& w, const vec& b, int rows, int in, int out) {
    return to_vec(cpu.linear_forward(to_matrix(x, rows, in), w, b, in, out));
}

vec linear_backward_input(const vec& dy, const vec& w, int rows, int in, int out) {
    return to_vec(cpu.linear_backward_input(to_matrix(dy, rows, out), w, in, out));
}

void linear_backward_weight(const vec& x, const vec& dy, int rows, int in, int out, vec& dw, vec& db) {
    dw.assign(std::size_t(in) * std::size_t(out), 0.0f);
    db.assign(std::size_t(out), 0.0f);
    cpu.linear_backward_weight(to_matrix(x, rows, in), to_matrix(dy, rows, out), dw, db);
}

vec gelu_forward(const vec& x) {
    return to_vec(cpu.gelu_forward(to_matrix(x, 1, int(x.size()))));
}

vec gelu_backward(const vec& x, const vec& dy) {
    return to_vec(cpu.gelu_backward(to_matrix(x, 1, int(x.size())), to_matrix(dy, 1, int(dy.size()))));
}

vec layer_norm_forward(const vec& x, const vec& gamma, const vec& beta, int rows, int cols, vec& mean, vec& rstd) {
    matrix m, r;
    const vec y = to_vec(cpu.layer_norm_forward(to_matrix(x, rows, cols), gamma, beta, 1e-5f, m, r));
    mean = to_vec(m);
    rstd = to_vec(r);
    return y;
}

vec layer_norm_backward_input(const vec& x, const vec& mean, const vec& rstd, const vec& gamma, const vec& dy, int rows,
                              int cols) {
    return to_vec(cpu.layer_norm_backward_input(to_matrix(x, rows, cols), to_matrix(mean, rows, 1),
                                                 to_matrix(rstd, rows, 1), gamma, to_matrix(dy, rows, cols)));
}

void layer_norm_backward_weight(const vec& x, const vec& mean, const vec& rstd, const vec& dy, int rows, int cols,
                                vec& dgamma, vec& dbeta) {
    dgamma.assign(std::size_t(cols), 0.0f);
    dbeta.assign(std::size_t(cols), 0.0f);
    cpu.layer_norm_backward_weight(to_matrix(x, rows, cols), to_matrix(mean, rows, 1), to_matrix(rstd, rows, 1),
                                    to_matrix(dy, rows, cols), dgamma, dbeta);
}

float cross_entropy(const vec& logits, const std::vector<std::int32_t>& labels, int rows, int classes, float scale,
                    vec& dlogits) {
    matrix d;
    const float loss = cpu.cross_entropy(to_matrix(logits, rows, classes), labels, scale, d);
    dlogits = to_vec(d);
    return loss;
}

namespace {

// Probabilities p[b][h][i][j] of the causal softmax, in double.
struct attention_probabilities {
    std::vector<double> p;
    int seq;
    double& at(std::size_t bh, int i, int j) { return p[(bh * std::size_t(seq) + std::size_t(i)) * seq + j]; }
};

attention_probabilities probabilities(const vec& qkv, int batch, int seq, int heads, int head_dim) {
    const int C = heads * head_dim;
    const double scale = 1.0 / std::sqrt(double(head_dim));
    attention_probabilities result{std::vector<double>(std::size_t(batch) * heads * seq * seq, 0.0), seq};
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
            const std::size_t bh = std::size_t(b) * heads + h;
            for (int i = 0; i < seq; ++i) {
                std::vector<double> s(std::size_t(i) + 1);
                for (int j = 0; j <= i; ++j) {
                    double dot = 0;
                    for (int d = 0; d < head_dim; ++d)
                        dot += double(qkv[(std::size_t(b) * seq + i) * 3 * C + h * head_dim + d]) *
                               double(qkv[(std::size_t(b) * seq + j) * 3 * C + C + h * head_dim + d]);
                    s[std::size_t(j)] = dot * scale;
                }
                const double m = *std::max_element(s.begin(), s.end());
                double sum = 0;
                for (double& v : s) sum += (v = std::exp(v - m));
                for (int j = 0; j <= i; ++j) result.at(bh, i, j) = s[std::size_t(j)] / sum;
            }
        }
    return result;
}

}  // namespace

vec attention_forward(const vec& qkv, int batch, int seq, int heads, int head_dim) {
    const int C = heads * head_dim;
    auto p = probabilities(qkv, batch, seq, heads, head_dim);
    vec out(std::size_t(batch) * seq * C, 0.0f);
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < seq; ++i)
                for (int d = 0; d < head_dim; ++d) {
                    double acc = 0;
                    for (int j = 0; j <= i; ++j)
                        acc += p.at(std::size_t(b) * heads + h, i, j) *
                               double(qkv[(std::size_t(b) * seq + j) * 3 * C + 2 * C + h * head_dim + d]);
                    out[(std::size_t(b) * seq + i) * C + h * head_dim + d] = float(acc);
                }
    return out;
}

vec attention_backward(const vec& qkv, const vec& dout, int batch, int seq, int heads, int head_dim) {
    const int C = heads * head_dim;
    const double scale = 1.0 / std::sqrt(double(head_dim));
    auto p = probabilities(qkv, batch, seq, heads, head_dim);
    std::vector<double> grad(qkv.size(), 0.0);
    auto q = [&](int b, int t, int h, int d) { return (std::size_t(b) * seq + t) * 3 * C + h * head_dim + d; };
    auto o = [&](int b, int t, int h, int d) { return (std::size_t(b) * seq + t) * C + h * head_dim + d; };
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
            const std::size_t bh = std::size_t(b) * heads + h;
            for (int i = 0; i < seq; ++i) {
                std::vector<double> dp(std::size_t(i) + 1, 0.0);
                double dot_pdp = 0;
                for (int j = 0; j <= i; ++j) {
                    for (int d = 0; d < head_dim; ++d)
                        dp[std::size_t(j)] += double(dout[o(b, i, h, d)]) * double(qkv[q(b, j, h, d) + 2 * C]);
                    dot_pdp += p.at(bh, i, j) * dp[std::size_t(j)];
                }
                for (int j = 0; j <= i; ++j) {
                    const double pij = p.at(bh, i, j);
                    const double ds = pij * (dp[std::size_t(j)] - dot_pdp) * scale;
                    for (int d = 0; d < head_dim; ++d) {
                        grad[q(b, i, h, d)] += ds * double(qkv[q(b, j, h, d) + C]);
                        grad[q(b, j, h, d) + C] += ds * double(qkv[q(b, i, h, d)]);
                        grad[q(b, j, h, d) + 2 * C] += pij * double(dout[o(b, i, h, d)]);
                    }
                }
            }
        }
    return vec(grad.begin(), grad.end());
}

vec embedding_forward(const std::vector<std::int32_t>& tokens, const vec& wte, const vec& wpe, int vocab, int width,
                      int seq_len) {
    return to_vec(cpu.embedding_forward(tokens, wte, wpe, vocab, width, seq_len));
}

void embedding_backward(const std::vector<std::int32_t>& tokens, const vec& dy, int vocab, int width, int seq_len,
                        vec& dwte, vec& dwpe) {
    cpu.embedding_backward_weight(tokens, to_matrix(dy, int(tokens.size()), width), dwte, dwpe, vocab, seq_len);
}

vec adamw(const vec& params, const std::vector<vec>& grads, int rows, int cols, double lr, double weight_decay) {
    weft::parameter_registry registry;
    registry.add("weight", {rows, cols});
    registry.add("bias", {cols});
    weft::optim::adamw_options options;
    options.lr = lr;
    options.weight_decay = weight_decay;
    weft::optim::adamw optimizer(options);
    vec p = params;
    for (const vec& g : grads) optimizer.step(p, g, registry);
    return p;
}

}  // namespace weft_test
