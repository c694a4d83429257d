/* common.cuh: what every CUDA op shares: the status codes launchers return
 * (never abort), and a checked launch helper. */
#ifndef FG_CUDA_COMMON_CUH
#define FG_CUDA_COMMON_CUH

#include <cuda_runtime.h>

/* Launcher results: 0 is success; the rest say why nothing ran. */
typedef enum fg_cuda_status {
    FG_CUDA_OK = 0,
    FG_CUDA_BAD_SHAPE = 1,     /* a dimension is zero, negative or too large */
    FG_CUDA_BAD_POINTER = 2,   /* NULL or misaligned device pointer */
    FG_CUDA_LAUNCH_FAILED = 3, /* the runtime rejected the launch (cudaGetLastError) */
} fg_cuda_status;

static inline fg_cuda_status fg_cuda_check_launch(void)
{
    return cudaGetLastError() == cudaSuccess ? FG_CUDA_OK : FG_CUDA_LAUNCH_FAILED;
}

#endif
