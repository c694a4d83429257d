/* launch_check.h: the host side shared by every CUDA op, in plain C with no
 * CUDA header, so that the checks made before each launch compile and are
 * unit-tested on machines without CUDA (tests/unit/test_cuda_launch_check.c).
 *
 * Convention: each op's header (kernels/cuda/<op>.cuh) declares a params
 * struct, fg_cuda_<op>_check(params, sm) and the launcher fg_cuda_<op>(params,
 * launch). The launcher runs the check first and launches nothing unless it
 * returns FG_CUDA_OK; no launcher aborts or exits. kernels/ sits below config/,
 * so these return fg_cuda_status; the engine's CUDA backend turns a status
 * into an fg_err with a message (engine/backend/cuda/).
 *
 * Thread safety: pure functions.
 */
#ifndef FG_CUDA_LAUNCH_CHECK_H
#define FG_CUDA_LAUNCH_CHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launcher results: 0 is success; the rest say why nothing ran. */
typedef enum fg_cuda_status {
    FG_CUDA_OK = 0,
    FG_CUDA_BAD_SHAPE = 1,     /* a dimension is zero, negative or above the op's limit */
    FG_CUDA_BAD_POINTER = 2,   /* a NULL or misaligned device pointer */
    FG_CUDA_BAD_TYPE = 3,      /* a weight type or KV format the op does not handle */
    FG_CUDA_BAD_ARCH = 4,      /* the device is not one this build has kernels for */
    FG_CUDA_LAUNCH_FAILED = 5, /* the runtime rejected the launch (cudaGetLastError) */
} fg_cuda_status;

/* "ok", "bad_shape", ...; "unknown" when out of range. */
const char *fg_cuda_status_name(fg_cuda_status s);

/* Where a launch goes: the device's compute capability (major * 10 + minor,
 * e.g. 90 for H100/H200, 100 for B200, 103 for B300/GB300) and the stream
 * (a cudaStream_t; NULL is the legacy default stream). */
typedef struct fg_cuda_launch {
    int sm;
    struct CUstream_st *stream;
} fg_cuda_launch;

/* 1 when this build carries kernels for compute capability sm: the "a"
 * (architecture-specific) targets sm_90a and sm_100a, and sm_103a when the
 * toolkit that built them knew it. Such code runs on exactly that capability. */
int fg_cuda_arch_supported(int sm);

/* 1 when p is non-NULL and a multiple of align bytes. */
int fg_cuda_aligned(const void *p, size_t align);

#ifdef __cplusplus
}
#endif

#endif
