/* ds4_compress.cu: V4 compressor pooling. One thread per output channel:
 * CSA's softmax over 2r entries runs in double like the CPU reference; HCA's
 * online softmax is sequential in position order by definition, so a thread
 * walks its sequence's tokens in f32 as the CPU does. */
#include "kernels/cuda/ds4_compress.cuh"

#include "kernels/cuda/common.cuh"

#define POOL_THREADS 128

__global__ void ds4_pool_csa_kernel(fg_cuda_ds4_pool_csa_params p)
{
    const int ch = blockIdx.y * POOL_THREADS + threadIdx.x, b = blockIdx.x;
    if (ch >= p.width)
        return;
    const int w = p.width, cw = 2 * w, r = p.r;
    const size_t blk = (size_t)r * 2 * cw;
    const float *cur = p.cur + (size_t)b * blk;
    const float *prev = p.prev && (!p.has_prev || p.has_prev[b]) ? p.prev + (size_t)b * blk : NULL;
    double mx = -INFINITY;
    for (int i = 0; i < r; i++) {
        mx = fmax(mx, (double)cur[((size_t)i * 2 + 1) * cw + w + ch]);
        if (prev)
            mx = fmax(mx, (double)prev[((size_t)i * 2 + 1) * cw + ch]);
    }
    double sum = 0, acc = 0;
    for (int i = 0; i < r; i++) {
        double e = exp((double)cur[((size_t)i * 2 + 1) * cw + w + ch] - mx);
        sum += e;
        acc += e * cur[(size_t)i * 2 * cw + w + ch];
        if (prev) {
            e = exp((double)prev[((size_t)i * 2 + 1) * cw + ch] - mx);
            sum += e;
            acc += e * prev[(size_t)i * 2 * cw + ch];
        }
    }
    p.row[(size_t)b * w + ch] = (float)(acc / sum);
}

__global__ void ds4_hca_kernel(fg_cuda_ds4_hca_params p)
{
    const int ch = blockIdx.y * POOL_THREADS + threadIdx.x, s = blockIdx.x;
    if (ch >= p.D)
        return;
    const int D = p.D, n = p.n_tok[s], pos0 = p.pos0[s];
    float *st = p.state + (size_t)s * 3 * D;
    float m = st[ch], sum = st[D + ch], acc = st[2 * D + ch];
    for (int i = 0; i < n; i++) {
        const int pos = pos0 + i, slot = pos % p.ratio;
        const size_t t = (size_t)p.tok0[s] + i;
        const float sc = p.g[t * D + ch] + p.ape[(size_t)slot * D + ch], kv = p.k[t * D + ch];
        if (slot == 0) {
            m = sc, sum = 1.0f, acc = kv;
        } else {
            const float mx = sc > m ? sc : m;
            const float c = expf(m - mx), e = expf(sc - mx);
            sum = sum * c + e;
            acc = acc * c + e * kv;
            m = mx;
        }
        if (slot == p.ratio - 1)
            p.rows[((size_t)p.row0[s] + (pos / p.ratio - pos0 / p.ratio)) * D + ch] = acc / sum;
    }
    st[ch] = m, st[D + ch] = sum, st[2 * D + ch] = acc;
}

extern "C" fg_cuda_status fg_cuda_ds4_pool_csa(const fg_cuda_ds4_pool_csa_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_pool_csa_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid(p->n_blocks, (p->width + POOL_THREADS - 1) / POOL_THREADS); /* x: no 65535 limit */
    ds4_pool_csa_kernel<<<grid, POOL_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

extern "C" fg_cuda_status fg_cuda_ds4_hca(const fg_cuda_ds4_hca_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_hca_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid(p->n_seq, (p->D + POOL_THREADS - 1) / POOL_THREADS);
    ds4_hca_kernel<<<grid, POOL_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
