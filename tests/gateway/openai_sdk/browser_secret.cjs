// A browser's way in, with the official openai npm client: the server side
// mints a client secret (client.realtime.clientSecrets.create, with session
// settings), and OpenAIRealtimeWebSocket, the client for browsers, connects
// with nothing but that secret: it sends it in the subprotocol list as
// "openai-insecure-api-key.<secret>". Node 20 has no global WebSocket, so the
// ws package stands in for the browser's (same constructor and events). One
// text turn; the secret's instructions are the session's. Prints one JSON
// line; exits 1 on the first mismatch. Args: npm_dir base_url api_key
const { args, req, fail, check } = require('./common.cjs');
const [baseURL, apiKey] = args;
const { OpenAI } = req('openai');
const ws = req('ws');
globalThis.WebSocket = globalThis.WebSocket || ws.WebSocket || ws;
const { OpenAIRealtimeWebSocket } = req('openai/realtime/websocket');

(async () => {
  const server = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const secret = await server.realtime.clientSecrets.create({
    expires_after: { anchor: 'created_at', seconds: 120 },
    session: { type: 'realtime', model: 'tiny', instructions: 'Be brief.', output_modalities: ['text'] },
  });
  const now = Math.floor(Date.now() / 1000);
  check(/^ek_[0-9a-f]{32}$/.test(secret.value), 'an ek_ value', secret);
  check(secret.expires_at >= now + 110 && secret.expires_at <= now + 130, 'expires_at in 120 s', secret);
  check(secret.session.type === 'realtime' && secret.session.model === 'tiny', 'the session echoed', secret.session);
  // a secret cannot mint another
  let e1 = null;
  try { await new OpenAI({ baseURL, apiKey: secret.value, maxRetries: 0 }).realtime.clientSecrets.create({}); }
  catch (e) { e1 = e; }
  check(e1 && e1.status === 401, 'a secret is no API key', String(e1));

  // the browser side: only the secret
  const browser = new OpenAI({ baseURL, apiKey: secret.value, dangerouslyAllowBrowser: true });
  const rt = new OpenAIRealtimeWebSocket({ model: 'tiny' }, browser);
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
  check(created.session.instructions === 'Be brief.', "the secret's session settings", created.session);
  rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello' }] } });
  rt.send({ type: 'response.create', response: { max_output_tokens: 8 } });
  const done = await once('response.done');
  clearTimeout(timer);
  check(done.response.output[0].content[0].text === deltas && errors.length === 0, 'a text turn', { done, errors });
  rt.close();
  console.log(JSON.stringify({ ok: true, events: seen.length, reply_bytes: Buffer.byteLength(deltas) }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
