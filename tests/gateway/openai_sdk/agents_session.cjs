// @openai/agents-realtime's RealtimeSession (its WebSocket transport) with a
// text agent against flashgate: one message, and the session's history must
// hold the user message and the whole assistant reply (the text of every
// delta). Prints one JSON line; exits 1 on a mismatch. Args: npm_dir wss_url api_key
const { args, req, fail } = require('./common.cjs');
const [url, apiKey] = args;
const { RealtimeAgent, RealtimeSession } = req('@openai/agents-realtime');

(async () => {
  const agent = new RealtimeAgent({ name: 'helper', instructions: 'Be brief.' });
  const session = new RealtimeSession(agent, { transport: 'websocket', model: 'flashgate',
                                               config: { outputModalities: ['text'] } });
  const errors = [];
  let deltas = '';
  session.on('error', (e) => errors.push(e.error && (e.error.error || e.error)));
  session.transport.on('*', (ev) => { if (ev.type === 'response.output_text.delta') deltas += ev.delta; });
  const timer = setTimeout(() => fail('timed out', { errors, history: session.history }), 60000);
  await session.connect({ apiKey, url });
  const doneP = new Promise((resolve) => session.transport.on('turn_done', resolve));
  session.sendMessage('Hello there');
  await doneP;
  await new Promise((r) => setTimeout(r, 200)); // the history updates after the event
  clearTimeout(timer);
  const h = session.history;
  const user = h.find((i) => i.type === 'message' && i.role === 'user');
  const asst = h.find((i) => i.type === 'message' && i.role === 'assistant');
  if (!user || !asst) fail('history lacks the turn', h);
  const text = (asst.content || []).map((c) => c.text || c.transcript || '').join('');
  if (!deltas.length || text !== deltas) fail('the assistant message in history is not the whole reply', { asst, deltas });
  if (asst.status !== 'completed' && asst.status !== 'incomplete') fail('assistant status', asst);
  if (errors.length) fail('errors', errors);
  session.close();
  console.log(JSON.stringify({ ok: true, history: h.length, reply_bytes: Buffer.byteLength(text) }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
