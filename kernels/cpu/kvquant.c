/* kvquant.c: the latent KV cache row formats of kvquant.h.
 *
 * Scales are stored unaligned (rows are packed back to back), so they are read
 * and written with memcpy. Quantization divides by the scale rather than
 * multiplying by a reciprocal: one rounding fewer, and these rows are short.
 * No input makes the conversions undefined: NaN quantizes to 0 in INT8 and FP4
 * and stays NaN in FP8; out-of-range values saturate.
 */
#include "kernels/cpu/kvquant.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/kvquant_isa.h"
#include "kernels/cpu/numeric.h"

static const char *const format_names[FG_KV__COUNT] = {"f32", "f16", "int8", "fp8", "fp4"};

const char *fg_kv_format_name(fg_kv_format f)
{
    if ((int)f < 0 || f >= FG_KV__COUNT)
        return NULL;
    return format_names[f];
}

int fg_kv_format_parse(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < FG_KV__COUNT; i++)
        if (strcmp(name, format_names[i]) == 0)
            return i;
    return -1;
}

size_t fg_kv_bytes(fg_kv_format f, int n)
{
    if (n <= 0)
        return 0;
    switch (f) {
    case FG_KV_F32:
        return (size_t)n * 4;
    case FG_KV_F16:
        return (size_t)n * 2;
    case FG_KV_INT8:
    case FG_KV_FP8:
        return (size_t)n + 4;
    case FG_KV_FP4:
        if (n % 16)
            return 0;
        return (size_t)n / 2 + (size_t)n / 16;
    default:
        return 0;
    }
}

static float amax_of(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = fmaxf(m, fabsf(x[i])); /* fmaxf skips NaN */
    return m;
}

static int8_t round_i8(float v)
{
    if (v != v)
        return 0;
    if (v >= 127.0f)
        return 127;
    if (v <= -127.0f)
        return -127;
    return (int8_t)roundf(v);
}

/* The FP4 block scale: the smallest E4M3 value s with amax / s <= 6, so that no
 * element saturates (E4M3 rounding of amax/6, then rounded up). 0 for amax == 0;
 * 448 when even that is too small (amax > 2688: those elements saturate). */
static uint8_t fp4_scale(float amax)
{
    if (!(amax > 0.0f))
        return 0;
    uint8_t e = fg_f32_to_e4m3(amax / 6.0f);
    if (e == 0)
        e = 1; /* below the smallest subnormal: take it */
    while (e < 0x7e && amax / fg_e4m3_to_f32(e) > 6.0f)
        e++; /* codes 1..0x7e are increasing positive values */
    /* E4M3 rounding may have gone up already; step down while the smaller value still fits */
    while (e > 1 && amax / fg_e4m3_to_f32((uint8_t)(e - 1)) <= 6.0f)
        e--;
    return e;
}

void fg_kv_quantize(fg_kv_format f, const float *x, int n, void *dst)
{
    fg_kv_quantize_isa(FG_ISA_AUTO, f, x, n, dst);
}

void fg_kv_quantize_isa(fg_isa isa, fg_kv_format f, const float *x, int n, void *dst)
{
    uint8_t *out = dst;
    if (n <= 0)
        return;
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    const int avx512 = isa == FG_ISA_AVX512 && fg_isa_supported(FG_ISA_AVX512);
    switch (f) {
    case FG_KV_F32:
        memcpy(out, x, (size_t)n * 4);
        break;
    case FG_KV_F16:
        for (int i = 0; i < n; i++) {
            const uint16_t h = fg_f32_to_f16(x[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        break;
    case FG_KV_INT8: {
        const float scale = amax_of(x, n) / 127.0f;
        memcpy(out, &scale, 4);
        int8_t *q = (int8_t *)(out + 4);
        for (int i = 0; i < n; i++)
            q[i] = scale != 0.0f ? round_i8(x[i] / scale) : 0;
        break;
    }
    case FG_KV_FP8: {
        const float scale = amax_of(x, n) / 448.0f;
        memcpy(out, &scale, 4);
        for (int i = 0; i < n; i++)
            out[4 + i] = scale != 0.0f ? fg_f32_to_e4m3(x[i] / scale) : 0;
        break;
    }
    case FG_KV_FP4: {
        if (n % 16)
            return;
        uint8_t *scales = out + n / 2;
        memset(out, 0, (size_t)n / 2);
        for (int k = 0; k < n / 16; k++) {
            const float *xb = x + 16 * k;
            const uint8_t se = fp4_scale(avx512 ? fg_kv_amax16_avx512(xb) : amax_of(xb, 16));
            scales[k] = se;
            if (se == 0)
                continue; /* codes stay 0 */
            const float s = fg_e4m3_to_f32(se);
            if (avx512) {
                fg_kv_fp4_codes16_avx512(xb, s, out + 8 * k);
                continue;
            }
            for (int j = 0; j < 16; j++) {
                const uint8_t c = fg_f32_to_e2m1(xb[j] / s);
                out[8 * k + j / 2] |= (uint8_t)((j & 1) ? c << 4 : c);
            }
        }
        break;
    }
    default:
        break;
    }
}

/* fg_e4m3_to_f32 of every byte, as a table: FP8 rows are decoded for every
 * cached row that attention reads, and a lookup is several times cheaper than
 * the call (the same values). */
static float e4m3_values[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_build(void)
{
    for (int v = 0; v < 256; v++)
        e4m3_values[v] = fg_e4m3_to_f32((uint8_t)v);
}

void fg_kv_dequantize(fg_kv_format f, const void *src, int n, float *y)
{
    const uint8_t *in = src;
    if (n <= 0)
        return;
    switch (f) {
    case FG_KV_F32:
        memcpy(y, in, (size_t)n * 4);
        break;
    case FG_KV_F16:
        for (int i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            y[i] = fg_f16_to_f32(h);
        }
        break;
    case FG_KV_INT8: {
        float scale;
        memcpy(&scale, in, 4);
        const int8_t *q = (const int8_t *)(in + 4);
        for (int i = 0; i < n; i++)
            y[i] = scale * (float)q[i];
        break;
    }
    case FG_KV_FP8: {
        float scale;
        memcpy(&scale, in, 4);
        if (fg_isa_best() == FG_ISA_AVX512) {
            fg_kv_fp8_dequant_avx512(in + 4, scale, n, y);
            break;
        }
        pthread_once(&e4m3_once, e4m3_build);
        for (int i = 0; i < n; i++)
            y[i] = scale * e4m3_values[in[4 + i]];
        break;
    }
    case FG_KV_FP4: {
        if (n % 16)
            return;
        if (fg_isa_best() == FG_ISA_AVX512) {
            fg_kv_fp4_dequant_avx512(in, n, y);
            break;
        }
        /* fg_e2m1_to_f32 of every code, as a table: this runs for every cached row
         * in attention, and a lookup is several times cheaper than the call. */
        static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
        const uint8_t *scales = in + n / 2;
        pthread_once(&e4m3_once, e4m3_build);
        for (int k = 0; k < n / 16; k++) {
            const float s = e4m3_values[scales[k]];
            const uint8_t *b = in + 8 * k;
            float *o = y + 16 * k;
            for (int j = 0; j < 8; j++) {
                o[2 * j] = s * e2m1[b[j] & 15];
                o[2 * j + 1] = s * e2m1[b[j] >> 4];
            }
        }
        break;
    }
    default:
        break;
    }
}
