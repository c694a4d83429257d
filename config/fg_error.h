/* fg_error.h: the one error convention of flashgate.
 *
 * Every fallible function returns an fg_err: FG_OK (0) on success, a code on
 * failure. Functions that can say more take an optional fg_diag* and write a
 * one-line human message naming the problem (the key, the tensor, the offset).
 * config/ is the bottom layer: engine/, policies/ and gateway/ all include this
 * header; kernels/ does not (kernels return plain ints and never fail on
 * validated input).
 *
 * Thread safety: all functions here are pure or write only to the caller's diag.
 */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#include <stddef.h>

typedef enum fg_err {
    FG_OK = 0,
    /* generic */
    FG_ERR_NOMEM,             /* an allocation failed */
    FG_ERR_IO,                /* open/read/write/mmap failed (errno in the message) */
    FG_ERR_INVALID_ARG,       /* a caller passed a bad argument */
    FG_ERR_UNSUPPORTED,       /* valid but not implemented here (e.g. a tensor type) */
    /* GGUF container */
    FG_ERR_GGUF_MAGIC,        /* not a GGUF file */
    FG_ERR_GGUF_VERSION,      /* GGUF version other than 3 (or 2) */
    FG_ERR_GGUF_TRUNCATED,    /* the file ends inside a header, key or tensor entry */
    FG_ERR_GGUF_LIMIT,        /* an absurd count, string length, dimension or size */
    FG_ERR_GGUF_VALUE_TYPE,   /* unknown metadata value type */
    FG_ERR_GGUF_TENSOR_TYPE,  /* unknown ggml tensor type */
    FG_ERR_GGUF_DUPLICATE,    /* a key or tensor name appears twice */
    FG_ERR_GGUF_BOUNDS,       /* tensor data outside the file or misaligned */
    FG_ERR_GGUF_KEY_TYPE,     /* a key exists but holds another type than asked */
    FG_ERR_NOT_FOUND,         /* a key or tensor that was asked for is absent */
    /* model */
    FG_ERR_MODEL_ARCH,        /* general.architecture is not one we run */
    FG_ERR_MODEL_HPARAM,      /* a hyperparameter is missing or inconsistent */
    FG_ERR_MODEL_TENSOR,      /* a required tensor is missing */
    FG_ERR_MODEL_SHAPE,       /* a tensor has the wrong shape */
    FG_ERR_MODEL_TYPE,        /* a tensor has a type the engine cannot compute with */
    /* tokenizer */
    FG_ERR_TOKENIZER,         /* vocabulary/merges metadata is unusable */
    FG_ERR_TOKEN_ID,          /* a token id outside the vocabulary */
    /* running */
    FG_ERR_CONTEXT_FULL,      /* the sequence would exceed the context length */
    FG_ERR_KV_FORMAT,         /* unknown KV cache format or width not supported by it */
    FG_ERR_KV_FULL,           /* no free KV page in the pool now (work waits or retries) */
    FG_ERR_CONFIG,            /* a configuration value is invalid */
    FG_ERR_BUSY,              /* the session already has a response in progress */
    FG_ERR_STATE,             /* the call does not fit the object's mode or state */
    /* session files (persistence) */
    FG_ERR_SESSION_TRUNCATED, /* a session file ends before its header's sizes say */
    FG_ERR_SESSION_CORRUPT,   /* a session file's checksum or structure is wrong */
    FG_ERR_SESSION_MODEL,     /* a session file was saved by another model */
    FG_ERR_SESSION_VERSION,   /* a session file's format version or KV cache format differs */
    FG_ERR_DISK_FULL,         /* a write would pass the disk budget, or ENOSPC/EDQUOT/EFBIG */
    FG_ERR__COUNT
} fg_err;

/* A caller-owned buffer for the one-line message that goes with an error. */
typedef struct fg_diag {
    char msg[320];
} fg_diag;

/* Stable snake_case name of a code, e.g. "gguf_truncated"; "unknown" if out of range. */
const char *fg_err_name(fg_err e);

/* Short English description of a code. */
const char *fg_err_describe(fg_err e);

/* Writes a printf-style message into diag (if non-NULL) and returns e, so that
 * error paths read `return fg_diag_set(d, FG_ERR_IO, "open %s: %s", ...);`. */
fg_err fg_diag_set(fg_diag *diag, fg_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns from the enclosing fg_err function when expr fails, passing its code on. */
#define FG_TRY(expr)               \
    do {                           \
        fg_err fg_try_e_ = (expr); \
        if (fg_try_e_ != FG_OK)    \
            return fg_try_e_;      \
    } while (0)

#endif
