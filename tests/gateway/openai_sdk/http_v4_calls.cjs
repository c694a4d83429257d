// The official openai npm client, unmodified, on chat.completions against a
// DeepSeek-V4 model (test_openai_http.py test_v4_text_and_calls_cached: the
// scripted output is text and two DSML calls, then two texts). The first
// reply's assistant message (its text and both calls) is sent back with the
// two tool results, then once more followed by a user message instead. V4's
// prefix cache shares whole 128-token units with a state snapshot, taken at
// the last unit of a request's input and, where a lookup found pages without
// one, at the deepest such unit (docs/engine.md "deepseek4 prefix sharing and
// forks"); decode takes none. So the second request can reuse only up to the
// first prompt's last unit, but it leaves a snapshot as deep as its lookup
// found the first turn's pages, and the third request, which parts from the
// second right after the first turn, resumes there: every whole unit of the
// first prompt and reply, only if the per-item rendering of that message, its
// calls and their results is, id for id, the turn the model wrote.
// Prints one JSON line; exits 1 on the first mismatch.
// Args: npm_dir base_url api_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey] = args;
const { OpenAI } = req('openai');

const UNIT = 128; // V4's unit of prefix sharing (share_tokens)

(async () => {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const model = (await client.models.list()).data[0].id;
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const user = { role: 'user', content: 'Weather in Paris and Oslo?' };
  const c1 = await client.chat.completions.create({ model, max_tokens: 300, messages: [user], tools });
  const m = c1.choices[0].message;
  check(c1.choices[0].finish_reason === 'tool_calls' && m.content === 'Let me check both.' &&
        m.tool_calls && m.tool_calls.length === 2, 'text and two calls', c1);
  check(m.tool_calls.map((t) => t.function.arguments).join() === '{"city": "Paris"},{"city": "Oslo"}',
        'the calls\' arguments', m.tool_calls);
  // long results: the second request's own last unit lies past the first turn's
  const detail = ' The sky stays clear over the whole region through the evening hours.'.repeat(3);
  const results = [
    { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"temp_c": 21, "note": "' + detail + '"}' },
    { role: 'tool', tool_call_id: m.tool_calls[1].id, content: '{"temp_c": 3, "note": "' + detail + '"}' }];
  const back = { role: 'assistant', content: m.content, tool_calls: m.tool_calls };
  const c2 = await client.chat.completions.create({ model, max_tokens: 300, tools, messages: [user, back, ...results] });
  check(c2.choices[0].message.content === 'Sunny in Paris, cold in Oslo.', 'the reply after the results', c2);
  const c3 = await client.chat.completions.create({ model, max_tokens: 300, tools,
                                                    messages: [user, back, { role: 'user', content: 'Thanks.' }] });
  check(c3.choices[0].message.content === 'You are welcome.', 'the third reply', c3);
  const units = (n) => Math.floor(n / UNIT) * UNIT;
  // the first turn as the engine holds it: its prompt and reply but the last sampled token (never fed back)
  const turn = units(c1.usage.prompt_tokens + c1.usage.completion_tokens - 1);
  check(turn > units(c1.usage.prompt_tokens - 1), 'the reply ends past the prompt\'s last unit', c1.usage);
  check(units(c2.usage.prompt_tokens - 1) > turn, 'the second request\'s own last unit lies past the first turn',
        c2.usage);
  check(c2.usage.prompt_tokens_details.cached_tokens >= units(c1.usage.prompt_tokens - 1),
        'the second request resumes at the first prompt\'s last unit', { first: c1.usage, second: c2.usage });
  check(c3.usage.prompt_tokens_details.cached_tokens >= turn,
        'the third request finds every whole unit of the first turn', { first: c1.usage, second: c2.usage,
                                                                          third: c3.usage });
  console.log(JSON.stringify({ ok: true, model, cached: [c1, c2, c3].map((c) => [c.usage.prompt_tokens,
    c.usage.prompt_tokens_details.cached_tokens, c.usage.completion_tokens]) }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
