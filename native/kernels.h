/* sgd-lab numerical kernels: the whole C API, declarations only.
 *
 * Conventions
 *   - Every kernel returns an int status (enum sgd_status); C never prints,
 *     aborts or allocates. Scratch memory is passed in by the caller.
 *   - Matrices are row-major and C-contiguous; sizes are int64_t.
 *   - Each floating-point kernel exists as _f32 (float) and _f64 (double).
 *   - SGD_ENONFINITE means a NaN or Inf reached an output (the outputs then
 *     hold those values); it is how divergence and NaN inputs are reported.
 *
 * This file is parsed by cffi (native/build.py strips the preprocessor lines),
 * so it holds plain declarations only: no macros, no inline code.
 */
#ifndef SGD_KERNELS_H
#define SGD_KERNELS_H

#include <stdint.h>

enum sgd_status {
    SGD_OK = 0,
    SGD_EINVAL = 1,     /* a size or scalar argument is out of its domain */
    SGD_EINDEX = 2,     /* a sparse index or label is out of range */
    SGD_ENONFINITE = 3  /* NaN or Inf in an output */
};

/* Rows of a batch processed together. SGD_ROW_BLOCK is the logistic-regression
 * kernel's register tile: the margins of that many rows share every load of the
 * weights (one accumulator vector per row), and it fixes the summation order of
 * every margin, so it is a compile-time constant. Cache blocking is chosen at run
 * time instead (struct sgd_logreg_plan) and never changes a result. SGD_SOFTMAX_BLOCK
 * is softmax regression's: one BLAS product per block, the gradient accumulated
 * block by block (beta = 1), so it too sets the summation order and stays fixed.
 * SGD_MAX_ROW_BLOCK bounds a plan's row_block (the kernel keeps that many
 * residuals on its stack). */
enum { SGD_ROW_BLOCK = 8, SGD_SOFTMAX_BLOCK = 256, SGD_MAX_ROW_BLOCK = 4096 };

/* How logreg_loss_grad computes: one fused pass over X (SGD_PATH_FUSED), or two
 * BLAS mat-vecs, z = X w then grad = l2 w + X^T r (SGD_PATH_BLAS; X read twice).
 * The paths differ in rounding, not in what they compute. */
enum sgd_path { SGD_PATH_FUSED = 0, SGD_PATH_BLAS = 1 };

/* Cache blocking of the fused pass, chosen by the caller from the machine's cache
 * sizes (sim/kernels/plans.py). row_block rows (a multiple of SGD_ROW_BLOCK, at most
 * SGD_MAX_ROW_BLOCK) have their margins computed before their gradient terms are
 * added, so the block is re-read from the cache level it fits in; the gradient pass
 * goes over grad in chunks of col_block (>= 1) columns, each chunk held in L1 while
 * the block's rows are added to it. Blocking only reorders memory traffic: every
 * margin and every gradient element is summed in the same order whatever the block
 * sizes, so results are bitwise independent of them. The BLAS path ignores both. */
struct sgd_logreg_plan {
    int32_t path;
    int64_t row_block;
    int64_t col_block;
};

/* ---- 0. BLAS -------------------------------------------------------------
 * Dense layers, softmax regression and dense mat-vec call OpenBLAS (the PyPI
 * wheel scipy-openblas64). Its thread count is process-wide: set it (n >= 1,
 * else SGD_EINVAL) and read it back. */
int sgd_blas_set_threads(int n);
int sgd_blas_threads(void);

/* ---- 1. binary logistic regression, loss + gradient ----------------------
 * X: n x d, y: n labels in {0, 1}, w: d. grad: d (overwritten).
 * loss = mean_i [log(1 + exp(z_i)) - y_i z_i] + l2/2 |w|^2,  z = X w.
 * plan (see struct sgd_logreg_plan; SGD_EINVAL if out of its domain) picks the
 * path. Fused: X is read once, each block of rows' margins and gradient terms
 * computed while the block is in cache; scratch is not used (may be NULL). BLAS:
 * scratch holds n elements (z, then the residuals; SGD_EINVAL if NULL). */
int logreg_loss_grad_f32(const float *X, const float *y, int64_t n, int64_t d,
                         const float *w, float l2, float *grad, float *loss,
                         const struct sgd_logreg_plan *plan, float *scratch);
int logreg_loss_grad_f64(const double *X, const double *y, int64_t n, int64_t d,
                         const double *w, double l2, double *grad, double *loss,
                         const struct sgd_logreg_plan *plan, double *scratch);

/* ---- 2. softmax regression, fused loss + gradient -----------------------
 * X: n x d, labels: n in [0, k), W: k x d (one row per class).
 * grad: k x d (overwritten), scratch: min(n, SGD_SOFTMAX_BLOCK) * k.
 * loss = mean cross-entropy + l2/2 |W|^2. */
int softmax_loss_grad_f32(const float *X, const int32_t *labels, int64_t n,
                          int64_t d, int64_t k, const float *W, float l2,
                          float *grad, float *loss, float *scratch);
