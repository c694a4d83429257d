// The official openai npm client, unmodified, with function tools against
// flashgate running the scripted output (test_openai_http.py
// test_tools_over_http: the server's responses in order are a call, a text,
// a call, a call, a text, a call, a malformed call): chat.completions not
// streamed (tool_calls, finish_reason "tool_calls") and continued with a role
// "tool" message, streamed (the call named in its first tool_calls delta, its
// arguments in the following ones), responses.create (a function_call output
// item) continued with function_call_output via previous_response_id,
// responses.create streamed (the call's item after the message's, its
// arguments as function_call_arguments.delta pieces), and a malformed call as
// the SDK's error, then tool_choice forced by prefill: a named function on
// chat.completions (the model writes only the arguments), "required" on
// responses (the model writes the name) continued with the whole turn cached.
// Prints one JSON line; exits 1 on
// the first mismatch. Args: npm_dir base_url api_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey] = args;
const { OpenAI } = req('openai');

const ARGS = '{"city": "Paris"}';

(async () => {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const out = { ok: true };
  const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const user = { role: 'user', content: 'Weather in Paris?' };

  // chat, not streamed: the call
  const c1 = await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 200, messages: [user], tools: chatTools });
  const ch = c1.choices[0];
  check(ch.finish_reason === 'tool_calls', 'finish_reason', c1);
  check(ch.message.tool_calls && ch.message.tool_calls.length === 1, 'one tool call', c1);
  const tc = ch.message.tool_calls[0];
  check(tc.type === 'function' && tc.function.name === 'get_weather' && tc.function.arguments === ARGS && tc.id,
        'the call', tc);
  check(ch.message.content === 'Let me check.', 'the text before the call', ch.message);
  // its output goes back as a tool message; the reply continues
  const c2 = await client.chat.completions.create({
    model: 'tiny-chat', max_tokens: 200, tools: chatTools,
    messages: [user, { role: 'assistant', content: null, tool_calls: [tc] },
               { role: 'tool', tool_call_id: tc.id, content: '{"temp_c": 21}' }],
  });
  check(c2.choices[0].message.content === 'It is sunny in Paris.' && c2.choices[0].finish_reason === 'stop',
        'the reply after the tool', c2);

  // chat, streamed: tool_calls deltas joined as the SDK's docs show
  const stream = await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 200, messages: [user],
                                                        tools: chatTools, tool_choice: 'auto', stream: true });
  const calls = [];
  const pieces = [];
  let finish = null, text = '';
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) text += choice.delta.content;
    for (const d of choice.delta.tool_calls || []) {
      pieces.push(d);
      if (!calls[d.index]) calls[d.index] = { id: d.id, name: '', arguments: '' };
      if (d.function && d.function.name) calls[d.index].name += d.function.name;
      if (d.function && d.function.arguments) calls[d.index].arguments += d.function.arguments;
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  check(finish === 'tool_calls' && calls.length === 1 && calls[0].name === 'get_weather' &&
        calls[0].arguments === ARGS && calls[0].id, 'streamed tool_calls', { calls, finish });
  check(text === 'Let me check.', 'streamed text', text);
  // streamed, not whole: the first delta names the call with empty arguments, the rest carry only arguments
  check(pieces.length >= 2 && pieces[0].id && pieces[0].function.name === 'get_weather' &&
        pieces[0].function.arguments === '' && pieces.slice(1).every((d) => !d.id && !d.function.name && d.index === 0),
        'the call streams: named first, then its arguments', pieces);

  // responses: a function_call output item, then function_call_output on the same conversation
  const r1 = await client.responses.create({
    model: 'tiny-chat', input: 'Weather in Paris?', max_output_tokens: 200,
    tools: [{ type: 'function', name: 'get_weather', parameters: chatTools[0].function.parameters, strict: false }],
  });
  const fc = r1.output.find((o) => o.type === 'function_call');
  check(fc && fc.name === 'get_weather' && fc.arguments === ARGS && fc.call_id && fc.status === 'completed',
        'the function_call item', r1.output);
  const r2 = await client.responses.create({
    model: 'tiny-chat', previous_response_id: r1.id, max_output_tokens: 200,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: '{"temp_c": 21}' }],
  });
  check(r2.output_text === 'It is sunny in Paris.', 'the reply after the tool output', r2.output);
  check(r2.usage.input_tokens_details.cached_tokens > 0, 'the conversation kept its cache', r2.usage);

  // responses, streamed: the message's item, then the call's, its arguments in pieces
  const s3 = await client.responses.create({
    model: 'tiny-chat', input: 'Weather in Paris?', max_output_tokens: 200, stream: true,
    tools: [{ type: 'function', name: 'get_weather', parameters: chatTools[0].function.parameters, strict: false }],
  });
  const evs = [];
  for await (const ev of s3) evs.push(ev);
  const types = evs.map((e) => e.type);
  const at = (pred) => evs.findIndex(pred);
  const iAdded = at((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
  const added = evs[iAdded];
  check(added && added.output_index === 1 && added.item.name === 'get_weather' && added.item.arguments === '' &&
        added.item.status === 'in_progress', 'the call item added', types);
  const iMsgDone = at((e) => e.type === 'response.output_item.done' && e.item.type === 'message');
  check(iMsgDone >= 0 && iMsgDone < iAdded && evs[iMsgDone].item.content[0].text === 'Let me check.',
        'the message is done before the call starts', types);
  const deltas = evs.filter((e) => e.type === 'response.function_call_arguments.delta');
  check(deltas.length >= 1 && deltas.map((d) => d.delta).join('') === ARGS &&
        deltas.every((d) => d.item_id === added.item.id && d.output_index === 1), 'the arguments as deltas', deltas);
  const iArgsDone = at((e) => e.type === 'response.function_call_arguments.done');
  const iCallDone = at((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call');
  check(iAdded < at((e) => e.type === 'response.function_call_arguments.delta') && iArgsDone > iAdded &&
        evs[iArgsDone].arguments === ARGS && iCallDone > iArgsDone && evs[iCallDone].item.arguments === ARGS &&
        evs[iCallDone].item.status === 'completed', 'the call ends with its whole arguments', types);
  const last = evs[evs.length - 1];
  check(last.type === 'response.completed' && last.response.output[1].arguments === ARGS &&
        last.response.output[1].call_id === added.item.call_id, 'the response holds the call', last);
  check(evs.every((e, i) => e.sequence_number === i), 'in sequence', types);
  out.streamed_args = { chat: pieces.length - 1, responses: deltas.length };

  // a malformed call: the SDK's error with the reason
  try {
    await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 200, messages: [user], tools: chatTools });
    fail('a malformed call was not reported');
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.code === 'tool_call_invalid', 'the malformed call error',
          { status: e.status, code: e.code, message: e.message });
    out.malformed = e.message;
  }
  // tool_choice forced by prefill (test_openai_sdk.FORCED_ARGS, FORCED_NAME): chat with a named function, the
  // model writing only the arguments, is that function's call
  const f1 = await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 200, messages: [user],
    tools: chatTools, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const fc1 = f1.choices[0];
  check(fc1.finish_reason === 'tool_calls' && fc1.message.tool_calls.length === 1 && fc1.message.content === null &&
        fc1.message.tool_calls[0].function.name === 'get_weather' && fc1.message.tool_calls[0].function.arguments === ARGS,
        'chat, a named tool_choice: its call', f1);
  // the next request repeats that turn as an assistant message with tool_calls: its rendering is the forced
  // turn's tokens, so every full KV page of it (FG_KV_PAGE_TOKENS, 64) is found in the prefix cache
  const f1b = await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 200, tools: chatTools,
    messages: [user, { role: 'assistant', content: null, tool_calls: fc1.message.tool_calls },
               { role: 'tool', tool_call_id: fc1.message.tool_calls[0].id, content: '{"temp_c": 21}' }] });
  check(f1b.choices[0].message.content === 'Cold.', 'chat: the reply after the forced call', f1b);
  const fullPages = Math.floor((f1.usage.prompt_tokens + f1.usage.completion_tokens - 1) / 64) * 64;
  check(fullPages > f1.usage.prompt_tokens, 'the forced turn ends past a page boundary', f1.usage);
  check(f1b.usage.prompt_tokens_details.cached_tokens >= fullPages, 'chat: the forced turn is found in the cache',
        { f1: f1.usage, next: f1b.usage });
  // responses, "required": the model names the function; continued without tool_choice ("auto": not forced
  // again), the conversation's cache holds the whole forced turn
  const respTools = [{ type: 'function', name: 'get_weather', parameters: chatTools[0].function.parameters, strict: false }];
  const f2 = await client.responses.create({ model: 'tiny-chat', input: 'Weather in Oslo?', max_output_tokens: 200,
                                             tools: respTools, tool_choice: 'required' });
  const fc2 = f2.output.find((o) => o.type === 'function_call');
  check(fc2 && fc2.name === 'get_weather' && fc2.arguments === '{"city": "Oslo"}' && fc2.status === 'completed',
        'responses, "required": a call', f2.output);
  const f3 = await client.responses.create({ model: 'tiny-chat', previous_response_id: f2.id, max_output_tokens: 200,
    tools: respTools, input: [{ type: 'function_call_output', call_id: fc2.call_id, output: '{"temp_c": 3}' }] });
  check(f3.output_text === 'Rain.', 'the reply after the forced call\'s output', f3.output);
  // the Response object echoes each request's own tool_choice and tools
  check(f2.tool_choice === 'required' && f3.tool_choice === 'auto' && f2.tools.length === 1 &&
        f2.tools[0].name === 'get_weather' && f2.tools[0].type === 'function' &&
        JSON.stringify(f2.tools[0].parameters) === JSON.stringify(respTools[0].parameters),
        'the Response object\'s tool_choice and tools', { f2: [f2.tool_choice, f2.tools], f3: f3.tool_choice });
  check(f3.usage.input_tokens_details.cached_tokens >= f2.usage.input_tokens + f2.usage.output_tokens - 1,
        'the next turn reads the whole forced turn from the cache', { f2: f2.usage, f3: f3.usage });
  out.forced = { chat: [f1.usage.prompt_tokens, f1.usage.completion_tokens, f1b.usage.prompt_tokens_details.cached_tokens],
                 f2: [f2.usage.input_tokens, f2.usage.input_tokens_details.cached_tokens, f2.usage.output_tokens],
                 f3: [f3.usage.input_tokens, f3.usage.input_tokens_details.cached_tokens, f3.usage.output_tokens] };

  // unknown tool types and a bad tool_choice: clear 400s
  for (const [body, param] of [
    [{ tools: [{ type: 'web_search' }] }, 'tools[0]'],
    [{ tools: chatTools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
    [{ tool_choice: 'required' }, 'tool_choice'],
  ]) {
    try {
      await client.chat.completions.create({ model: 'tiny-chat', max_tokens: 2, messages: [user], ...body });
      fail('accepted', body);
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.param && e.param.startsWith(param), 'a 400 naming ' + param,
            { status: e.status, param: e.param, message: e.message });
    }
  }
  out.call_id = tc.id;
  console.log(JSON.stringify(out));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
