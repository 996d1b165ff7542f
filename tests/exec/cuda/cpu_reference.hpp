// CPU references for the CUDA kernel tests, compiled by the host compiler with weft's
// warnings (Eigen stays out of nvcc). Row-major float vectors throughout.
#pragma once

#include <cstdint>
#include <vector>

namespace weft_test {

using vec = std::vector<float>;

// y = x W + b through weft::exec::cpu (W [in, out]).
vec linear_forward(const vec& x, const vec& w, const vec& b, int rows, int in, int out);
vec linear_backward_input(const vec& dy, const vec& w, int rows, int in, int out);
// Returns {dW, db} (accumulated into zero).
void linear_backward_weight(const vec& x, const vec& dy, int rows, int in, int out, vec& dw, vec& db);

vec gelu_forward(const vec& x);
vec gelu_backward(const vec& x, const vec& dy);

vec layer_norm_forward(const vec& x, const vec& gamma, const vec& beta, int rows, int cols, vec& mean, vec& rstd);
vec layer_norm_backward_input(const vec& x, const vec& mean, const vec& rstd, const vec& gamma, const vec& dy, int rows,
                              int cols);
void layer_norm_backward_weight(const vec& x, const vec& mean, const vec& rstd, const vec& dy, int rows, int cols,
                                vec& dgamma, vec& dbeta);

// Mean loss; dlogits = scale * d(mean loss)/d(logits).
float cross_entropy(const vec& logits, const std::vector<std::int32_t>& labels, int rows, int classes, float scale,
                    vec& dlogits);

// Token + position embedding through weft::exec::cpu (tokens are whole sequences), and its
// backward accumulated (+=) into dwte and dwpe.
vec embedding_forward(const std::vector<std::int32_t>& tokens, const vec& wte, const vec& wpe, int vocab, int width,
                      int seq_len);
void embedding_backward(const std::vector<std::int32_t>& tokens, const vec& dy, int vocab, int width, int seq_len,
                        vec& dwte, vec& dwpe);

// Causal attention in double (qkv [batch*seq, 3C], out [batch*seq, C]) and its backward.
vec attention_forward(const vec& qkv, int batch, int seq, int heads, int head_dim);
vec attention_backward(const vec& qkv, const vec& dout, int batch, int seq, int heads, int head_dim);

// `steps` steps of weft::optim::adamw over one 2-D tensor [rows, cols] followed by a
// bias [cols] (no decay), with the gradient of step s given by grads[s].
vec adamw(const vec& params, const std::vector<vec>& grads, int rows, int cols, double lr, double weight_decay);

}  // namespace weft_test
