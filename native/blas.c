/* The BLAS thread count: process-wide state that belongs to OpenBLAS, not to the kernels. */
#include "blas.h"
#include "kernels.h"

int sgd_blas_set_threads(int n)
{
    if (n < 1)
        return SGD_EINVAL;
    SGD_OPENBLAS(set_num_threads)(n);
    return SGD_OK;
}

int sgd_blas_threads(void)
{
    return SGD_OPENBLAS(get_num_threads)();
}
