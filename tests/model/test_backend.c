/* test_backend.c: choosing the backend (engine/backend/backend.h, config key
 * model.backend).
 *  - cpu: the default; the engine reports it.
 *  - cuda in a build without CUDA, or on a machine without a usable GPU (CI):
 *    opening the engine fails with FG_ERR_UNSUPPORTED and a message naming
 *    the reason and the way out (model.backend = cpu); nothing crashes and
 *    nothing leaks (ASan). The CUDA runtime is really called in CUDA builds.
 *  - cuda on a machine with a supported GPU: greedy tokens equal to the CPU
 *    backend's for 24 steps, and logits within 1e-3 of the largest CPU logit
 *    (F32 weights and KV: only summation order differs), on the tiny models.
 *  - cuda with expert parallelism (topology.ranks 2, in-process transport,
 *    local rank i on CUDA device i): without CUDA or a GPU for every rank it
 *    fails the same way, the message naming the rank; with two GPUs the
 *    cuda ranks give the greedy tokens of the cpu ranks and logits within
 *    1e-3 (deploy/gpu-selfcheck.sh runs it there).
 *  - a deepseek4 model on cuda is FG_ERR_UNSUPPORTED in every build ("runs
 *    deepseek2 models only" where CUDA is compiled in, with or without a GPU).
 *  - an out-of-range backend value is FG_ERR_INVALID_ARG.
 */
#include <string.h>

#include "engine/backend/backend.h"
#include "tests/model/model_test.h"

static int ep_ranks; /* topology.ranks of the engines open_with makes; 0: none */

static fg_err open_with(const char *file, int backend, int kv_format, fg_engine_t **e, fg_diag *d)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path(file);
    o.kv_format = kv_format;
    o.max_batch_tokens = 32;
    o.n_threads = 2;
    o.kv_budget_bytes = (size_t)16 << 20;
    o.backend = backend;
    o.ep_ranks = ep_ranks;
    return fg_engine_open(&o, e, d);
}

/* Greedy decode of n steps after a prompt; logits of every step into lg [n][V]. */
static int decode(fg_engine_t *e, int32_t *out, float *lg, int n, int V)
{
    fg_session_t *s;
    if (fg_session_create(e, NULL, &s) != FG_OK)
        return -1;
    int32_t prompt[12];
    test_tokens(prompt, 12, V, 3);
    fg_diag d = {{0}};
    if (fg_session_eval(s, prompt, 12, lg, false, &d) != FG_OK) {
        fprintf(stderr, "eval: %s\n", d.msg);
        fg_session_free(s);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[(size_t)i * V + v] > lg[(size_t)i * V + best])
                best = v;
        out[i] = best;
        if (i + 1 < n && fg_session_eval(s, &out[i], 1, lg + (size_t)(i + 1) * V, false, &d) != FG_OK) {
            fprintf(stderr, "eval: %s\n", d.msg);
            fg_session_free(s);
            return -1;
        }
    }
    fg_session_free(s);
    return 0;
}

static void compare_on_gpu(const char *file)
{
    enum { N = 24 };
    fg_engine_t *cpu, *gpu;
    fg_diag d = {{0}};
    CHECK(open_with(file, FG_ENGINE_BACKEND_CPU, FG_KV_F32, &cpu, &d) == FG_OK);
    if (open_with(file, FG_ENGINE_BACKEND_CUDA, FG_KV_F32, &gpu, &d) != FG_OK) {
        CHECK_MSG(0, "%s: %s", file, d.msg);
        fg_engine_close(cpu);
        return;
    }
    fg_engine_info info;
    fg_engine_get_info(gpu, &info);
    const int V = info.n_vocab;
    float *lc = malloc((size_t)N * V * sizeof(float)), *lgpu = malloc((size_t)N * V * sizeof(float));
    int32_t tc[N], tg[N];
    CHECK(lc && lgpu);
    if (lc && lgpu && decode(cpu, tc, lc, N, V) == 0 && decode(gpu, tg, lgpu, N, V) == 0) {
        float amax = 0;
        for (size_t i = 0; i < (size_t)N * V; i++)
            amax = fmaxf(amax, fabsf(lc[i]));
        const float err = max_abs_diff(lc, lgpu, (size_t)N * V) / (amax > 0 ? amax : 1);
        CHECK_MSG(err <= 1e-3f, "%s: normalised logit error %g", file, err);
        CHECK_MSG(memcmp(tc, tg, sizeof tc) == 0, "%s: greedy tokens differ", file);
        printf("%s: cuda vs cpu normalised logit error %.3g over %d steps\n", file, err, N);
    } else {
        CHECK(0);
    }
    free(lc);
    free(lgpu);
    fg_engine_close(gpu);
    fg_engine_close(cpu);
}

