/* The CPU expert compute behind engine/backend/moe_compute.h (what every
 * expert-parallel rank on the cpu backend runs) on the tiny models (F32 and
 * Q8_0 experts): rows received in a scrambled order, grouped by three of the
 * model's experts (one slot with no rows), must come out at their receive
 * positions bit for bit equal to the expert products run directly on each
 * expert's rows gathered in group order (the path moe_ep took before the
 * interface), and within 1e-4 of one row at a time; a row outside every
 * group is left untouched; more rows per expert than the compute was made
 * for is refused. The layout the GPU compute hands its grouped kernels
 * (fg_moe_rows_by_expert: segments by ascending expert id) holds the same
 * rows per expert, and its data flow run here with the CPU products gives
 * the same results; a slot holding an expert twice, a row out of range and
 * more rows than room are refused. */
#include <math.h>
#include <string.h>

#include "engine/backend/moe_compute.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "kernels/cpu/vecops.h"
#include "tests/model/model_test.h"

#define ROWS 11
#define STRIDE_PAD 3 /* the rows sit (d + STRIDE_PAD) floats apart, as moe_ep's carry an id before them */

/* down(silu(gate(x)) * up(x)) of expert e over the m rows of x, as one batch. */
static void direct(const fg_layer *ly, int e, const float *x, int m, int d, int F, float *y)
{
    float *g = malloc(sizeof(float) * (size_t)m * F), *u = malloc(sizeof(float) * (size_t)m * F);
    size_t mm = 0;
    const fg_weight *ws[] = {&ly->gate_exps, &ly->up_exps, &ly->down_exps};
    for (int i = 0; i < 3; i++) {
        size_t b = fg_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, m);
        mm = b > mm ? b : mm;
    }
    void *scratch = NULL;
    CHECK(posix_memalign(&scratch, 64, mm ? mm : 64) == 0); /* fg_matmul wants 64-byte aligned scratch */
    const uint8_t *gw = (const uint8_t *)ly->gate_exps.data + (size_t)e * ly->gate_exps.mat_bytes;
    const uint8_t *uw = (const uint8_t *)ly->up_exps.data + (size_t)e * ly->up_exps.mat_bytes;
    const uint8_t *dw = (const uint8_t *)ly->down_exps.data + (size_t)e * ly->down_exps.mat_bytes;
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, ly->gate_exps.type, gw, d, F, x, m, g, scratch) == 0);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, ly->up_exps.type, uw, d, F, x, m, u, scratch) == 0);
    for (int j = 0; j < m; j++)
        fg_silu_mul_isa(FG_ISA_AUTO, g + (size_t)j * F, u + (size_t)j * F, F); /* as the compute (FG_ISA_AUTO) */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, ly->down_exps.type, dw, F, d, g, m, y, scratch) == 0);
    free(g);
    free(u);
    free(scratch);
}

