/* float64 instantiation of the templated kernels (see real.h). */
#define REAL double
#define FN(name) name##_f64
#define R_EXP exp
#define R_LOG log
#define R_LOG1P log1p
#define R_SQRT sqrt
#define R_FABS fabs
#define R_FLOOR floor
#define LANES 16
#define VL 8 /* elements in one 512-bit vector */
#define BLAS(name) SGD_CBLAS(d##name) /* cblas_dgemm etc. */
#define R_BITS int64_t /* an integer of REAL's width */
#define R_INF_BITS 0x7ff0000000000000 /* the bits of +Inf */
#include "real.h"
