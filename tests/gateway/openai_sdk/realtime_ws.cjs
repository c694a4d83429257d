// The official openai npm client against flashgate: models.list(), then the
// realtime client over wss:// with only baseURL and apiKey set, one text turn,
// and the GA event sequence checked. Prints one JSON line with what it saw;
// exits 1 on the first mismatch. Args: npm_dir base_url api_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey] = args;
const { OpenAI } = req('openai');
const { OpenAIRealtimeWS } = req('openai/realtime/ws');

(async () => {
  const client = new OpenAI({ baseURL, apiKey });
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  check(ids.length === 1, 'models.list returns the one model', ids);
  let badKey = null;
  try { await new OpenAI({ baseURL, apiKey: 'not-a-key-0123456789' }).models.list(); } catch (e) { badKey = e; }
  check(badKey && badKey.status === 401 && badKey.code === 'invalid_api_key', 'a wrong key is a 401 APIError', String(badKey));

  const rt = new OpenAIRealtimeWS({ model: ids[0] }, client);
  const seen = [];
  const errors = [];
  let deltas = '';
  const timer = setTimeout(() => fail('timed out', { seen, errors }), 60000);
  rt.on('error', (e) => errors.push(e.error || String(e)));
  rt.on('event', (ev) => {
    seen.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  });
  const once = (type) => new Promise((resolve) => rt.on(type, resolve));
  const created = await once('session.created');
  check(seen[0] === 'session.created', 'session.created is the first event', seen);
  check(created.session.type === 'realtime' && created.session.model === ids[0], 'the GA session object', created.session);

  // audio is refused with a clear error, the session goes on
  rt.send({ type: 'session.update', event_id: 'bad_audio', session: { type: 'realtime', output_modalities: ['audio'] } });
  rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.', output_modalities: ['text'], max_output_tokens: 'inf' } });
  const updated = await once('session.updated');
  check(updated.session.instructions === 'Be brief.', 'session.updated shows the instructions', updated.session);
  check(errors.length === 1 && errors[0].code === 'invalid_value' && errors[0].event_id === 'bad_audio' &&
        /audio output is not supported/.test(errors[0].message), 'audio modality refused', errors);

  rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] } });
  rt.send({ type: 'response.create', response: { max_output_tokens: 12 } });
  const done = await once('response.done');
  clearTimeout(timer);
  const turn = seen.slice(seen.indexOf('conversation.item.added'));
  const want = ['conversation.item.added', 'conversation.item.done', 'response.created', 'response.output_item.added',
                'conversation.item.added', 'response.content_part.added'];
  check(JSON.stringify(turn.slice(0, want.length)) === JSON.stringify(want), 'the GA sequence opens a response', turn);
  const tail = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done',
                'conversation.item.done', 'response.done'];
  check(JSON.stringify(turn.slice(-tail.length)) === JSON.stringify(tail), 'the GA sequence ends a response', turn);
  const middle = turn.slice(want.length, turn.length - tail.length);
  check(middle.length > 0 && middle.every((t) => t === 'response.output_text.delta'), 'only deltas between', turn);
  const out = done.response.output[0];
  check(out && out.type === 'message' && out.role === 'assistant' && out.content[0].type === 'output_text' &&
        out.content[0].text === deltas, 'response.done holds the whole reply', { out, deltas });
  check(['completed', 'incomplete'].includes(out.status) && done.response.usage.output_tokens > 0, 'status and usage', done.response);
  check(errors.length === 1, 'no other error', errors);
  rt.close();
  console.log(JSON.stringify({ ok: true, models: ids, events: turn.length, reply_bytes: Buffer.byteLength(deltas) }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
