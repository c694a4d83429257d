/* flashgate-quantize: writes a GGUF model with its weights in another type,
 * byte for byte as llama-quantize writes them (docs/engine.md, "Weight
 * types"), with or without an importance matrix (--imatrix, llama-imatrix's
 * output in either of its formats, engine/model/imatrix.h).
 *
 *   flashgate-quantize [options] IN.gguf OUT.gguf TYPE
 *
 * TYPE is a plain type (q8_0, q6_k, ...) or a mix (q4_k_m, q5_k_m, ...);
 * engine/model/quant_plan.h chooses each tensor's type as llama-quantize
 * does and kernels/cpu/quantize.h writes the blocks. Keys are copied
 * unchanged but general.quantization_version (2) and general.file_type (the
 * mix's LLAMA_FTYPE), which move to the end as llama-quantize moves them,
 * followed with --imatrix by the quantize.imatrix.* keys llama-quantize adds;
 * tensors are written in llama-quantize's order (llama_order), so that the
 * whole file is the bytes llama-quantize writes. Tensors that are not
 * quantized, or already of the chosen type, are copied. Every row fallback
 * is reported on stderr.
 *
 * Exit status: 0 on success, 1 on an error, 2 on a bad command line.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/clock.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/imatrix.h"
#include "engine/model/quant_plan.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"

#define MAX_THREADS 256

static void usage(FILE *f)
{
    fprintf(f, "usage: flashgate-quantize [options] IN.gguf OUT.gguf TYPE\n"
               "  TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q6_k, or a mix as llama-quantize makes it:\n"
               "        q2_k q2_k_s q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m iq4_nl iq4_xs mxfp4_moe\n"
               "        iq3_xxs iq3_xs iq3_s iq3_m iq2_xxs iq2_xs iq2_s iq2_m\n"
               "        (q2_k_s only with --imatrix; iq3_xxs, iq3_xs and iq2_* need it for their lattice tensors)\n"
               "  --imatrix FILE              importance matrix from llama-imatrix (GGUF or legacy .dat):\n"
               "                              the tensors it covers are quantized with its weights\n"
               "  --tensor-type PATTERN=TYPE  tensors whose name matches PATTERN (a POSIX extended regular\n"
               "                              expression, searched) get TYPE; repeatable, the first match wins\n"
               "  --allow-requantize          accept input tensors that are already quantized\n"
               "  --threads N                 worker threads (default 1)\n"
               "  --quiet                     no line per tensor\n");
}

static int bad(const char *msg, const char *arg)
{
    fprintf(stderr, "flashgate-quantize: %s%s%s\n(run with --help for usage)\n", msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

typedef struct job {
    const uint8_t *src;
    uint8_t *dst;
    const float *qw;      /* importance weights, ne[0] per expert, or NULL */
    int64_t expert_rows;  /* rows per expert (ne[1]): row r uses expert r / expert_rows */
    uint32_t src_type, type;
    int64_t n_per_row, row0, row1;
    uint64_t src_row_bytes, dst_row_bytes;
    int64_t bad_row; /* first row that failed, or -1 */
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    j->bad_row = -1;
    float *buf = malloc((size_t)j->n_per_row * sizeof *buf);
    if (!buf) {
        j->bad_row = j->row0;
        return NULL;
    }
    for (int64_t r = j->row0; r < j->row1; r++) {
        const float *qw = j->qw ? j->qw + (r / j->expert_rows) * j->n_per_row : NULL;
        if (fg_wtype_dequantize_row((int)j->src_type, j->src + (uint64_t)r * j->src_row_bytes, buf, j->n_per_row) ||
            fg_wtype_quantize_row_imatrix((int)j->type, buf, j->dst + (uint64_t)r * j->dst_row_bytes, j->n_per_row,
                                          qw)) {
            j->bad_row = r;
            break;
        }
    }
    free(buf);
    return NULL;
}

/* Quantizes one tensor's rows into dst with n_threads threads; returns the
 * first row that failed, or -1. */
