/* Template driver: kernels_f32.c and kernels_f64.c define REAL, FN(name),
 * the R_* math functions, LANES and BLAS(name), then include this file, which includes
 * every templated kernel family once for that type. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "kernels.h"

#include "vec.inc"
#include "logreg.inc"
#include "softmax.inc"
#include "mlp.inc"
#include "sparse.inc"
#include "compress.inc"
#include "matvec.inc"
#include "embedding.inc"
