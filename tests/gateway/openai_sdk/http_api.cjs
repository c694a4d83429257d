// The official openai npm client, unmodified, against flashgate's HTTP APIs:
// chat.completions.create streamed and not, a second chat whose messages
// extend the first (cached_tokens from the prefix cache), responses.create
// streamed, then continued with previous_response_id (cached tokens on the
// second call), responses.retrieve and .delete of stored responses, and the
// SDK's errors for an unknown model, a bad role, another tenant's
// previous_response_id and stored responses, and a deleted one. Prints one JSON line with what it
// saw; exits 1 on the first mismatch. Args: npm_dir base_url api_key other_tenant_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey, otherKey] = args;
const { OpenAI } = req('openai');

// Long enough to fill whole KV pages, which the prefix cache shares.
const LONG = 'The quick brown fox jumps over the lazy dog. '.repeat(30);

(async () => {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const out = { ok: true };

  // chat, not streamed
  const c1 = await client.chat.completions.create({
    model: 'tiny', max_tokens: 6, temperature: 0, seed: 7, stop: ['zz-never-zz'],
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: LONG }],
  });
  check(c1.object === 'chat.completion' && c1.id.startsWith('chatcmpl-'), 'a chat.completion', c1);
  const m1 = c1.choices[0].message;
  check(m1.role === 'assistant' && typeof m1.content === 'string' && m1.content.length > 0, 'assistant text', c1);
  check(['stop', 'length'].includes(c1.choices[0].finish_reason), 'a finish_reason', c1);
  check(c1.usage.prompt_tokens > 0 && c1.usage.completion_tokens > 0 && c1.usage.completion_tokens <= 6 &&
        c1.usage.total_tokens === c1.usage.prompt_tokens + c1.usage.completion_tokens, 'usage adds up', c1.usage);
  check(typeof c1.usage.prompt_tokens_details.cached_tokens === 'number', 'cached_tokens is reported', c1.usage);
  out.chat = { text: m1.content.length, usage: c1.usage };

  // chat, streamed, extending the first conversation
  const stream = await client.chat.completions.create({
    model: 'tiny', max_completion_tokens: 6, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: LONG },
               { role: 'assistant', content: m1.content }, { role: 'user', content: 'And then?' }],
  });
  let text = '', chunks = 0, usage = null, finish = null, role = null;
  for await (const ch of stream) {
    check(ch.object === 'chat.completion.chunk', 'chunks are chat.completion.chunk', ch);
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const choice of ch.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  check(role === 'assistant' && text.length > 0 && finish, 'the stream holds a reply', { text, finish, role });
  check(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 6, 'include_usage gives usage', usage);
  check(usage.prompt_tokens_details.cached_tokens > 0, 'the repeated prefix came from the cache', usage);
  out.chat_stream = { chunks, text: text.length, usage };

  // responses, streamed
  const types = [];
  let r1 = null, deltas = '';
  const s1 = await client.responses.create({
    model: 'tiny', instructions: 'You are terse.', input: LONG, max_output_tokens: 6, stream: true,
  });
  for await (const ev of s1) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') r1 = ev.response;
  }
  const want = ['response.created', 'response.in_progress', 'response.output_item.added',
                'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
                'response.content_part.done', 'response.output_item.done'];
  let at = 0;
  for (const t of types) if (t === want[at]) at++;
  check(at === want.length, 'the Responses event sequence', types);
  check(r1 && r1.id.startsWith('resp_') && r1.output[0].content[0].text === deltas, 'the response holds the deltas',
        { r1, deltas });
  check(r1.usage.input_tokens > 0 && r1.usage.output_tokens > 0, 'the response has usage', r1.usage);

  // continued: only the new input is computed
  const types2 = [];
  let r2 = null;
  const s2 = await client.responses.create({
    model: 'tiny', previous_response_id: r1.id, input: [{ role: 'user', content: 'And then?' }],
    max_output_tokens: 6, stream: true,
  });
  for await (const ev of s2) {
    types2.push(ev.type);
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') r2 = ev.response;
  }
  check(r2 && r2.previous_response_id === r1.id, 'the second response names the first', r2);
  check(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens, 'the first turn is cached', r2.usage);
  // another tenant cannot continue it (while it exists)
  const err = async (p) => { try { await p; } catch (e) { return e; } return null; };
  const other = new OpenAI({ baseURL, apiKey: otherKey, maxRetries: 0 });
  const e4 = await err(other.responses.create({ model: 'tiny', previous_response_id: r2.id, input: 'x' }));
  check(e4 instanceof OpenAI.NotFoundError && e4.code === 'previous_response_not_found',
        "another tenant's previous_response_id is not found", String(e4));
  // stored responses: retrieve both (the first is older than the newest), not another tenant's
  const g1 = await client.responses.retrieve(r1.id);
  check(g1.id === r1.id && g1.status === r1.status && g1.output_text === deltas &&
        g1.usage.input_tokens === r1.usage.input_tokens, 'retrieve gives the stored first response', { g1, r1 });
  const g2 = await client.responses.retrieve(r2.id);
  check(g2.id === r2.id && g2.previous_response_id === r1.id, 'retrieve gives the second', g2);
  const e6 = await err(other.responses.retrieve(r2.id));
  check(e6 instanceof OpenAI.NotFoundError, "another tenant's response cannot be retrieved", String(e6));
  const e7 = await err(other.responses.delete(r2.id));
  check(e7 instanceof OpenAI.NotFoundError, "another tenant's response cannot be deleted", String(e7));
  // not streamed, store: false, continuing the second
  const r3 = await client.responses.create({ model: 'tiny', previous_response_id: r2.id, input: 'Fine.',
                                             max_output_tokens: 4, store: false });
  check(r3.object === 'response' && typeof r3.output_text === 'string' && r3.output_text.length > 0,
        'a non-streamed response with output_text', r3);
  check(r3.usage.input_tokens_details.cached_tokens > r2.usage.input_tokens_details.cached_tokens,
        'the chain stays cached', r3.usage);
  out.responses = { events: types.length, r1: r1.usage, r2: r2.usage, r3: r3.usage };

  // errors as the SDK's APIError subclasses
  const e1 = await err(client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }));
  check(e1 instanceof OpenAI.NotFoundError && e1.code === 'model_not_found' && e1.param === 'model',
        'an unknown model is a NotFoundError', String(e1));
  const e2 = await err(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'wizard', content: 'x' }] }));
  check(e2 instanceof OpenAI.BadRequestError && e2.param === 'messages[0].role' && e2.type === 'invalid_request_error',
        'a bad role is a BadRequestError naming the field', String(e2));
  const e3 = await err(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }],
    tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }));
  check(e3 instanceof OpenAI.BadRequestError && e3.param === 'tools', 'tools on a model without DeepSeek\'s markers are refused, not dropped', String(e3));
  const e5 = await err(client.responses.create({ model: 'tiny', previous_response_id: r3.id, input: 'x' }));
  check(e5 instanceof OpenAI.NotFoundError, 'a store: false response cannot be continued', String(e5));
  // a stored response, retrieved as it was returned, then deleted: gone for retrieve and continue
  const r4 = await client.responses.create({ model: 'tiny', input: 'Once more.', max_output_tokens: 3 });
  const g4 = await client.responses.retrieve(r4.id);
  check(JSON.stringify(g4) === JSON.stringify(r4), 'retrieve returns the created response', { r4, g4 });
  const d4 = await client.responses.delete(r4.id);
  check(d4 === undefined || (d4.id === r4.id && d4.deleted === true && d4.object === 'response.deleted'),
        'delete answers response.deleted', d4);
  const e8 = await err(client.responses.retrieve(r4.id));
  check(e8 instanceof OpenAI.NotFoundError, 'a deleted response is not found', String(e8));
  const e9 = await err(client.responses.create({ model: 'tiny', previous_response_id: r4.id, input: 'x' }));
  check(e9 instanceof OpenAI.NotFoundError, 'a deleted response cannot be continued', String(e9));
  const e10 = await err(client.responses.delete(r4.id));
  check(e10 instanceof OpenAI.NotFoundError, 'a deleted response cannot be deleted again', String(e10));
  out.stored = { deleted: d4 === undefined ? 'void' : d4.object };
  out.errors = [e1.status, e2.status, e3.status, e4.status, e5.status, e6.status, e7.status, e8.status, e9.status,
                e10.status];
  console.log(JSON.stringify(out));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
