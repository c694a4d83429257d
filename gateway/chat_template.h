/* chat_template.h: conversation items to tokens, DeepSeek style:
 *   BOS instructions  <｜User｜>text  <｜Assistant｜>text EOS  ...  <｜Assistant｜>(generation)
 * Tool calls and their outputs are wrapped in DeepSeek's tool markers. Markers
 * are encoded with special tokens recognised (a real DeepSeek vocabulary has
 * them as single tokens; the generated test vocabularies spell them in bytes);
 * user-supplied text never is, so it cannot inject control tokens.
 * Pure functions over an immutable tokenizer; safe from any thread.
 */
#ifndef FG_CHAT_TEMPLATE_H
#define FG_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "config/base/tokens.h"
#include "config/fg_error.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/protocol.h"

/* Appends the session head: BOS (if the vocabulary has one) and the instructions. */
fg_err fg_template_head(const fg_tokenizer_t *tok, const char *instructions, size_t len, fg_tokens *out);
/* Appends one conversation item. */
fg_err fg_template_item(const fg_tokenizer_t *tok, const fg_proto_item *item, fg_tokens *out);
/* Appends the assistant marker that starts a generated reply. */
fg_err fg_template_reply(const fg_tokenizer_t *tok, fg_tokens *out);

#endif
