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
#include "real.h"
