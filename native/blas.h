/* OpenBLAS from the scipy-openblas64 wheel: 64-bit integers (blasint is int64_t, so no size
 * needs checking against INT_MAX), and every symbol renamed scipy_<name>64_ so that it never
 * collides with another BLAS in the process (numpy's own copy among them). */
#ifndef SGD_BLAS_H
#define SGD_BLAS_H
#include <cblas.h>

#define SGD_CBLAS(name) scipy_cblas_##name##64_
#define SGD_OPENBLAS(name) scipy_openblas_##name##64_
#endif
