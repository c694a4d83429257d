/* kv_write.cu: one warp per (token, segment): the segment's absolute maximum
 * by a warp reduction, then each lane writes its channels (FP4: its 16-channel
 * blocks), with the conversions and rounding of kernels/cpu/kvquant.c. */
#include "kernels/cuda/kv_write.cuh"

#include "kernels/cuda/convert.cuh"

/* The FP4 block scale rule of kvquant.c fp4_scale(). */
static __device__ uint8_t fp4_scale(float amax)
{
    if (!(amax > 0.0f))
        return 0;
    uint8_t e = fg_d_f32_to_e4m3(amax / 6.0f);
    if (e == 0)
        e = 1;
    while (e < 0x7e && amax / fg_d_e4m3_to_f32(e) > 6.0f)
        e++;
    while (e > 1 && amax / fg_d_e4m3_to_f32((uint8_t)(e - 1)) <= 6.0f)
        e--;
    return e;
}

static __device__ void write_segment(int format, const float *x, int n, uint8_t *out)
{
    const int lane = threadIdx.x % 32;
    switch (format) {
    case 0:
        for (int i = lane; i < n; i += 32)
            fg_d_store_f32_unaligned(out + 4 * i, x[i]);
        break;
    case 1:
        for (int i = lane; i < n; i += 32) {
            const uint16_t h = fg_d_f32_to_f16(x[i]);
            out[2 * i] = (uint8_t)h;
            out[2 * i + 1] = (uint8_t)(h >> 8);
        }
        break;
    case 2:
    case 3: {
        float amax = 0.0f;
        for (int i = lane; i < n; i += 32)
            amax = fmaxf(amax, fabsf(x[i]));
        amax = fg_warp_max(amax);
        const float scale = amax / (format == 2 ? 127.0f : 448.0f);
        if (lane == 0)
            fg_d_store_f32_unaligned(out, scale);
        for (int i = lane; i < n; i += 32) {
            uint8_t q = 0;
            if (scale != 0.0f)
                q = format == 2 ? (uint8_t)fg_d_round_i8(x[i] / scale) : fg_d_f32_to_e4m3(x[i] / scale);
            out[4 + i] = q;
        }
        break;
    }
    default: /* FP4 */
        for (int k = lane; k < n / 16; k += 32) {
            const float *xb = x + 16 * k;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                amax = fmaxf(amax, fabsf(xb[j]));
            const uint8_t se = fp4_scale(amax);
            out[n / 2 + k] = se;
            const float s = se ? fg_d_e4m3_to_f32(se) : 0.0f;
            for (int j = 0; j < 8; j++) {
                uint8_t lo = 0, hi = 0;
                if (se) {
                    lo = fg_d_f32_to_e2m1(xb[2 * j] / s);
                    hi = fg_d_f32_to_e2m1(xb[2 * j + 1] / s);
                }
                out[8 * k + j] = (uint8_t)(lo | hi << 4);
            }
        }
        break;
    }
}

__global__ void kv_write_kernel(fg_cuda_kv_write_params p)
{
    const int t = blockIdx.x, seg = threadIdx.x / 32;
    const float *src = p.src + (int64_t)t * p.src_stride;
    uint8_t *row = p.rows[t] + p.layer_offset;
    if (seg == 0)
        write_segment(p.format, src, p.kv_lora, row);
    else
        write_segment(p.format, src + p.kv_lora, p.n_rope, row + p.latent_bytes);
}

extern "C" fg_cuda_status fg_cuda_kv_write(const fg_cuda_kv_write_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_kv_write_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    kv_write_kernel<<<p->n_tok, 64, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
