/* device_batch.h: the description of one forward batch that a device backend
 * (engine/backend/cuda/) copies to the device before a step, built on the host. Plain
 * C with no device calls, so it is unit-tested on the CPU (test_device_batch).
 *
 * Device KV pages mirror the host store page for page (engine/backend/backend.h):
 * the device address of host page p is dev_base + fg_kv_store_page_index(p)
 * * page_bytes. Addresses are carried as uintptr_t; nothing here dereferences
 * them.
 *
 * Thread safety: one caller per fg_device_batch (the step thread).
 */
#ifndef FG_DEVICE_BATCH_H
#define FG_DEVICE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"

/* Arrays of at least max_tokens entries (pages: cap_pages), owned by the caller
 * (the CUDA backend keeps them in pinned memory). */
typedef struct fg_device_batch {
    int32_t *tok;         /* token ids */
    int32_t *pos;         /* each token's position in its sequence */
    int32_t *page0;       /* index in pages[] of the first page of the token's sequence */
    int32_t *n_kv;        /* rows the token attends over: pos + 1 */
    int32_t *logit_row;   /* [n_logit_rows] batch rows that want logits, in fg_fwd_seq order */
    uintptr_t *rows;      /* device address of each token's cache row in layer 0 */
    uintptr_t *pages;     /* device page addresses, the sequences' page tables concatenated */
    size_t cap_pages;
    int max_tokens;
    /* results */
    int n_tok;
    int n_logit_rows;
    size_t n_pages;
} fg_device_batch;

/* Checks a batch exactly as fg_forward_run does (same errors and messages):
 * FG_ERR_INVALID_ARG (over max_tokens, bad n_logits, logits without a buffer,
 * a sequence without pages for its rows), FG_ERR_TOKEN_ID. *n_tok gets the
 * batch's token count. */
fg_err fg_device_batch_check(const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs, int max_tokens, int n_vocab,
                             int *n_tok, fg_diag *diag);

/* Pages the batch's sequences hold in all (what cap_pages must reach). */
size_t fg_device_batch_pages(const fg_fwd_seq *seqs, int n_seqs);

/* Fills b for a checked batch. Errors: FG_ERR_INVALID_ARG when the page list
 * does not fit cap_pages (grow to fg_device_batch_pages first). */
fg_err fg_device_batch_plan(fg_device_batch *b, const fg_kv_store_t *kv, uintptr_t dev_base, const int32_t *tokens,
                            const fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

#endif
