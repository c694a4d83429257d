// @openai/agents-realtime's RealtimeSession with a function tool against
// flashgate running the scripted output (tests/gateway/test_openai_sdk.py
// TOOL_SCRIPT): the model's call reaches the tool's execute, the SDK sends its
// output back and asks for the next reply, which the history then holds.
// Prints one JSON line; exits 1 on a mismatch. Args: npm_dir wss_url api_key
const { args, req, fail } = require('./common.cjs');
const [url, apiKey] = args;
const { RealtimeAgent, RealtimeSession, tool } = req('@openai/agents-realtime');
const { z } = req('zod');

(async () => {
  const calls = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => { calls.push(city); return JSON.stringify({ temp_c: 21 }); },
  });
  const agent = new RealtimeAgent({ name: 'helper', instructions: 'Use the tools.', tools: [getWeather] });
  const session = new RealtimeSession(agent, { transport: 'websocket', model: 'flashgate',
                                               config: { outputModalities: ['text'] } });
  const errors = [];
  session.on('error', (e) => errors.push(e.error && (e.error.error || e.error)));
  const timer = setTimeout(() => fail('timed out', { errors, calls, history: session.history }), 60000);
  await session.connect({ apiKey, url });
  let turns = 0;
  const doneP = new Promise((resolve) => session.transport.on('turn_done', () => { if (++turns === 2) resolve(); }));
  session.sendMessage('Weather in Paris?');
  await doneP;
  await new Promise((r) => setTimeout(r, 300)); // the history updates after the event
  clearTimeout(timer);
  const h = session.history;
  const call = h.find((i) => i.type === 'function_call');
  const texts = h.filter((i) => i.type === 'message' && i.role === 'assistant')
    .map((i) => (i.content || []).map((c) => c.text || c.transcript || '').join(''));
  if (calls.length !== 1 || calls[0] !== 'Paris') fail('the tool did not run once with the arguments', { calls, h });
  if (!call || call.name !== 'get_weather' || call.arguments !== '{"city": "Paris"}') fail('the call in history', h);
  if (call.output === undefined && !h.find((i) => i.type === 'function_call_output'))
    fail('no tool output in history', h);
  if (!texts.includes('It is sunny in Paris.')) fail('the reply after the tool', { texts, h });
  if (errors.length) fail('errors', errors);
  session.close();
  console.log(JSON.stringify({ ok: true, history: h.length, calls, texts }));
})().catch((e) => fail('exception: ' + (e && e.stack || e)));
