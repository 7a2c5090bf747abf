// The chat page and API keys, as serve_chat_page.sh starts two servers:
//   node serve_chat_page.mjs CHROMIUM SHOT_DIR KEYED_ROOT MODEL KEY THINKING_ROOT
// KEYED_ROOT serves olmoe-tiny from the stream tier and needs KEY (or another of its keys);
// THINKING_ROOT serves deepseek3-tiny (R1's <think>) resident, without keys.
// 1. API keys with the openai npm client: no key and a wrong key get 401 with OpenAI's error
//    body, the right key works, /health and the page stay open.
// 2. The page in headless chromium (puppeteer-core), driven by the keyboard alone: the key
//    dialog, settings, Enter to send, Shift+Enter, a streamed answer, the tier panel moving,
//    regenerate, Escape to stop, conversations kept over a reload, Markdown rendered and
//    escaped, thinking shown apart from the answer, no console errors, a screenshot.
// 3. Timings: send -> first token in the page against the server's own time to first token.
// Prints "ok: ..." / "FAIL: ..." lines and exits 1 if anything failed.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../tools/oracle/package.json'));
const { default: OpenAI } = await import(require.resolve('openai'));
const { default: puppeteer } = await import(require.resolve('puppeteer-core'));

const [chromium, shotDir, root, modelId, key, thinkRoot] = process.argv.slice(2);

let failures = 0;
const ok = (what) => console.log(`ok: ${what}`);
const fail = (what) => { console.log(`FAIL: ${what}`); failures++; };
const check = (cond, what, detail = '') => (cond ? ok(what) : fail(`${what} ${detail}`));
const WAIT = { timeout: 60_000 };  // generous: CI machines are slower

// --- 1. API keys ------------------------------------------------------------------------------
const client = (apiKey, extra = {}) =>
  new OpenAI({ baseURL: `${root}/v1`, apiKey, maxRetries: 0, timeout: 60_000, ...extra });
const chatReq = { model: modelId, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4,
                  temperature: 0 };