int softmax_loss_grad_f64(const double *X, const int32_t *labels, int64_t n,
                          int64_t d, int64_t k, const double *W, double l2,
                          double *grad, double *loss, double *scratch);

/* ---- 3. MLP with ReLU hidden layers, one layer at a time ----------------
 * Layer: out = act(in W^T + b), in: n x din, W: dout x din, b: dout,
 * out: n x dout; act is ReLU when relu != 0, identity otherwise. */
int dense_forward_f32(const float *in, int64_t n, int64_t din, const float *W,
                      const float *b, int64_t dout, int relu, float *out);
int dense_forward_f64(const double *in, int64_t n, int64_t din, const double *W,
                      const double *b, int64_t dout, int relu, double *out);

/* Softmax cross-entropy head on logits (n x k): loss = mean CE and
 * delta = (softmax - onehot) / n, the gradient w.r.t. the logits. */
int softmax_xent_f32(const float *logits, const int32_t *labels, int64_t n,
                     int64_t k, float *delta, float *loss);
int softmax_xent_f64(const double *logits, const int32_t *labels, int64_t n,
                     int64_t k, double *delta, double *loss);

/* Backward through one layer. delta: n x dout, the gradient w.r.t. this
 * layer's pre-activation. Writes dW = delta^T in (dout x din) and
 * db = column sums of delta (dout). If delta_in is not NULL it receives the
 * gradient w.r.t. the previous layer's pre-activation: (delta W) masked by
 * in > 0 when relu_in != 0 (in was produced by a ReLU). */
int dense_backward_f32(const float *in, const float *delta, int64_t n,
                       int64_t din, int64_t dout, const float *W, int relu_in,
                       float *dW, float *db, float *delta_in);
int dense_backward_f64(const double *in, const double *delta, int64_t n,
                       int64_t din, int64_t dout, const double *W, int relu_in,
                       double *dW, double *db, double *delta_in);

/* ---- 4. sparse logistic regression on CSR input -------------------------
 * Rows: indptr (n + 1), indices / data (nnz), feature ids in [0, d).
 * Gradient over the touched features only, as (out_idx, out_val) sorted by
 * feature id; *out_nnz receives their count (<= nnz). l2 applies to the
 * touched features (lazy regularisation). acc (d, all zero) and mark
 * (a bitmap of (d + 63) / 64 words, all zero) are scratch, returned all zero. */
int sparse_logreg_grad_f32(const int64_t *indptr, const int64_t *indices,
                           const float *data, int64_t n, int64_t d,
                           const float *y, const float *w, float l2,
                           int64_t *out_idx, float *out_val, int64_t *out_nnz,
                           float *loss, float *acc, uint64_t *mark);
int sparse_logreg_grad_f64(const int64_t *indptr, const int64_t *indices,
                           const double *data, int64_t n, int64_t d,
                           const double *y, const double *w, double l2,
                           int64_t *out_idx, double *out_val, int64_t *out_nnz,
                           double *loss, double *acc, uint64_t *mark);

/* ---- 5. vector ops for collectives and servers --------------------------*/
/* dst += src */
int sum_into_f32(float *dst, const float *src, int64_t n);
int sum_into_f64(double *dst, const double *src, int64_t n);
/* y += a x */
int axpy_f32(float a, const float *x, float *y, int64_t n);
int axpy_f64(double a, const double *x, double *y, int64_t n);
/* x *= a */
int scale_f32(float a, float *x, int64_t n);
int scale_f64(double a, double *x, int64_t n);
/* dst = src */
int copy_f32(float *dst, const float *src, int64_t n);
int copy_f64(double *dst, const double *src, int64_t n);
/* SGD with momentum and weight decay (PyTorch semantics):
 * g' = g + wd w;  v = mu v + g';  w -= lr v  (v ignored when mu == 0). */
int sgd_update_f32(float *w, const float *g, float *v, int64_t n, float lr,
                   float momentum, float weight_decay);
int sgd_update_f64(double *w, const double *g, double *v, int64_t n, double lr,
                   double momentum, double weight_decay);
/* out = (bufs[0] + ... + bufs[k-1]) / k, summed in index order. */
int average_f32(float *out, const float *const *bufs, int64_t k, int64_t n);
int average_f64(double *out, const double *const *bufs, int64_t k, int64_t n);

/* ---- 6. compression ------------------------------------------------------
 * Top-k with error feedback: acc = g + residual; the k entries of largest
 * |acc| (ties: lowest index first) go to (out_idx ascending, out_val);
 * residual = acc with those entries zeroed, so decompressed + residual ==
 * acc exactly. scratch: n. */
int topk_ef_f32(const float *g, float *residual, int64_t n, int64_t k,
                int64_t *out_idx, float *out_val, float *scratch);
int topk_ef_f64(const double *g, double *residual, int64_t n, int64_t k,
                int64_t *out_idx, double *out_val, double *scratch);

