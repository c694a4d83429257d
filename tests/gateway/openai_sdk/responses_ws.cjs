// The Responses API's WebSocket mode with the official openai npm client
// (ResponsesWS from openai/resources/responses/ws), unmodified: response.create
// events on one connection to /v1/responses, each answered with the Responses
// streaming events; a store: false response continued on the same connection
// with previous_response_id (its turn cached), a stored one continued too,
// refusals as error events that leave the connection usable. Prints one JSON
// line; exits 1 on the first mismatch. Args: npm_dir base_url api_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey] = args;
const { OpenAI } = req('openai');
const { ResponsesWS } = req('openai/resources/responses/ws');

const LONG = 'The quick brown fox jumps over the lazy dog. '.repeat(30);

(async () => {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const rws = new ResponsesWS(client);
  const timer = setTimeout(() => fail('timed out'), 90000);
  let waiting = null;
  const events = [];
  rws.on('event', (ev) => {
    events.push(ev);
    if (waiting && ['response.completed', 'response.incomplete', 'response.failed', 'error'].includes(ev.type)) {
      const w = waiting;
      waiting = null;
      w(ev);
    }
  });
  rws.on('error', () => {}); // error events are checked from 'event'
  // one response.create, its events and its final event
  const turn = (body) => new Promise((resolve) => {
    const from = events.length;
    waiting = (last) => resolve({ last, evs: events.slice(from) });
    rws.send({ type: 'response.create', ...body });
  });

  const t1 = await turn({ model: 'tiny', instructions: 'You are terse.', input: LONG, max_output_tokens: 6,
                          store: false });
  const types = t1.evs.map((e) => e.type);
  const want = ['response.created', 'response.in_progress', 'response.output_item.added',
                'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
                'response.content_part.done', 'response.output_item.done'];
  let at = 0;
  for (const t of types) if (t === want[at]) at++;
  check(at === want.length, 'the Responses event sequence over the WebSocket', types);
  const r1 = t1.last.response;
  check(t1.last.type !== 'error' && r1.id.startsWith('resp_') && r1.store === false, 'a store: false response', t1.last);
  const deltas = t1.evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  check(r1.output[0].content[0].text === deltas, 'the response holds the deltas', { r1, deltas });
  check(t1.evs.every((e, i) => e.sequence_number === i), 'sequence numbers from 0', t1.evs.map((e) => e.sequence_number));

  // continued on this connection: only the new input is computed
  const t2 = await turn({ model: 'tiny', previous_response_id: r1.id, input: 'And then?', max_output_tokens: 6 });
  const r2 = t2.last.response;
  check(t2.last.type !== 'error' && r2.previous_response_id === r1.id, 'the second names the first', t2.last);
  check(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens, 'the first turn is cached', r2.usage);
  const g2 = await client.responses.retrieve(r2.id);
  check(g2.id === r2.id, 'a stored one is retrievable over HTTP', g2);

  // refusals: error events, and the connection goes on
  const e1 = await turn({ model: 'gpt-4o', input: 'x' });
  check(e1.last.type === 'error' && e1.last.status === 404 && e1.last.error.code === 'model_not_found' &&
        e1.last.error.param === 'model', 'an unknown model', e1.last);
  const e2 = await turn({ model: 'tiny', input: 'x', previous_response_id: 'resp_nope' });
  check(e2.last.type === 'error' && e2.last.status === 404 && e2.last.error.code === 'previous_response_not_found',
        'an unknown previous response', e2.last);
  const e3 = await turn({ model: 'tiny', input: 5 });
  check(e3.last.type === 'error' && e3.last.status === 400 && e3.last.error.param === 'input', 'a bad input', e3.last);
  const t3 = await turn({ model: 'tiny', previous_response_id: r2.id, input: 'Fine.', max_output_tokens: 3 });
  check(t3.last.type === 'response.completed' || t3.last.type === 'response.incomplete', 'and then a response', t3.last);
  clearTimeout(timer);
  rws.close();
  console.log(JSON.stringify({ ok: true, events: types.length, r1: r1.usage, r2: r2.usage,
                               errors: [e1.last.status, e2.last.status, e3.last.status] }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
