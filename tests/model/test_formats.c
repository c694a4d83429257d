/* Quantized KV-cache formats and weight types against the F32 reference path.
 *
 * Each variant is fed the F32 run's 80 tokens (16 prompt + 64 greedy), so errors
 * are measured without compounding through diverging text: the RMS and the
 * median per-position max of |dlogit|, both relative to the spread (std) of the
 * F32 logits, and greedy agreement: at how many of the 64 generated positions
 * the variant's argmax equals the F32 path's. Free-running agreement (tokens
 * until the first difference) is printed for information.
 * Errors follow each format's precision: F16 ~2^-11 relative, INT8 amax/254
 * per element, FP8 E4M3 ~2^-4 relative, FP4 E2M1 ~2^-2 relative. */
#include <string.h>

#include "kernels/cpu/vecops.h"
#include "tests/model/model_test.h"

#define P 16
#define G 64
#define N (P + G)

typedef struct variant {
    const char *model;
    int kv_format;
    float max_rms;   /* bound on the RMS of dlogit over all positions, / std(logits) */
    float max_p50;   /* bound on the median over positions of max |dlogit|, / std(logits) */
    int min_top1;    /* of the G generated positions, how many argmaxes equal the F32 path's */
} variant;

typedef struct stats {
    float rms, p50, max;
    int top1;
} stats;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Teacher-forced comparison over all N positions (both runs saw the same tokens). */
static stats compare(const float *ref, const float *got, int V, float spread)
{
    stats st = {0};
    float per_pos[N];
    double sq = 0;
    for (int p = 0; p < N; p++) {
        const float *a = ref + (size_t)p * V, *b = got + (size_t)p * V;
        per_pos[p] = max_abs_diff(a, b, (size_t)V) / spread;
        for (int i = 0; i < V; i++)
            sq += (double)(a[i] - b[i]) * (a[i] - b[i]);
        if (p >= P - 1 && p < N - 1)
            st.top1 += fg_argmax(a, V) == fg_argmax(b, V);
    }
    st.rms = (float)sqrt(sq / ((double)N * V)) / spread;
    qsort(per_pos, N, sizeof *per_pos, cmp_float);
    st.max = per_pos[N - 1];
    st.p50 = per_pos[N / 2];
    return st;
}

static float stddev(const float *x, size_t n)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    double m = s / n;
    return (float)sqrt(s2 / n - m * m);
}

/* Greedy run: prompt then G tokens; writes all N tokens. */
static void greedy_run(fg_engine_t *e, const int32_t *prompt, int32_t *out, int V)
{
    float *lg = malloc(sizeof(float) * V);
    fg_session_t *s;
    fg_diag d;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    memcpy(out, prompt, P * sizeof *out);
    CHECK(fg_session_eval(s, prompt, P, lg, false, &d) == FG_OK);
    for (int i = 0; i < G; i++) {
        out[P + i] = fg_argmax(lg, V);
        if (i + 1 < G)
            CHECK(fg_session_eval(s, &out[P + i], 1, lg, false, &d) == FG_OK);
    }
    fg_session_free(s);
    free(lg);
}

int main(void)
{
    /* Measured on the tiny model (rms/std, p50/std, top1): f16 kv 2.3e-4, 7e-4, 64;
     * int8 0.066, 0.028, 62; fp8 0.19, 0.17, 55; fp4 0.30, 0.65, 40; f16 weights
     * 8e-4, 2.7e-3, 64; bf16 0.12, 0.057, 58; q8_0 (activations quantized too)
     * 0.15, 0.12, 55; mxfp4 routed experts (E2M1 values, ~2^-2 relative, and
     * their activations quantized) 0.26, 0.66, 43, like the fp4 cache. Bounds are about twice the measured error and allow ~10%
     * fewer agreeing argmaxes: a random model has many near-ties, and a changed
     * MoE routing choice moves one position's logits by a whole std. */
    const variant variants[] = {
        {"tiny.gguf", FG_KV_F16, 1e-3f, 3e-3f, 63},
        {"tiny.gguf", FG_KV_INT8, 0.15f, 0.08f, 56},
        {"tiny.gguf", FG_KV_FP8, 0.4f, 0.35f, 48},
        {"tiny.gguf", FG_KV_FP4, 0.6f, 1.3f, 32},
        {"tiny-f16.gguf", FG_KV_F32, 3e-3f, 1e-2f, 63},
        {"tiny-bf16.gguf", FG_KV_F32, 0.25f, 0.15f, 50},
        {"tiny-q8_0.gguf", FG_KV_F32, 0.3f, 0.3f, 48},
        {"tiny-mxfp4.gguf", FG_KV_F32, 0.5f, 1.3f, 36},
    };
    fg_engine_t *ref = open_engine("tiny.gguf", FG_KV_F32, 64, 2);
    fg_engine_info info;
    fg_engine_get_info(ref, &info);
    const int V = info.n_vocab;
    int32_t prompt[P], ref_toks[N], toks[N];
    test_tokens(prompt, P, V, 3);
    greedy_run(ref, prompt, ref_toks, V);
    float *ref_lg = malloc(sizeof(float) * N * V), *lg = malloc(sizeof(float) * N * V);
    fg_session_t *s;
    fg_diag d;
    CHECK(fg_session_create(ref, NULL, &s) == FG_OK);
    CHECK(fg_session_eval(s, ref_toks, N, ref_lg, true, &d) == FG_OK);
    fg_session_free(s);
    const float spread = stddev(ref_lg, (size_t)N * V);

    fprintf(stderr, "%-16s %-5s %9s %9s %9s %9s %7s\n", "model", "kv", "rms/std", "p50/std", "max/std",
            "top1", "free");
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        const variant *v = &variants[i];
        fg_engine_t *e = open_engine(v->model, v->kv_format, 64, 2);
        CHECK(fg_session_create(e, NULL, &s) == FG_OK);
        CHECK(fg_session_eval(s, ref_toks, N, lg, true, &d) == FG_OK);
        fg_session_free(s);
        stats st = compare(ref_lg, lg, V, spread);
        greedy_run(e, prompt, toks, V);
        int agree = 0;
        while (agree < G && toks[P + agree] == ref_toks[P + agree])
            agree++;
        const char *kv = fg_kv_format_name((fg_kv_format)v->kv_format);
        fprintf(stderr, "%-16s %-5s %9.3g %9.3g %9.3g %6d/%d %4d/%d\n", v->model, kv, st.rms, st.p50, st.max,
                st.top1, G, agree, G);
        CHECK_MSG(st.rms <= v->max_rms, "%s kv %s: rms |dlogit|/std %g > %g", v->model, kv, st.rms, v->max_rms);
        CHECK_MSG(st.p50 <= v->max_p50, "%s kv %s: median position max |dlogit|/std %g > %g", v->model, kv, st.p50,
                  v->max_p50);
        CHECK_MSG(st.top1 >= v->min_top1, "%s kv %s: teacher-forced greedy agreement %d/%d < %d", v->model, kv,
                  st.top1, G, v->min_top1);
        fg_engine_close(e);
    }
    free(ref_lg);
    free(lg);
    fg_engine_close(ref);
    return TEST_DONE("test_formats");
}