/* QSGD (Alistarh et al. 2017) with s levels, in buckets of `bucket` entries
 * (the last one may be shorter): norms[b] = |v restricted to bucket b|, one per
 * bucket ((n + bucket - 1) / bucket of them), and level_i in [-s, s] with
 * E[norms[b] * level_i / s] = v_i for i in bucket b. Random draws come from a
 * counter-based generator keyed by (seed, i), so output depends on the seed
 * only, and bucket >= n is the single-norm quantiser. */
int qsgd_quantize_f32(const float *v, int64_t n, int32_t s, int64_t bucket,
                      uint64_t seed, int32_t *levels, float *norms);
int qsgd_quantize_f64(const double *v, int64_t n, int32_t s, int64_t bucket,
                      uint64_t seed, int32_t *levels, double *norms);
/* out_i = (norms[b] / s) * levels_i for i in bucket b; every norm must be
 * finite and >= 0 (checked before anything is written). */
int qsgd_dequantize_f32(const int32_t *levels, int64_t n, int32_t s, int64_t bucket,
                        const float *norms, float *out);
int qsgd_dequantize_f64(const int32_t *levels, int64_t n, int32_t s, int64_t bucket,
                        const double *norms, double *out);
/* out[idx_j] += val_j for each j (each idx_j in [0, n)); nothing is written
 * when an index is out of range. */
int scatter_add_f32(const int64_t *idx, const float *val, int64_t nnz, float *out,
                int64_t n);
int scatter_add_f64(const int64_t *idx, const double *val, int64_t nnz, double *out,
                int64_t n);

/* ---- 7. matrix-vector and matrix-matrix, CSR and dense ------------------
 * y = A x with A m x n in CSR. */
int csr_matvec_f32(const int64_t *indptr, const int64_t *indices,
                   const float *data, int64_t m, int64_t n, const float *x,
                   float *y);
int csr_matvec_f64(const int64_t *indptr, const int64_t *indices,
                   const double *data, int64_t m, int64_t n, const double *x,
                   double *y);
/* Y = A B with A m x n in CSR, B n x k and Y m x k (row-major); the row
 * pointer and every index are checked before anything is written. */
int csr_matmat_f32(const int64_t *indptr, const int64_t *indices,
                   const float *data, int64_t m, int64_t n, const float *B,
                   int64_t k, float *Y);
int csr_matmat_f64(const int64_t *indptr, const int64_t *indices,
                   const double *data, int64_t m, int64_t n, const double *B,
                   int64_t k, double *Y);
/* y = A x with A dense (BLAS gemv). */
int dense_matvec_f32(const float *A, int64_t m, int64_t n, const float *x,
                     float *y);
int dense_matvec_f64(const double *A, int64_t m, int64_t n, const double *x,
                     double *y);

/* ---- 8. embedding tables (Wide & Deep) -----------------------------------
 * table: V x D, ids: n x k in [0, V) (a bag of k ids per row, repeats allowed).
 * out (n x D) = the sum of each bag's rows, added in order, then divided by k
 * when mean != 0. Every id is checked before anything is written (SGD_EINDEX). */
int embedding_bag_forward_f32(const float *table, int64_t V, int64_t D,
                              const int64_t *ids, int64_t n, int64_t k, int mean,
                              float *out);
int embedding_bag_forward_f64(const double *table, int64_t V, int64_t D,
                              const int64_t *ids, int64_t n, int64_t k, int mean,
                              double *out);
/* The row gradients of the u unique ids of a forward's ids: inverse (n * k) in
 * [0, u) maps ids[i][j] to its unique id (np.unique's return_inverse). out
 * (u x D) is zeroed, then out[inverse[i k + j]] += grad_out[i] (divided by k
 * when mean != 0) in (i, j) order; grad_out: n x D. Inverse checked first. */
int embedding_bag_backward_f32(const int64_t *inverse, int64_t n, int64_t k,
                               const float *grad_out, int64_t D, int mean, int64_t u,
                               float *out);
int embedding_bag_backward_f64(const int64_t *inverse, int64_t n, int64_t k,
                               const double *grad_out, int64_t D, int mean, int64_t u,
                               double *out);
/* Adagrad on the u listed rows of table (V x D), TensorFlow's form: for each
 * row r = rows[q] (distinct, in [0, V); checked before anything is written)
 * and g = grads[q] (u x D): accum[r] += g * g; table[r] -= lr g / (sqrt(accum[r])
 * + eps). lr, eps >= 0 and finite. A dense step is rows = 0..V-1: same bits. */
int adagrad_rows_f32(float *table, float *accum, int64_t V, int64_t D,
                     const int64_t *rows, int64_t u, const float *grads, float lr,
                     float eps);
int adagrad_rows_f64(double *table, double *accum, int64_t V, int64_t D,
                     const int64_t *rows, int64_t u, const double *grads, double lr,
                     double eps);
/* SGD on the listed rows: table[rows[q]] -= lr grads[q]; as adagrad_rows. */
int sgd_rows_f32(float *table, int64_t V, int64_t D, const int64_t *rows, int64_t u,
                 const float *grads, float lr);
int sgd_rows_f64(double *table, int64_t V, int64_t D, const int64_t *rows, int64_t u,
                 const double *grads, double lr);

#endif
