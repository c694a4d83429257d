/* fg_error.c: names and descriptions of fg_err codes. */
#include "config/fg_error.h"

#include <stdarg.h>
#include <stdio.h>

static const struct {
    const char *name;
    const char *text;
} err_table[FG_ERR__COUNT] = {
    [FG_OK] = {"ok", "success"},
    [FG_ERR_NOMEM] = {"out_of_memory", "out of memory"},
    [FG_ERR_IO] = {"io_error", "input/output error"},
    [FG_ERR_INVALID_ARG] = {"invalid_argument", "invalid argument"},
    [FG_ERR_UNSUPPORTED] = {"unsupported", "not supported"},
    [FG_ERR_GGUF_MAGIC] = {"gguf_bad_magic", "not a GGUF file (bad magic)"},
    [FG_ERR_GGUF_VERSION] = {"gguf_bad_version", "unsupported GGUF version"},
    [FG_ERR_GGUF_TRUNCATED] = {"gguf_truncated", "GGUF file is truncated"},
    [FG_ERR_GGUF_LIMIT] = {"gguf_limit", "GGUF count, length or size out of range"},
    [FG_ERR_GGUF_VALUE_TYPE] = {"gguf_bad_value_type", "unknown GGUF metadata value type"},
    [FG_ERR_GGUF_TENSOR_TYPE] = {"gguf_bad_tensor_type", "unknown GGUF tensor type"},
    [FG_ERR_GGUF_DUPLICATE] = {"gguf_duplicate", "duplicate GGUF key or tensor name"},
    [FG_ERR_GGUF_BOUNDS] = {"gguf_out_of_bounds", "GGUF tensor data out of bounds or misaligned"},
    [FG_ERR_GGUF_KEY_TYPE] = {"gguf_key_type", "GGUF key has an unexpected type"},
    [FG_ERR_NOT_FOUND] = {"not_found", "not found"},
    [FG_ERR_MODEL_ARCH] = {"model_architecture", "unsupported model architecture"},
    [FG_ERR_MODEL_HPARAM] = {"model_hparam", "missing or inconsistent model hyperparameter"},
    [FG_ERR_MODEL_TENSOR] = {"model_missing_tensor", "required model tensor is missing"},
    [FG_ERR_MODEL_SHAPE] = {"model_tensor_shape", "model tensor has the wrong shape"},
    [FG_ERR_MODEL_TYPE] = {"model_tensor_type", "model tensor type not supported by the engine"},
    [FG_ERR_TOKENIZER] = {"tokenizer", "unusable tokenizer metadata"},
    [FG_ERR_TOKEN_ID] = {"token_id", "token id out of vocabulary"},
    [FG_ERR_CONTEXT_FULL] = {"context_full", "sequence exceeds the context length"},
    [FG_ERR_KV_FORMAT] = {"kv_format", "KV cache format not usable"},
    [FG_ERR_KV_FULL] = {"kv_full", "KV page pool is full"},
    [FG_ERR_CONFIG] = {"config", "invalid configuration"},
    [FG_ERR_BUSY] = {"busy", "a response is already in progress"},
    [FG_ERR_STATE] = {"bad_state", "not allowed in the current mode or state"},
    [FG_ERR_SESSION_TRUNCATED] = {"session_truncated", "session file is truncated"},
    [FG_ERR_SESSION_CORRUPT] = {"session_corrupt", "session file is corrupt (checksum or structure)"},
    [FG_ERR_SESSION_MODEL] = {"session_model", "session file was saved by another model"},
    [FG_ERR_SESSION_VERSION] = {"session_version", "session file format version or KV cache format differs"},
    [FG_ERR_DISK_FULL] = {"disk_full", "disk full or disk budget exceeded"},
};

const char *fg_err_name(fg_err e)
{
    if ((unsigned)e >= FG_ERR__COUNT || !err_table[e].name)
        return "unknown";
    return err_table[e].name;
}

const char *fg_err_describe(fg_err e)
{
    if ((unsigned)e >= FG_ERR__COUNT || !err_table[e].text)
        return "unknown error";
    return err_table[e].text;
}

fg_err fg_diag_set(fg_diag *diag, fg_err e, const char *fmt, ...)
{
    if (diag) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(diag->msg, sizeof diag->msg, fmt, ap);
        va_end(ap);
    }
    return e;
}