static int64_t quantize_rows(const fg_gguf_tensor *t, uint32_t type, const float *qw, uint8_t *dst, int n_threads)
{
    const int64_t n = t->ne[0];
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int nj = n_threads < rows ? n_threads : (int)(rows > 0 ? rows : 1);
    for (int k = 0; k < nj; k++)
        jobs[k] = (job){t->data, dst, qw, t->ne[1] > 0 ? t->ne[1] : 1, t->type, type, n, rows * k / nj,
                        rows * (k + 1) / nj, fg_ggml_row_bytes(t->type, n), fg_ggml_row_bytes(type, n), -1};
    int started = 0;
    for (int k = 1; k < nj; k++, started++)
        if (pthread_create(&tid[k], NULL, run_job, &jobs[k]) != 0)
            break;
    run_job(&jobs[0]);
    for (int k = 1; k <= started; k++)
        pthread_join(tid[k], NULL);
    for (int k = started + 1; k < nj; k++) /* threads that did not start: run here */
        run_job(&jobs[k]);
    for (int k = 0; k < nj; k++)
        if (jobs[k].bad_row >= 0)
            return jobs[k].bad_row;
    return -1;
}

static bool float_type(uint32_t t)
{
    return t == FG_GGML_F32 || t == FG_GGML_F16 || t == FG_GGML_BF16;
}

typedef struct opts {
    const char *in, *out, *type, *imatrix;
    const char *overrides[64];
    int n_overrides;
    bool allow_requantize, quiet;
    int threads;
} opts;

/* llama-quantize writes the tensors in its loader's order: by the layer
 * number of "blk.N." (tensors outside the blocks first), then by name; so
 * does this tool, which makes whole files byte-identical to its output. */
static int layer_of_name(const char *name)
{
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1)
        layer = -1;
    return layer;
}

static const fg_gguf_t *sort_gguf; /* qsort has no context argument */

static int llama_order(const void *pa, const void *pb)
{
    const char *a = fg_gguf_tensor_at(sort_gguf, *(const uint64_t *)pa)->name;
    const char *b = fg_gguf_tensor_at(sort_gguf, *(const uint64_t *)pb)->name;
    int la = layer_of_name(a), lb = layer_of_name(b);
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(a, b);
}

/* The keys llama-quantize sets after general.file_type when it has an
 * importance matrix (its KV overrides; strings cut to 127 bytes as there). */
static const char *const imatrix_keys[] = {"quantize.imatrix.file", "quantize.imatrix.dataset",
                                           "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"};

static bool moved_key(const char *name, const fg_imatrix_t *im)
{
    if (strcmp(name, "general.quantization_version") == 0 || strcmp(name, "general.file_type") == 0)
        return true;
    for (size_t k = 0; im && k < sizeof imatrix_keys / sizeof imatrix_keys[0]; k++)
        if (strcmp(name, imatrix_keys[k]) == 0)
            return true;
    return false;
}

static fg_err copy_keys(const fg_gguf_t *g, fg_gguf_writer_t *w, uint32_t file_type, const fg_imatrix_t *im,
                        const char *im_path)
{
    for (uint64_t i = 0; i < fg_gguf_key_count(g); i++) {
        const char *name = fg_gguf_key_name(g, i);
        if (moved_key(name, im))
            continue;
        uint64_t len = 0;
        const void *raw = fg_gguf_key_raw(g, i, &len);
        FG_TRY(fg_gguf_writer_add_raw(w, name, (uint32_t)fg_gguf_key_type(g, i), raw, len));
    }
    FG_TRY(fg_gguf_writer_add_u32(w, "general.quantization_version", 2));
    FG_TRY(fg_gguf_writer_add_u32(w, "general.file_type", file_type));
    if (!im)
        return FG_OK;
    char cut[128];
    snprintf(cut, sizeof cut, "%s", im_path);
    FG_TRY(fg_gguf_writer_add_str(w, imatrix_keys[0], cut));
    if (fg_imatrix_dataset(im)) {
        snprintf(cut, sizeof cut, "%s", fg_imatrix_dataset(im));
        FG_TRY(fg_gguf_writer_add_str(w, imatrix_keys[1], cut));
    }
    FG_TRY(fg_gguf_writer_add_i32(w, imatrix_keys[2], (int32_t)fg_imatrix_count(im)));
    if (fg_imatrix_chunks(im) > 0)
        FG_TRY(fg_gguf_writer_add_i32(w, imatrix_keys[3], (int32_t)fg_imatrix_chunks(im)));
    return FG_OK;
}