static void check_model(const char *file)
{
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_model *m;
    CHECK_MSG(fg_gguf_open_file(model_path(file), &g, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(fg_model_load(g, &m, &d) == FG_OK, "%s", d.msg);
    const fg_layer *ly = NULL;
    int ly_il = -1;
    for (int il = 0; il < m->hp.n_layer && !ly; il++)
        if (m->layers[il].is_moe) {
            ly = &m->layers[il];
            ly_il = il;
        }
    CHECK(ly != NULL && m->hp.n_expert >= 4);
    const int dd = m->hp.n_embd, F = m->hp.n_ff_exp, E = m->hp.n_expert;
    const size_t stride = (size_t)dd + STRIDE_PAD;

    float *x = malloc(sizeof(float) * ROWS * stride);
    float *y = malloc(sizeof(float) * ROWS * (size_t)dd);
    float *want = malloc(sizeof(float) * ROWS * (size_t)dd);
    float *one = malloc(sizeof(float) * (size_t)dd);
    float *xe = malloc(sizeof(float) * ROWS * (size_t)dd), *ye = malloc(sizeof(float) * ROWS * (size_t)dd);
    for (size_t i = 0; i < ROWS * stride; i++)
        x[i] = sinf(0.37f * (float)i) * 0.5f;
    for (size_t i = 0; i < ROWS * (size_t)dd; i++)
        y[i] = want[i] = -7.0f; /* the sentinel row ROWS - 1 must keep it */

    /* Slots: experts E - 1, 0 (no rows), 2. Groups: E - 1 gets rows 4, 0, 7, 9, 1; expert 2 gets 3, 8, 2, 5, 6. */
    const int expert[3] = {E - 1, 0, 2};
    const int seg[4] = {0, 5, 5, 10};
    const int row[10] = {4, 0, 7, 9, 1, 3, 8, 2, 5, 6};
    for (int s = 0; s < 3; s++) {
        const int begin = seg[s], n = seg[s + 1] - begin;
        if (n == 0)
            continue;
        for (int j = 0; j < n; j++)
            memcpy(xe + (size_t)j * dd, x + (size_t)row[begin + j] * stride, sizeof(float) * (size_t)dd);
        direct(ly, expert[s], xe, n, dd, F, ye);
        for (int j = 0; j < n; j++)
            memcpy(want + (size_t)row[begin + j] * dd, ye + (size_t)j * dd, sizeof(float) * (size_t)dd);
    }

    fg_moe_compute *c;
    CHECK_MSG(fg_moe_compute_cpu_create(&m->base, 5, NULL, FG_ISA_AUTO, &c, &d) == FG_OK, "%s", d.msg);
    const fg_moe_rows r = {.n_rows = ROWS, .x = x, .x_stride = stride, .n_slots = 3, .expert = expert, .seg = seg,
                           .row = row, .y = y};
    CHECK_MSG(c->run(c, ly_il, &r, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(memcmp(y, want, sizeof(float) * ROWS * (size_t)dd) == 0, "%s: not bit-identical to the direct products",
              file);
    /* Each row alone: the same values within the kernels' batch-size rounding. */
    float worst = 0;
    for (int s = 0; s < 3; s++)
        for (int p = seg[s]; p < seg[s + 1]; p++) {
            direct(ly, expert[s], x + (size_t)row[p] * stride, 1, dd, F, one);
            const float e = max_abs_diff(one, y + (size_t)row[p] * dd, (size_t)dd);
            worst = e > worst ? e : worst;
        }
    CHECK_MSG(worst <= 1e-4f, "%s: %g from one row at a time", file, (double)worst);
    CHECK(y[(size_t)(ROWS - 1) * dd] == -7.0f && y[(size_t)ROWS * dd - 1] == -7.0f);

    /* The GPU compute's layout: expert 2's rows, then expert E - 1's; every other segment empty. */
    int *slot_of = malloc(sizeof(int) * (size_t)E), *bseg = malloc(sizeof(int) * (size_t)(E + 1)), srow[ROWS];
    CHECK(fg_moe_rows_by_expert(&r, E, ROWS, slot_of, bseg, srow, &d) == 10);
    const int want_rows[10] = {3, 8, 2, 5, 6, 4, 0, 7, 9, 1};
    CHECK(memcmp(srow, want_rows, sizeof want_rows) == 0);
    for (int e = 0; e <= E; e++)
        CHECK_MSG(bseg[e] == (e <= 2 ? 0 : e < E ? 5 : 10), "segment %d starts at %d", e, bseg[e]);
    float *y2 = malloc(sizeof(float) * ROWS * (size_t)dd);
    for (size_t i = 0; i < ROWS * (size_t)dd; i++)
        y2[i] = -7.0f;
    for (int e = 0; e < E; e++) { /* as the grouped kernels: each expert over its sorted rows */
        const int n = bseg[e + 1] - bseg[e];
        if (n == 0)
            continue;
        for (int j = 0; j < n; j++)
            memcpy(xe + (size_t)j * dd, x + (size_t)srow[bseg[e] + j] * stride, sizeof(float) * (size_t)dd);
        direct(ly, e, xe, n, dd, F, ye);
        for (int j = 0; j < n; j++)
            memcpy(y2 + (size_t)srow[bseg[e] + j] * dd, ye + (size_t)j * dd, sizeof(float) * (size_t)dd);
    }
    CHECK_MSG(memcmp(y2, want, sizeof(float) * ROWS * (size_t)dd) == 0, "%s: the by-expert layout's results differ",
              file);
    CHECK(fg_moe_rows_by_expert(&r, E, 9, slot_of, bseg, srow, &d) == -1 && strstr(d.msg, "room for 9"));
    const int twice[3] = {2, 0, 2};
    fg_moe_rows bad_r = r;
    bad_r.expert = twice;
    CHECK(fg_moe_rows_by_expert(&bad_r, E, ROWS, slot_of, bseg, srow, &d) == -1 && strstr(d.msg, "twice"));
    const int far_row[10] = {4, 0, 7, 9, 1, 3, 8, 2, 5, ROWS};
    bad_r = r;
    bad_r.row = far_row;
    CHECK(fg_moe_rows_by_expert(&bad_r, E, ROWS, slot_of, bseg, srow, &d) == -1);
    free(slot_of);
    free(bseg);
    free(y2);

    /* Six rows for one expert, room for five. */
    const int seg6[2] = {0, 6}, row6[6] = {0, 1, 2, 3, 4, 5};
    const fg_moe_rows over = {.n_rows = 6, .x = x, .x_stride = stride, .n_slots = 1, .expert = expert,
                              .seg = seg6, .row = row6, .y = y};
    CHECK(c->run(c, ly_il, &over, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "room for 5"));
    fg_moe_compute *bad;
    CHECK(fg_moe_compute_cpu_create(&m->base, 0, NULL, FG_ISA_AUTO, &bad, &d) == FG_ERR_INVALID_ARG && bad == NULL);
    printf("%s: expert compute bit-identical to the direct products, %g from single rows\n", file, (double)worst);

    fg_moe_compute_cpu_destroy(c);
    free(x);
    free(y);
    free(want);
    free(one);
    free(xe);
    free(ye);
    fg_model_free(m);
    fg_gguf_close(g);
}

int main(void)
{
    check_model("tiny.gguf");
    check_model("tiny-q8_0.gguf");
    return TEST_DONE("test_moe_compute");
}
