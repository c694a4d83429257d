/* convert.cuh: device versions of the reference conversions of
 * kernels/cpu/numeric.h and the KV row formats of kernels/cpu/kvquant.h.
 * The narrowing conversions are the same integer rounding as numeric.c, so
 * the GPU writes the same bytes as the CPU; device code only. */
#ifndef FG_CUDA_CONVERT_CUH
#define FG_CUDA_CONVERT_CUH

#include "kernels/cuda/common.cuh"

static __device__ __forceinline__ uint32_t fg_d_round_minifloat(uint32_t ax, int mbits, int bias)
{
    const int e = (int)(ax >> 23);
    if (e == 0)
        return 0;
    const uint64_t mant = (ax & 0x7fffffu) | 0x800000u;
    const int te = e - 127 + bias;
    int shift = 23 - mbits;
    uint64_t base = 0;
    if (te >= 1)
        base = (uint64_t)(te - 1) << mbits;
    else
        shift += 1 - te;
    if (shift > 40)
        return 0;
    uint64_t q = mant >> shift;
    const uint64_t rem = mant & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint32_t)(base + q);
}

static __device__ __forceinline__ float fg_d_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f)
        return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        const float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}

static __device__ __forceinline__ uint16_t fg_d_f32_to_f16(float f)
{
    const uint32_t x = __float_as_uint(f), ax = x & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if (ax > 0x7f800000u) {
        const uint16_t m = (uint16_t)((ax >> 13) & 0x3ff);
        return (uint16_t)(sign | 0x7c00 | (m ? m : 0x200));
    }
    if (ax == 0x7f800000u)
        return (uint16_t)(sign | 0x7c00);
    uint32_t code = fg_d_round_minifloat(ax, 10, 15);
    if (code >= 0x7c00)
        code = 0x7c00;
    return (uint16_t)(sign | code);
}

static __device__ __forceinline__ float fg_d_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

static __device__ __forceinline__ float fg_d_e4m3_to_f32(uint8_t v)
{
    const int sign = v & 0x80, exp = (v >> 3) & 0xf, mant = v & 7;
    if (exp == 0xf && mant == 7)
        return __uint_as_float(0x7fc00000u | ((uint32_t)sign << 24));
    const float mag = exp == 0 ? (float)mant * (1.0f / 512.0f)
                               : __uint_as_float((uint32_t)(exp + 120) << 23 | (uint32_t)mant << 20);
    return sign ? -mag : mag;
}

static __device__ __forceinline__ uint8_t fg_d_f32_to_e4m3(float f)
{
    const uint32_t x = __float_as_uint(f), ax = x & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    if (ax > 0x7f800000u)
        return (uint8_t)(sign | 0x7f);
    if (ax >= 0x43e00000u)
        return (uint8_t)(sign | 0x7e);
    uint32_t code = fg_d_round_minifloat(ax, 3, 7);
    if (code > 0x7e)
        code = 0x7e;
    return (uint8_t)(sign | code);
}

static __device__ __forceinline__ float fg_d_e2m1_to_f32(uint8_t code)
{
    const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = mags[code & 7];
    return (code & 8) ? -m : m;
}

static __device__ __forceinline__ uint8_t fg_d_f32_to_e2m1(float f)
{
    const uint32_t x = __float_as_uint(f), ax = x & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((x >> 28) & 0x8);
    if (ax > 0x7f800000u)
        return 0;
    if (ax >= 0x40c00000u)
        return (uint8_t)(sign | 7);
    uint32_t code = fg_d_round_minifloat(ax, 1, 1);
    if (code > 7)
        code = 7;
    return (uint8_t)(sign | code);
}

/* MXFP4: the scale of a block for ggml's doubled E2M1 values, 2^(e - 128)
 * (half the E8M0 scale), NaN for e = 0xFF; bit for bit the CPU's
 * fg_mxfp4_half_scale (kernels/cpu/matmul_isa.h). */
static __device__ __forceinline__ float fg_d_mxfp4_half_scale(uint8_t e)
{
    return __uint_as_float(e == 0xff ? 0x7fc00000u : e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}

/* x rounded half away from zero into [-127, 127]; NaN gives 0 (numeric.c q8_round). */
static __device__ __forceinline__ int8_t fg_d_round_i8(float v)
{
    if (v != v)
        return 0;
    if (v >= 127.0f)
        return 127;
    if (v <= -127.0f)
        return -127;
    return (int8_t)roundf(v);
}

/* An f32 stored at any byte address (the INT8/FP8 segment scales are packed). */
static __device__ __forceinline__ float fg_d_load_f32_unaligned(const uint8_t *p)
{
    return __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static __device__ __forceinline__ void fg_d_store_f32_unaligned(uint8_t *p, float f)
{
    const uint32_t u = __float_as_uint(f);
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

/* Element i of a stored KV segment of n channels (kvquant.h formats;
 * 0 = F32, 1 = F16, 2 = INT8, 3 = FP8, 4 = FP4). seg_scale is the segment's
 * f32 scale for INT8/FP8, read once by the caller (fg_d_kv_scale). */
static __device__ __forceinline__ float fg_d_kv_scale(int format, const uint8_t *seg)
{
    return format == 2 || format == 3 ? fg_d_load_f32_unaligned(seg) : 1.0f;
}

static __device__ __forceinline__ float fg_d_kv_load(int format, const uint8_t *seg, int n, int i, float seg_scale)
{
    switch (format) {
    case 0:
        return fg_d_load_f32_unaligned(seg + 4 * i);
    case 1:
        return fg_d_f16_to_f32((uint16_t)(seg[2 * i] | seg[2 * i + 1] << 8));
    case 2:
        return seg_scale * (float)(int8_t)seg[4 + i];
    case 3:
        return seg_scale * fg_d_e4m3_to_f32(seg[4 + i]);
    default: {
        const uint8_t b = seg[i / 2];
        return fg_d_e4m3_to_f32(seg[n / 2 + i / 16]) * fg_d_e2m1_to_f32((i & 1) ? b >> 4 : b & 15);
    }
    }
}

#endif