static int run(const opts *o)
{
    fg_diag diag = {{0}};
    fg_quant_plan_t *plan = NULL;
    fg_gguf_t *g = NULL;
    fg_gguf_writer_t *w = NULL;
    fg_quant_choice *choice = NULL;
    fg_imatrix_t *im = NULL;
    const float **qw = NULL; /* per tensor: its importance weights, or NULL */
    uint64_t *order = NULL; /* file index of the k-th tensor written */
    uint8_t *buf = NULL;
    int rc = 1;
    fg_err e = fg_quant_plan_create(o->type, &plan, &diag);
    if (e) {
        fprintf(stderr, "flashgate-quantize: %s\n", diag.msg);
        return 2;
    }
    for (int i = 0; i < o->n_overrides; i++)
        if (fg_quant_plan_add_override(plan, o->overrides[i], &diag)) {
            fprintf(stderr, "flashgate-quantize: --tensor-type: %s\n", diag.msg);
            fg_quant_plan_destroy(plan);
            return 2;
        }
    if (fg_quant_plan_requires_imatrix(plan) && !o->imatrix) {
        fprintf(stderr, "flashgate-quantize: type '%s' cannot be written without an importance matrix: its Q2_K "
                        "tensors need an importance matrix (pass --imatrix FILE, llama-imatrix's output)\n", o->type);
        fg_quant_plan_destroy(plan);
        return 2;
    }
    if (o->imatrix) {
        if ((e = fg_imatrix_open_file(o->imatrix, &im, &diag))) {
            fprintf(stderr, "flashgate-quantize: --imatrix: %s (%s)\n", diag.msg, fg_err_name(e));
            fg_quant_plan_destroy(plan);
            return 1;
        }
        fg_quant_plan_set_imatrix(plan, true);
        if (!o->quiet)
            printf("imatrix %s: %zu entries (%s format), dataset %s, %lld chunks\n", o->imatrix, fg_imatrix_count(im),
                   fg_imatrix_is_legacy(im) ? "legacy" : "GGUF",
                   fg_imatrix_dataset(im) ? fg_imatrix_dataset(im) : "(none named)", (long long)fg_imatrix_chunks(im));
    }
    if ((e = fg_gguf_open_file(o->in, &g, &diag))) {
        fprintf(stderr, "flashgate-quantize: %s (%s)\n", diag.msg, fg_err_name(e));
        goto out;
    }
    if ((e = fg_quant_plan_begin(plan, g, &diag)))
        goto fail;
    const uint64_t nt = fg_gguf_tensor_count(g);
    choice = calloc(nt ? nt : 1, sizeof *choice);
    order = calloc(nt ? nt : 1, sizeof *order);
    qw = calloc(nt ? nt : 1, sizeof *qw);
    if (!choice || !order || !qw) {
        e = fg_diag_set(&diag, FG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((e = fg_gguf_writer_create(o->out, (uint32_t)fg_gguf_alignment(g), &w, &diag)) ||
        (e = copy_keys(g, w, fg_quant_plan_file_type(plan), im, o->imatrix)))
        goto fail;
    for (uint64_t i = 0; i < nt; i++)
        order[i] = i;
    sort_gguf = g;
    qsort(order, nt, sizeof *order, llama_order);
    int n_fallback = 0;
    /* choices in that order too: the layer counters advance as llama-quantize's do */
    for (uint64_t i = 0; i < nt; i++)
        if ((e = fg_quant_plan_choose(plan, fg_gguf_tensor_at(g, order[i]), &choice[order[i]], &diag)))
            goto fail;
    for (uint64_t k = 0; k < nt; k++) {
        const uint64_t i = order[k];
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        const fg_quant_choice *c = &choice[i];
        if (c->type != t->type && !float_type(t->type) && !o->allow_requantize) {
            e = fg_diag_set(&diag, FG_ERR_UNSUPPORTED, "tensor %s is %s already: requantizing it to %s loses "
                            "accuracy twice; pass --allow-requantize to do it anyway", t->name,
                            fg_ggml_type_name(t->type), fg_ggml_type_name(c->type));
            goto fail;
        }
        if (c->type != t->type && im) {
            if ((e = fg_imatrix_for_tensor(im, t, &qw[i], &diag)))
                goto fail;
            if (!qw[i] && !o->quiet)
                printf("no importance weights for %s (%s)\n", t->name, fg_imatrix_find(im, t->name, &(int64_t){0})
                       ? "the entry's size does not fit; llama-quantize ignores it for token_embd" : "no entry");
        }
        if (c->type != t->type && !qw[i] && fg_quant_plan_tensor_needs_imatrix(plan, t->name, c->type)) {
            e = fg_diag_set(&diag, FG_ERR_INVALID_ARG, "tensor %s: %s in a %s file needs importance weights and %s; "
                            "llama-quantize refuses it too", t->name, fg_ggml_type_name(c->type), o->type,
                            im ? "the importance matrix has no entry for it" : "no --imatrix was given");
            goto fail;
        }
        if (c->type != t->type && !qw[i] && fg_wtype_requires_imatrix((int)c->type)) {
            /* token_embd and output escape the rule above; ggml's quantizer would abort */
            e = fg_diag_set(&diag, FG_ERR_INVALID_ARG, "tensor %s: %s cannot be written without importance weights "
                            "(ggml's quantizer requires them) and %s", t->name, fg_ggml_type_name(c->type),
                            im ? "the importance matrix has no entry for it" : "no --imatrix was given");
            goto fail;
        }
        if (c->fallback) {
            n_fallback++;
            fprintf(stderr, "fallback: %s: rows of %lld values are not a whole number of %s blocks -> %s\n", t->name,
                    (long long)t->ne[0], fg_ggml_type_name(c->wanted), fg_ggml_type_name(c->type));
        }
        if ((e = fg_gguf_writer_add_tensor(w, t->name, c->type, t->n_dims, t->ne)))
            goto fail;
    }
    if ((e = fg_gguf_writer_begin_data(w, &diag)))
        goto fail;
    double seconds = 0, in_mb = 0;
    uint64_t total_in = 0, total_out = 0;
    for (uint64_t k = 0; k < nt; k++) {
        const uint64_t i = order[k];
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        const uint32_t type = choice[i].type;
        const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        const uint64_t nbytes = fg_ggml_row_bytes(type, t->ne[0]) * (uint64_t)rows;
        total_in += t->nbytes;
        total_out += nbytes;
        if (type == t->type) {
            if (!o->quiet)
                printf("[%4llu/%4llu] %-36s %-7s copied\n", (unsigned long long)k + 1, (unsigned long long)nt,
                       t->name, fg_ggml_type_name(t->type));
            if ((e = fg_gguf_writer_write_tensor(w, t->data, t->nbytes, &diag)))
                goto fail;
            continue;
        }
        if (!fg_wtype_quantizes((int)type)) {
            e = fg_diag_set(&diag, FG_ERR_UNSUPPORTED, "tensor %s: type %s is not written by this build", t->name,
                            fg_ggml_type_name(type));
            goto fail;
        }
        free(buf);
        buf = malloc(nbytes ? nbytes : 1);
        if (!buf) {
            e = fg_diag_set(&diag, FG_ERR_NOMEM, "out of memory for tensor %s (%llu bytes)", t->name,
                            (unsigned long long)nbytes);
            goto fail;
        }
        const double t0 = fg_clock_mono_s();
        int64_t bad_row = quantize_rows(t, type, qw[i], buf, o->threads);
        const double dt = fg_clock_mono_s() - t0;
        if (bad_row >= 0) {
            e = fg_diag_set(&diag, FG_ERR_INVALID_ARG, "tensor %s, row %lld: cannot be read as %s or holds a NaN or "
                            "an infinity; nothing written", t->name, (long long)bad_row, fg_ggml_type_name(t->type));
            goto fail;
        }
        int64_t bad_block = -1;
        if (fg_wtype_validate_rows((int)type, buf, t->ne[0], rows, &bad_row, &bad_block) != 0) {
            /* as llama-quantize's ggml_validate_row_data: values too large for the F16 scales */
            e = fg_diag_set(&diag, FG_ERR_INVALID_ARG, "tensor %s, row %lld, block %lld: its values are too large "
                            "for %s's F16 scales (the block would not be finite); nothing written", t->name,
                            (long long)bad_row, (long long)bad_block, fg_ggml_type_name(type));
            goto fail;
        }
        seconds += dt;
        in_mb += (double)t->ne[0] * (double)rows * 4 / 1e6;
        if (!o->quiet)
            printf("[%4llu/%4llu] %-36s %-7s -> %-7s%s%s %8.3f MB -> %8.3f MB\n", (unsigned long long)k + 1,
                   (unsigned long long)nt, t->name, fg_ggml_type_name(t->type), fg_ggml_type_name(type),
                   choice[i].manual ? " (override)" : choice[i].fallback ? " (fallback)" : "",
                   qw[i] ? " (imatrix)" : "", t->nbytes / 1e6, nbytes / 1e6);
        if ((e = fg_gguf_writer_write_tensor(w, buf, nbytes, &diag)))
            goto fail;
    }
    if ((e = fg_gguf_writer_finish(w, &diag)))
        goto fail;
    printf("%s: %.3f MB -> %.3f MB, %d fallback%s; quantized %.3f MB of f32 values in %.3f s (%.1f MB/s, %d "
           "thread%s)\n",
           o->out, total_in / 1e6, total_out / 1e6, n_fallback, n_fallback == 1 ? "" : "s", in_mb, seconds,
           seconds > 0 ? in_mb / seconds : 0.0, o->threads, o->threads == 1 ? "" : "s");
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "flashgate-quantize: %s (%s)\n", diag.msg, fg_err_name(e));
out:
    free(buf);
    free(qw);
    fg_imatrix_destroy(im);
    free(order);
    free(choice);
    fg_gguf_writer_destroy(w);
    fg_gguf_close(g);
    fg_quant_plan_destroy(plan);
    return rc;
}

int main(int argc, char **argv)
{
    opts o = {.threads = 1};
    const char *pos[3];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--tensor-type") == 0) {
            if (i + 1 >= argc)
                return bad("--tensor-type wants PATTERN=TYPE", NULL);
            if (o.n_overrides == (int)(sizeof o.overrides / sizeof o.overrides[0]))
                return bad("too many --tensor-type options", NULL);
            o.overrides[o.n_overrides++] = argv[++i];
        } else if (strcmp(a, "--imatrix") == 0) {
            if (i + 1 >= argc)
                return bad("--imatrix wants a file", NULL);
            o.imatrix = argv[++i];
        } else if (strcmp(a, "--allow-requantize") == 0) {
            o.allow_requantize = true;
        } else if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
        } else if (strcmp(a, "--threads") == 0) {
            char *end = NULL;
            if (i + 1 >= argc)
                return bad("--threads wants a number", NULL);
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > MAX_THREADS)
                return bad("--threads wants a number from 1 to 256, not", argv[i]);
            o.threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option", a);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            return bad("too many arguments:", a);
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        return 2;
    }
    o.in = pos[0];
    o.out = pos[1];
    o.type = pos[2];
    return run(&o);
}
