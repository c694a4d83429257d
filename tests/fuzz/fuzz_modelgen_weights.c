/* fuzz_modelgen_weights.c: libFuzzer target for the FGW1 trained-weights file
 * that flashgate-modelgen --weights reads (engine/model/modelgen.h).
 *
 * The input is written to a temporary file and handed to fg_modelgen_write
 * for a micro spec (one dense and one MoE layer, d = 32, 260 tokens). Any
 * bytes either give a GGUF that opens, or fail with a message and leave no
 * file behind. The seed corpus (tests/fuzz/corpus/fuzz_modelgen_weights/) has
 * a valid file for this spec, so the fuzzer starts past the headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/modelgen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz_fgw_XXXXXX";
static char in_path[64], out_path[64];

static void micro_spec(fg_modelgen_spec *s)
{
    fg_modelgen_preset("tiny", s);
    s->n_vocab = 260;
    s->n_ctx = 64;
    s->n_embd = 32;
    s->n_layer = 2;
    s->n_ff = 32;
    s->n_head = 2;
    s->q_lora_rank = 16;
    s->kv_lora_rank = 16;
    s->rope_dim = 4;
    s->nope_dim = 4;
    s->v_dim = 4;
    s->n_expert = 4;
    s->n_expert_used = 2;
    s->n_ff_exp = 8;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!in_path[0]) {
        if (!mkdtemp(dir))
            abort();
        snprintf(in_path, sizeof in_path, "%s/in.fgw", dir);
        snprintf(out_path, sizeof out_path, "%s/out.gguf", dir);
    }
    FILE *f = fopen(in_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    fg_modelgen_spec s;
    micro_spec(&s);
    s.weights_path = in_path;
    fg_diag d = {{0}};
    unlink(out_path);
    if (fg_modelgen_write(&s, out_path, &d) != FG_OK) {
        if (!d.msg[0] || access(out_path, F_OK) == 0)
            abort(); /* a refusal says why and leaves no file */
        return 0;
    }
    fg_gguf_t *g = NULL;
    if (fg_gguf_open_file(out_path, &g, &d) != FG_OK)
        abort(); /* what was written must read back */
    fg_gguf_close(g);
    return 0;
}
