/* float32 instantiation of the templated kernels (see real.h). */
#define REAL float
#define FN(name) name##_f32
#define R_EXP expf
#define R_LOG logf
#define R_LOG1P log1pf
#define R_SQRT sqrtf
#define R_FABS fabsf
#define R_FLOOR floorf
/* 4 vectors of 8 floats (AVX2) or 2 of 16 (AVX-512): several independent
 * accumulators hide the FMA latency without reassociating across -ffast-math. */
#define LANES 32
#define VL 16 /* elements in one 512-bit vector */
#define BLAS(name) SGD_CBLAS(s##name) /* cblas_sgemm etc. */
#define R_BITS int32_t /* an integer of REAL's width */
#define R_INF_BITS 0x7f800000 /* the bits of +Inf */
#include "real.h"
