// Load generator for `moetier serve` (bench/serve_bench.sh runs it): C closed-loop clients,
// each sending R greedy completion requests of N tokens one after another (ignore_eos, so
// every request generates exactly N tokens), with prompts that differ per request.
//
//   node serve_bench.mjs BASE_URL MODEL_ID CLIENTS REQUESTS_PER_CLIENT TOKENS [EXTRA.json]
//
// EXTRA.json: fields added to every request body (e.g. a logit_bias).
//
// Prints one JSON line: clients, requests, tokens, wall_s, tok_s (aggregate generated tokens
// per second of wall time), latency p50/p99 (s, whole request), ttft p50/p99 (s, first
// streamed token), tpot p50/p99 (s per output token after the first, as vLLM's benchmark
// reports it: the decode pace a client sees, other requests' prefill steps included),
// errors. Only Node's fetch: no dependencies.
import { readFileSync } from 'node:fs';

const [baseURL, model, clientsArg, perClientArg, tokensArg, extraArg] = process.argv.slice(2);
const clients = Number(clientsArg), perClient = Number(perClientArg), nTokens = Number(tokensArg);
const extra = extraArg ? JSON.parse(readFileSync(extraArg, 'utf8')) : {};

const words = ['river', 'engine', 'orange', 'market', 'silver', 'planet', 'garden', 'winter',
               'signal', 'forest', 'bridge', 'candle', 'motion', 'number', 'pocket', 'shadow'];
function prompt(i) {
  let s = `Request ${i}:`;
  for (let k = 0; k < 12; k++) s += ' ' + words[(i * 7 + k * 3 + (i >> 2)) % words.length];
  return s;
}

// One streamed request: resolves to {latency, ttft, tokens} or throws.
async function request(i) {
  const t0 = performance.now();
  const r = await fetch(`${baseURL}/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: prompt(i), max_tokens: nTokens, temperature: 0,
                           ignore_eos: true, stream: true,
                           stream_options: { include_usage: true }, ...extra }) });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, tokens = 0, buf = '';
  const decoder = new TextDecoder();
  for await (const part of r.body) {
    buf += decoder.decode(part, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const j = JSON.parse(event.slice(6));
      if (j.error) throw new Error(j.error.message);
      if (ttft === null && j.choices?.[0]?.text) ttft = (performance.now() - t0) / 1000;
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  return { latency: (performance.now() - t0) / 1000, ttft, tokens };
}

const pct = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};

const results = [];
let errors = 0, firstError = null;
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, async (_, c) => {
  for (let k = 0; k < perClient; k++) {
    try {
      results.push(await request(c * perClient + k));
    } catch (e) {
      errors++;
      firstError ??= String(e);
    }
  }
}));
const wall = (performance.now() - t0) / 1000;
const tokens = results.reduce((s, r) => s + r.tokens, 0);
const lat = results.map((r) => r.latency), ttft = results.map((r) => r.ttft).filter((x) => x !== null);
const tpot = results.filter((r) => r.ttft !== null && r.tokens > 1)
  .map((r) => (r.latency - r.ttft) / (r.tokens - 1));
console.log(JSON.stringify({
  clients, requests: results.length, tokens, wall_s: wall, tok_s: tokens / wall,
  latency_p50: pct(lat, 50), latency_p99: pct(lat, 99), ttft_p50: pct(ttft, 50),
  ttft_p99: pct(ttft, 99), tpot_p50: pct(tpot, 50), tpot_p99: pct(tpot, 99), errors,
  first_error: firstError }));