int main(void)
{
    fg_engine_t *e;
    fg_diag d = {{0}};
    CHECK(open_with("tiny.gguf", FG_ENGINE_BACKEND_CPU, -1, &e, &d) == FG_OK);
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    CHECK(strcmp(info.backend, "cpu") == 0);
    fg_engine_close(e);

    CHECK(open_with("tiny.gguf", 7, -1, &e, &d) == FG_ERR_INVALID_ARG);
    CHECK(strcmp(fg_backend_kind_name(FG_BACKEND_CUDA), "cuda") == 0 && fg_backend_kind_name((fg_backend_kind)9) == NULL);
    CHECK(fg_backend_compiled(FG_BACKEND_CPU));

    memset(&d, 0, sizeof d);
    fg_err err = open_with("tiny.gguf", FG_ENGINE_BACKEND_CUDA, -1, &e, &d);
    if (!fg_backend_compiled(FG_BACKEND_CUDA)) {
        CHECK(err == FG_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(d.msg, "built without CUDA") && strstr(d.msg, "model.backend"), "message: %s", d.msg);
        printf("no CUDA in this build: %s\n", d.msg);
    } else if (err != FG_OK) {
        CHECK_MSG(err == FG_ERR_UNSUPPORTED, "error %s: %s", fg_err_name(err), d.msg);
        CHECK_MSG(strstr(d.msg, "backend cuda:") != NULL, "message: %s", d.msg);
        printf("no usable GPU: %s\n", d.msg);
    } else {
        fg_engine_close(e);
        const char *models[] = {"tiny.gguf", "tiny-softmax.gguf", "tiny-groups.gguf", "tiny-lite.gguf",
                                "tiny-yarn.gguf", "tiny-bf16.gguf", "tiny-q8_0.gguf", "tiny-mxfp4.gguf"};
        for (size_t i = 0; i < sizeof models / sizeof *models; i++)
            compare_on_gpu(models[i]);
    }

    /* deepseek4 on cuda: its kernels exist (kernels/cuda/ds4_*.cu) but the V4
     * forward is not wired, so the backend refuses the model by its
     * architecture, before it looks for a GPU. */
    memset(&d, 0, sizeof d);
    err = open_with("v4-tiny.gguf", FG_ENGINE_BACKEND_CUDA, -1, &e, &d);
    CHECK_MSG(err == FG_ERR_UNSUPPORTED, "error %s: %s", fg_err_name(err), d.msg);
    if (err == FG_OK)
        fg_engine_close(e);
    else if (fg_backend_compiled(FG_BACKEND_CUDA))
        CHECK_MSG(strstr(d.msg, "deepseek2 models only") && strstr(d.msg, "deepseek4") &&
                      strstr(d.msg, "model.backend"),
                  "message: %s", d.msg);
    printf("deepseek4 on cuda: %s\n", d.msg);

    /* Expert parallelism on the cuda backend: one rank per GPU. */
    ep_ranks = 2;
    memset(&d, 0, sizeof d);
    err = open_with("tiny.gguf", FG_ENGINE_BACKEND_CUDA, -1, &e, &d);
    if (!fg_backend_compiled(FG_BACKEND_CUDA)) {
        CHECK(err == FG_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(d.msg, "built without CUDA") && strstr(d.msg, "rank 0"), "message: %s", d.msg);
        printf("ranks on cuda, no CUDA in this build: %s\n", d.msg);
    } else if (err != FG_OK) {
        CHECK_MSG(err == FG_ERR_UNSUPPORTED, "error %s: %s", fg_err_name(err), d.msg);
        CHECK_MSG(strstr(d.msg, "backend cuda:") && strstr(d.msg, "rank "), "message: %s", d.msg);
        printf("ranks on cuda, no GPU for every rank: %s\n", d.msg);
    } else {
        fg_engine_get_info(e, &info);
        CHECK_MSG(strcmp(info.backend, "cuda") == 0, "backend %s", info.backend);
        fg_engine_close(e);
        const char *ep_models[] = {"tiny.gguf", "tiny-groups.gguf", "tiny-q8_0.gguf"};
        for (size_t i = 0; i < sizeof ep_models / sizeof *ep_models; i++)
            compare_on_gpu(ep_models[i]); /* cpu ranks against cuda ranks */
    }
    return fg_test_failures ? 1 : 0;
}