async function expect401(c, what) {
  try {
    await c.chat.completions.create(chatReq);
    fail(`${what}: accepted`);
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401 &&
          e.code === 'invalid_api_key' && e.type === 'invalid_request_error' &&
          typeof e.error?.message === 'string' && e.error.message.length > 0,
          `${what}: 401 invalid_api_key`, `${e}`);
  }
}
await expect401(client('unused', { defaultHeaders: { Authorization: null } }), 'no key');
await expect401(client('sk-wrong'), 'wrong key');
await expect401(client(`${key}x`), 'the key with a byte more');
await expect401(client(key.slice(0, -1)), 'the key without its last byte');
{
  const answer = await client(key).chat.completions.create(chatReq);
  check(answer.choices[0].message.content.length > 0 && answer.usage.completion_tokens === 4,
        'the right key: chat answered', JSON.stringify(answer));
  const stream = await client(key).chat.completions.create({ ...chatReq, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  check(text.length > 0, 'the right key: streamed chat answered');
}
{
  const res = await fetch(`${root}/v1/models`);
  const body = await res.json();
  check(res.status === 401 && res.headers.get('www-authenticate') === 'Bearer' &&
        JSON.stringify(Object.keys(body)) === '["error"]' &&
        body.error.type === 'invalid_request_error' && body.error.code === 'invalid_api_key' &&
        typeof body.error.message === 'string',
        'no key: the body is OpenAI\'s error object', `${res.status} ${JSON.stringify(body)}`);
  for (const [method, p] of [['GET', '/metrics'], ['GET', '/v1/tiers'], ['GET', '/props'],
                             ['POST', '/tokenize'], ['GET', '/no/such/path']]) {
    const r = await fetch(`${root}${p}`, { method, body: method === 'POST' ? '{}' : undefined });
    check(r.status === 401, `no key: ${method} ${p} is 401`, `${r.status}`);
  }
  const health = await fetch(`${root}/health`);
  const h = await health.json();
  check(health.status === 200 && h.status === 'ok' && h.api_key_required === true,
        'GET /health is open and says a key is required', JSON.stringify(h));
  for (const p of ['/', '/web/chat.js', '/web/chat.css', '/web/markdown.js']) {
    const r = await fetch(`${root}${p}`);
    check(r.status === 200 && (r.headers.get('content-security-policy') ?? '').includes("script-src 'self'"),
          `GET ${p} is open, with the page's CSP`, `${r.status}`);
  }
}

// --- 2. the page --------------------------------------------------------------------------
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const consoleErrors = [];
let expectErrors = false;  // the wrong-key step at the end makes 401s on purpose

async function newPage() {
  const page = await browser.newPage();
  await page.setViewport({ width: 1360, height: 860 });
  page.on('console', (m) => {
    if (m.type() === 'error' && !expectErrors) consoleErrors.push(`${m.text()} (${m.location()?.url ?? ''})`);
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  return page;
}

const focusedId = (page) => page.evaluate(() => document.activeElement?.id ?? '');

// Presses Tab (Shift+Tab with `back`) until the focused element matches `selector`; the
// keyboard must reach every control.
async function tabTo(page, selector, back = false) {
  for (let i = 0; i < 60; i++) {
    if (await page.evaluate((s) => document.activeElement?.matches(s) ?? false, selector)) return true;
    if (back) await page.keyboard.down('Shift');
    await page.keyboard.press('Tab');
    if (back) await page.keyboard.up('Shift');
  }
  fail(`Tab never reached ${selector}`);
  return false;
}

async function replaceField(page, text) {
  await page.keyboard.down('Control');
  await page.keyboard.press('a');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  await page.keyboard.type(text);
}

const answers = (page) => page.$$eval('.msg.assistant', (els) => els.length);
const lastAnswer = (page) => page.$eval('.msg.assistant:last-of-type', (e) => ({
  text: e.querySelector('.markdown').textContent,
  thinking: e.querySelector('.thinking-text').textContent,
  thinkingHidden: e.querySelector('.thinking').hidden,
  meta: e.querySelector('.msg-meta').textContent,
}));
const timings = (page) => page.evaluate(() => window.moetier.timings);
const waitDone = (page, n) => page.waitForFunction(
    (k) => window.moetier.timings.length >= k && window.moetier.timings[k - 1].done !== null, WAIT, n);

async function metricSum(name) {
  const text = await (await fetch(`${root}/metrics`, { headers: { Authorization: `Bearer ${key}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line.split(' ').pop());
}

const page = await newPage();
await page.goto(`${root}/`, { waitUntil: 'load' });
await page.waitForSelector('#key-dialog[open]', WAIT);
check(await focusedId(page) === 'key-input', 'the page asks for the key, focus in its field');
await page.keyboard.type(key);
await page.keyboard.press('Enter');
await page.waitForFunction(() => window.moetier.ready, WAIT);
check(await page.$eval('#model-name', (e) => e.textContent) === modelId, 'connected: the model is named');
check(await page.evaluate(() => localStorage.getItem('moetier.apiKey')) === key,
      'the key is kept in localStorage');
await page.waitForFunction(() => document.querySelector('#tier-storage').textContent.startsWith('stream'), WAIT);
check(await page.$eval('#tier-device', (e) => e.hidden), 'no --device: no GPU line in the panel');
const panelBefore = await page.$eval('#tier-generated', (e) => e.textContent);

// Settings by keyboard: the system prompt, greedy sampling (a sampled answer of the synthetic
// model may end early, at an end-of-generation token) and a short answer.
await page.evaluate(() => document.activeElement?.blur());
await tabTo(page, '#settings-toggle');
await page.keyboard.press('Enter');
check(await focusedId(page) === 'set-system', 'Enter on Settings opens them, focus in the system prompt');
await page.keyboard.type('Be terse.');
await tabTo(page, '#set-temperature');
await page.keyboard.type('0');
await tabTo(page, '#set-max_tokens');
await page.keyboard.type('24');
await tabTo(page, '#prompt');
await page.keyboard.type('Hello from the keyboard');
await page.keyboard.down('Shift');
await page.keyboard.press('Enter');
await page.keyboard.up('Shift');
await page.keyboard.type('second line');
check(await page.$eval('#prompt', (e) => e.value) === 'Hello from the keyboard\nsecond line' &&
      await page.$$eval('.msg.user', (els) => els.length) === 0,
      'Shift+Enter is a new line, nothing sent');
await page.keyboard.press('Enter');
await page.waitForFunction(() => document.querySelector('.msg.assistant .markdown')?.textContent.length > 0, WAIT);
ok('Enter sends; the answer streams into the page');
await waitDone(page, 1);
const first = await lastAnswer(page);
const firstTokens = Number.parseInt(first.meta, 10);  // "N tokens · ..."
{
  // At most 24 tokens: greedy may meet an end-of-generation token first.
  check(first.text.length > 0 && firstTokens > 0 && firstTokens <= 24 &&
        !/stopped|error/.test(first.meta), 'the answer is complete', JSON.stringify(first));
  check(await page.$eval('.msg.user .user-text', (e) => e.textContent) === 'Hello from the keyboard\nsecond line',
        'the message keeps its two lines');
  check(await focusedId(page) === 'prompt', 'focus stays in the message box');
  check(await page.$eval('#chat-title', (e) => e.textContent) === 'Hello from the keyboard second line',
        'the conversation is titled by its first message');
}
await page.waitForFunction((before, n) => {
  const now = document.querySelector('#tier-generated').textContent;
  return Number.parseInt(now, 10) >= Number.parseInt(before, 10) + n &&
         document.querySelector('#heat-summary').textContent.startsWith('hottest');
}, WAIT, panelBefore, firstTokens);
ok(`the tier panel moved: generated ${panelBefore} -> ` +
   `${await page.$eval('#tier-generated', (e) => e.textContent)}; ` +
   `hit rate ${await page.$eval('#tier-hit', (e) => e.textContent)}; ` +
   `reads ${await page.$eval('#tier-read', (e) => e.textContent)}`);

// The heat map's modes by keyboard: arrows move within the radio group.
await tabTo(page, 'input[name="heat-mode"]:checked');
await page.keyboard.press('ArrowRight');
await page.keyboard.press('ArrowRight');
await page.waitForFunction(() => /experts in the cache/.test(document.querySelector('#heat-summary').textContent), WAIT);
ok(`heat map by keyboard: ${await page.$eval('#heat-summary', (e) => e.textContent)}`);

// Regenerate: Shift+Tab back from the message box to the answer's button.
await tabTo(page, '#prompt');
await tabTo(page, '.regenerate', true);
await page.keyboard.press('Enter');
await waitDone(page, 2);
{
  const again = await lastAnswer(page);
  check(await answers(page) === 1 && again.text === first.text &&
        Number.parseInt(again.meta, 10) === firstTokens,
        'Regenerate replaces the answer (greedy: the same one)', JSON.stringify(again));
}

// Escape stops a long answer (in a new chat: greedy, this prompt runs to max_tokens); the
// server frees the slot.
await tabTo(page, '#set-max_tokens');
await replaceField(page, '400');
await tabTo(page, '#new-chat');
await page.keyboard.press('Enter');
check(await focusedId(page) === 'prompt' && await page.$$eval('.msg', (els) => els.length) === 0,
      'New chat by keyboard: an empty conversation, focus in the message box');
await page.keyboard.type('Tell me a long story');
await page.keyboard.press('Enter');
await page.waitForFunction(() => document.querySelector('.msg.assistant .markdown')?.textContent.length > 0, WAIT);
await page.keyboard.press('Escape');
await waitDone(page, 3);
{
  const a = await lastAnswer(page);
  check(a.meta.includes('stopped'), 'Escape stops the answer',
        `${a.meta} (had the greedy answer already ended before Escape?)`);
  check(await page.$eval('#stop', (e) => e.hidden) && !(await page.$eval('#send', (e) => e.hidden)) &&
        await focusedId(page) === 'prompt', 'after a stop: Send is back, focus in the message box');
  let busy = 1;
  for (let i = 0; i < 100 && busy !== 0; i++) {
    busy = (await (await fetch(`${root}/health`)).json()).slots_busy;
    if (busy !== 0) await new Promise((r) => setTimeout(r, 100));
  }
  check(busy === 0, `the stopped request's slot is free again (after ${a.text.length} characters)`);
}

// Conversations survive a reload; Markdown renders, and markup in an answer stays text.
await page.evaluate(() => {
  const list = JSON.parse(localStorage.getItem('moetier.conversations'));
  list.unshift({ id: 'md', title: 'Markdown', updated: Date.now(), messages: [
    { role: 'user', content: 'Show me' },
    { role: 'assistant', reasoning: '', content:
      '## Plan\n**bold** and `code`\n\n- one\n- two\n\n```js\nconst x = 1 < 2;\n```\n' +
      '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script> [x](javascript:alert(1))' },
  ] });
  localStorage.setItem('moetier.conversations', JSON.stringify(list));
});
await page.reload({ waitUntil: 'load' });
await page.waitForFunction(() => window.moetier.ready, WAIT);
{
  const md = await page.$eval('#messages', (m) => ({
    strong: m.querySelector('.markdown strong')?.textContent,
    code: m.querySelector('.markdown pre code')?.textContent,
    items: m.querySelectorAll('.markdown li').length,
    heading: m.querySelector('.markdown h4')?.textContent,
    tags: m.querySelectorAll('.markdown img, .markdown script, .markdown a').length,
    copy: m.querySelectorAll('.copy-code').length,
    text: m.querySelector('.msg.assistant .markdown').textContent,
  }));
  check(md.strong === 'bold' && md.code === 'const x = 1 < 2;' && md.items === 2 &&
        md.heading === 'Plan' && md.copy === 1, 'Markdown: heading, bold, list, code block', JSON.stringify(md));
  check(md.tags === 0 && md.text.includes('<script>') && !(await page.evaluate(() => window.pwned)),
        'markup in an answer stays text', JSON.stringify(md));
  const titles = await page.$$eval('.conv-open', (els) => els.map((e) => e.textContent));
  check(JSON.stringify(titles) ===
        '["Markdown","Tell me a long story","Hello from the keyboard second line"]',
        'conversations are kept over a reload, newest first', JSON.stringify(titles));
  await page.evaluate(() => document.activeElement?.blur());
  await tabTo(page, '.conv-open:not([aria-current])');
  await page.keyboard.press('Enter');
  check(await page.$$eval('.msg.user', (els) => els.length) === 1 && await answers(page) === 1 &&
        (await lastAnswer(page)).meta.includes('stopped'),
        'a conversation opens by keyboard with its messages (the stopped answer kept as such)');
}
const shot = path.join(shotDir, 'chat-page.png');
await page.screenshot({ path: shot });
console.log(`screenshot: ${shot}`);

// --- 3. timings: a fresh page load, then one message in a new conversation -----------------
await page.evaluate(() => {
  const s = JSON.parse(localStorage.getItem('moetier.settings'));
  localStorage.setItem('moetier.settings', JSON.stringify({ ...s, max_tokens: 8 }));
});
const rows = [];
for (let i = 0; i < 5; i++) {
  await page.reload({ waitUntil: 'load' });
  await page.waitForFunction(() => window.moetier.ready, WAIT);
  await page.click('#new-chat');
  const ttftSum = await metricSum('moetier_time_to_first_token_seconds_sum');
  const totalSum = await metricSum('moetier_request_duration_seconds_sum');
  await page.focus('#prompt');
  await page.keyboard.type('Hi');
  await page.keyboard.press('Enter');
  await waitDone(page, 1);
  const t = (await timings(page))[0];
  const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd);
  const serverTtft = 1e3 * ((await metricSum('moetier_time_to_first_token_seconds_sum')) - ttftSum);
  const serverTotal = 1e3 * ((await metricSum('moetier_request_duration_seconds_sum')) - totalSum);
  // The same request from a bare client (node's fetch): what HTTP and the server's work
  // before a job starts (template, tokenizer) add, without a browser.
  const bareTtftSum = await metricSum('moetier_time_to_first_token_seconds_sum');
  const bareStart = performance.now();
  const res = await fetch(`${root}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: modelId, stream: true, max_tokens: 8, messages: [
      { role: 'system', content: 'Be terse.' }, { role: 'user', content: 'Hi' }] }),
  });
  let bareFirst = null;
  let pending = '';
  for await (const text of res.body.pipeThrough(new TextDecoderStream())) {
    pending += text;
    const events = pending.split('\n\n');
    pending = events.pop();
    for (const e of events) {
      if (bareFirst !== null || !e.startsWith('data: {')) continue;
      if (JSON.parse(e.slice(6)).choices?.[0]?.delta?.content) bareFirst = performance.now() - bareStart;
    }
  }
  const bareServerTtft = 1e3 * ((await metricSum('moetier_time_to_first_token_seconds_sum')) - bareTtftSum);
  rows.push({ nav, sendToFirst: t.firstToken - t.sent, shown: t.firstShown - t.sent, serverTtft,
              serverTotal, pageTotal: t.done - t.sent, bareOver: bareFirst - bareServerTtft });
}
for (const r of rows) {
  console.log(`timing: page ready (DOMContentLoaded) ${r.nav.toFixed(0)} ms; send -> first token ` +
              `${r.sendToFirst.toFixed(1)} ms (on screen ${r.shown.toFixed(1)} ms), server's time ` +
              `to first token ${r.serverTtft.toFixed(1)} ms, page over server ` +
              `${(r.shown - r.serverTtft).toFixed(1)} ms; whole answer ${r.pageTotal.toFixed(0)} ms ` +
              `(server ${r.serverTotal.toFixed(0)} ms); a bare client over the server ` +
              `${r.bareOver.toFixed(1)} ms`);
}
check(rows.every((r) => r.serverTtft > 0 && r.sendToFirst > 0), 'timings measured');
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`timing: medians: page over server ${median(rows.map((r) => r.shown - r.serverTtft)).toFixed(1)} ms, ` +
            `server's time to first token ${median(rows.map((r) => r.serverTtft)).toFixed(1)} ms, ` +
            `page ${median(rows.map((r) => r.shown)).toFixed(1)} ms, ` +
            `bare client over server ${median(rows.map((r) => r.bareOver)).toFixed(1)} ms`);

// --- the thinking model: reasoning apart from the answer; no cache to show ------------------
const think = await newPage();
await think.goto(`${thinkRoot}/`, { waitUntil: 'load' });
await think.waitForFunction(() => window.moetier.ready, WAIT);
check(!(await think.$eval('#key-dialog', (d) => d.open)), 'no key asked where the server needs none');
await tabTo(think, '#settings-toggle');
await think.keyboard.press('Enter');
await tabTo(think, '#set-temperature');
await think.keyboard.type('0');
await tabTo(think, '#set-max_tokens');
await think.keyboard.type('12');
await tabTo(think, '#prompt');
await think.keyboard.type('Hi');
await think.keyboard.press('Enter');
await waitDone(think, 1);
{
  const a = await lastAnswer(think);
  check(!a.thinkingHidden && a.thinking.length > 0 && !a.text.includes(a.thinking),
        'thinking is shown apart from the answer', JSON.stringify(a));
  await think.waitForFunction(() => document.querySelector('#tier-storage').textContent.includes('no cache'), WAIT);
  ok(`resident storage: "${await think.$eval('#tier-storage', (e) => e.textContent)}"`);
  await tabTo(think, 'input[name="heat-mode"]:checked');
  await think.keyboard.press('ArrowLeft');  // wraps to "in cache now"
  check((await think.$eval('#heat-summary', (e) => e.textContent)).startsWith('no cache to show'),
        'the heat map says there is no cache');
  await think.$eval('.thinking', (d) => { d.open = true; });
  const thinkShot = path.join(shotDir, 'chat-page-thinking.png');
  await think.screenshot({ path: thinkShot });
  console.log(`screenshot: ${thinkShot}`);
}

check(consoleErrors.length === 0, 'no console errors', JSON.stringify(consoleErrors));

// A stored key the server refuses: the page asks again (its 401s are expected errors).
expectErrors = true;
await page.evaluate(() => localStorage.setItem('moetier.apiKey', 'sk-wrong'));
await page.reload({ waitUntil: 'load' });
await page.waitForSelector('#key-dialog[open]', WAIT);
check((await page.$eval('#key-reason', (e) => e.textContent)).includes('did not accept'),
      'a refused key: the page asks again');

await browser.close();
if (failures) {
  console.log(`${failures} failure(s)`);
  process.exit(1);
}
