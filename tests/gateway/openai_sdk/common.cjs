// What every client script here shares: require() from the npm folder the
// test installed the SDKs into (the first argument), the other arguments, and
// the verdict: one JSON line, exit 1 on the first mismatch.
const { createRequire } = require('module');
const path = require('path');

const [npmDir, ...args] = process.argv.slice(2);
const req = createRequire(path.join(npmDir, 'x.js'));

function fail(msg, extra) {
  console.log(JSON.stringify({ ok: false, error: msg, extra }));
  process.exit(1);
}
const check = (cond, msg, extra) => { if (!cond) fail(msg, extra); };

module.exports = { args, req, fail, check };
