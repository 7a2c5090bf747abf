// Drives `moetier serve` with the official openai npm client (tools/oracle/node_modules),
// as serve_openai.sh starts it: node serve_openai.mjs BASE_URL MODEL_ID N_CTX.
// Prints "ok: ..." / "FAIL: ..." lines and exits 1 if anything failed.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../tools/oracle/package.json'));
const { default: OpenAI } = await import(require.resolve('openai'));

const [baseURL, modelId, nCtxArg] = process.argv.slice(2);
const nCtx = Number(nCtxArg);
const root = baseURL.replace(/\/v1$/, '');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

let failures = 0;
const ok = (what) => console.log(`ok: ${what}`);
const fail = (what) => { console.log(`FAIL: ${what}`); failures++; };
const check = (cond, what, detail = '') => (cond ? ok(what) : fail(`${what} ${detail}`));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metric(name) {
  const text = await (await fetch(`${root}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

async function waitIdle(what) {
  for (let i = 0; i < 50; i++) {
    const h = await (await fetch(`${root}/health`)).json();
    if (h.slots_busy === 0 && h.queue_depth === 0) return ok(`${what}: all slots free again`);
    await sleep(100);
  }
  fail(`${what}: slots still busy`);
}

// Expects `promise` to reject with an APIError of `status`; returns it.
async function refused(promise, status, what) {
  try {
    await promise;
    fail(`${what}: accepted`);
  } catch (e) {
    if (e instanceof OpenAI.APIError && e.status === status) {
      ok(`${what}: ${status}`);
      return e;
    }
    fail(`${what}: ${e}`);
  }
  return undefined;
}

const greedy = { temperature: 0, ignore_eos: true };

// --- models, health -----------------------------------------------------------------------
{
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === modelId, 'models.list names the model',
        JSON.stringify(models.data));
  const h = await (await fetch(`${root}/health`)).json();
  check(h.status === 'ok', 'GET /health', JSON.stringify(h));
}

// --- chat, streamed and not ---------------------------------------------------------------
const chatReq = { model: modelId, messages: [{ role: 'system', content: 'Be brief.' },
                                             { role: 'user', content: 'Hello there!' }],
                  max_tokens: 12, ...greedy };
const chat = await client.chat.completions.create(chatReq);
{
  const c = chat.choices[0];
  check(chat.object === 'chat.completion' && c.message.role === 'assistant' &&
        typeof c.message.content === 'string' && c.message.content.length > 0,
        'chat completion', JSON.stringify(chat));
  check(c.finish_reason === 'length', 'chat finish_reason length', c.finish_reason);
  check(chat.usage.completion_tokens === 12 && chat.usage.prompt_tokens > 0 &&
        chat.usage.total_tokens === chat.usage.prompt_tokens + 12, 'chat usage',
        JSON.stringify(chat.usage));
  const again = await client.chat.completions.create(chatReq);
  check(again.choices[0].message.content === c.message.content, 'greedy chat is repeatable');
}
{
  // The next turn of the conversation starts with the first turn's prompt, which a slot's KV
  // cache still holds: those tokens are reused (usage says how many), the answer is the same.
  const turn2 = { ...chatReq, messages: [...chatReq.messages,
    { role: 'assistant', content: chat.choices[0].message.content },
    { role: 'user', content: 'And then?' }] };
  const cachedAnswer = await client.chat.completions.create(turn2);
  const fullAnswer = await client.chat.completions.create({ ...turn2, cache_prompt: false });
  const cached = cachedAnswer.usage.prompt_tokens_details?.cached_tokens;
  check(cached >= chat.usage.prompt_tokens &&
        fullAnswer.usage.prompt_tokens_details.cached_tokens === 0 &&
        cachedAnswer.choices[0].message.content === fullAnswer.choices[0].message.content,
        'the next turn reuses the cached prompt, same answer',
        JSON.stringify([cachedAnswer.usage, fullAnswer.usage]));
  const cachedMetric = await metric('moetier_prompt_tokens_cached_total');
  check(cachedMetric >= cached, 'metrics count cached prompt tokens', String(cachedMetric));
}
{
  const stream = await client.chat.completions.create({ ...chatReq, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(text === chat.choices[0].message.content, 'streamed chat == non-streamed',
        JSON.stringify([text, chat.choices[0].message.content]));
  check(chunks > 3 && role === 'assistant' && finish === 'length', 'stream chunks',
        `${chunks} ${role} ${finish}`);
  check(usage && usage.completion_tokens === 12, 'stream usage chunk', JSON.stringify(usage));
  // The raw stream ends with [DONE].
  const raw = await (await fetch(`${baseURL}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...chatReq, max_tokens: 3, stream: true }) })).text();
  check(raw.startsWith('data: {') && raw.endsWith('data: [DONE]\n\n'), 'SSE ends with [DONE]',
        JSON.stringify(raw.slice(-40)));
}

// --- completions, stop, seed --------------------------------------------------------------
const compReq = { model: modelId, prompt: 'The quick brown fox', max_tokens: 16, ...greedy };
const comp = await client.completions.create(compReq);
{
  check(comp.object === 'text_completion' && comp.choices[0].text.length > 0 &&
        comp.usage.completion_tokens === 16, 'completion', JSON.stringify(comp));
  let text = '';
  for await (const chunk of await client.completions.create({ ...compReq, stream: true })) {
    text += chunk.choices[0]?.text ?? '';
  }
  check(text === comp.choices[0].text, 'streamed completion == non-streamed');
  const full = comp.choices[0].text;
  // A stop string from the middle of the text: the text ends before it.
  const stop = [...full].slice(4, 6).join('');
  const stopped = await client.completions.create({ ...compReq, stop: [stop] });
  check(stopped.choices[0].text === full.slice(0, full.indexOf(stop)) &&
        stopped.choices[0].finish_reason === 'stop', 'stop string',
        JSON.stringify([full, stop, stopped.choices[0].text]));
  const seeded = { ...compReq, temperature: 1.0, seed: 1234 };
  const s1 = await client.completions.create(seeded);
  const s2 = await client.completions.create(seeded);
  check(s1.choices[0].text === s2.choices[0].text, 'same seed, same sampled text');
  // Negative presence / frequency penalties favour the tokens already seen, so greedy
  // decoding falls into repeating them; the text must change.
  const favoured = await client.completions.create({ ...compReq, presence_penalty: -2,
                                                     frequency_penalty: -2 });
  check(favoured.choices[0].text !== full && favoured.usage.completion_tokens === 16,
        'presence and frequency penalties', JSON.stringify([full, favoured.choices[0].text]));
  const tokens = await client.completions.create({ ...compReq, prompt: [1, 2, 3], max_tokens: 2 });
  check(tokens.usage.prompt_tokens === 3, 'prompt as token ids', JSON.stringify(tokens.usage));
}

// --- logprobs and echo --------------------------------------------------------------------
{
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const lp = await client.completions.create({ ...compReq, logprobs: 2 });
  const l = lp.choices[0].logprobs;
  check(lp.choices[0].text === comp.choices[0].text && l.tokens.length === 16 &&
        l.token_logprobs.length === 16 && l.text_offset[0] === 0 &&
        l.text_offset.every((o, i) => i === 0 || o >= l.text_offset[i - 1]),
        'completion logprobs: one entry per token', JSON.stringify(l).slice(0, 300));
  // Greedy: each token is the most likely; its top_logprobs holds it and the alternatives.
  check(l.token_logprobs.every((v, i) => v <= 0 && Object.keys(l.top_logprobs[i]).length >= 2 &&
                                         Object.keys(l.top_logprobs[i]).length <= 3 &&
                                         Math.max(...Object.values(l.top_logprobs[i])) === v),
        'completion logprobs: greedy tokens are the top ones', JSON.stringify(l.top_logprobs[0]));
  const streamed = { tokens: [], token_logprobs: [] };
  for await (const chunk of await client.completions.create({ ...compReq, logprobs: 2,
                                                              stream: true })) {
    const cl = chunk.choices[0]?.logprobs;
    if (cl) {
      streamed.tokens.push(...cl.tokens);
      streamed.token_logprobs.push(...cl.token_logprobs);
    }
  }
  check(same(streamed.tokens, l.tokens) && same(streamed.token_logprobs, l.token_logprobs),
        'streamed completion logprobs == non-streamed');
  // lm-eval's loglikelihood request (local-completions, batch size 1): a batch of one
  // prompt of token ids, echo, one generated token, logprobs 1.
  const ids = [5, 17, 42, 99, 7, 23];
  const scoreReq = { model: modelId, prompt: [ids], echo: true, logprobs: 1, temperature: 0 };
  const ev = await client.completions.create({ ...scoreReq, max_tokens: 1 });
  const e = ev.choices[0].logprobs;
  check(e.token_logprobs.length === ids.length + 1 && e.token_logprobs[0] === null &&
        e.top_logprobs[0] === null && e.token_logprobs.slice(1).every((v) => v <= 0) &&
        e.top_logprobs.slice(1).every((t, i) => Math.max(...Object.values(t)) >=
                                                e.token_logprobs[i + 1]),
        'echo: an entry per prompt token (the first without a value) and the generated one',
        JSON.stringify(e.token_logprobs));
  const only = await client.completions.create({ ...scoreReq, max_tokens: 0 });
  const o = only.choices[0];
  check(o.logprobs.token_logprobs.length === ids.length && o.finish_reason === 'length' &&
        same(o.logprobs.token_logprobs, e.token_logprobs.slice(0, ids.length)) &&
        ev.choices[0].text.startsWith(o.text) && only.usage.completion_tokens === 0,
        'echo with max_tokens 0 scores the prompt only', JSON.stringify(o).slice(0, 300));
  // A batch of prompts (lm-eval with a batch size above 1): a choice per prompt, in order,
  // each what the prompt gets alone.
  const ids2 = [8, 3, 61];
  const batch = await client.completions.create({ ...scoreReq, prompt: [ids, ids2],
                                                  max_tokens: 1 });
  const alone2 = await client.completions.create({ ...scoreReq, prompt: [ids2], max_tokens: 1 });
  check(batch.choices.length === 2 && batch.choices.every((c, i) => c.index === i) &&
        same(batch.choices[0].logprobs, e) &&
        same(batch.choices[1].logprobs, alone2.choices[0].logprobs) &&
        batch.usage.prompt_tokens === ids.length + ids2.length &&
        batch.usage.completion_tokens === 2,
        'a batch of prompts: a choice each, as alone', JSON.stringify(batch.usage));
  const texts = await client.completions.create({ ...compReq,
                                                  prompt: ['Hello', 'The quick brown fox'] });
  check(texts.choices[1].text === comp.choices[0].text && texts.choices[0].text.length > 0,
        'a batch of text prompts', JSON.stringify(texts.choices.map((c) => c.text)));
  // n choices: with a seed, choice k samples as a single request with seed + k.
  const sampled = { ...chatReq, temperature: 1.0, seed: 7 };
  const three = await client.chat.completions.create({ ...sampled, n: 3 });
  const seed7 = await client.chat.completions.create(sampled);
  const seed9 = await client.chat.completions.create({ ...sampled, seed: 9 });
  check(three.choices.length === 3 && three.choices.every((c, i) => c.index === i) &&
        three.choices[0].message.content === seed7.choices[0].message.content &&
        three.choices[2].message.content === seed9.choices[0].message.content &&
        three.usage.completion_tokens === 36 &&
        three.usage.prompt_tokens === seed7.usage.prompt_tokens,
        'n = 3: three choices, choice k as seed + k', JSON.stringify(three.usage));
  // Streamed, the choices interleave; each chunk names its choice.
  const byIndex = ['', '', ''];
  const finishes = [null, null, null];
  let usage3 = null;
  for await (const chunk of await client.chat.completions.create({
    ...sampled, n: 3, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage3 = chunk.usage;
    for (const ch of chunk.choices) {
      byIndex[ch.index] += ch.delta.content ?? '';
      if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
    }
  }
  check(same(byIndex, three.choices.map((c) => c.message.content)) &&
        finishes.every((f) => f === 'length') && usage3?.completion_tokens === 36,
        'n = 3 streamed == not streamed', JSON.stringify([byIndex, finishes, usage3]));
  const streamedBatch = ['', ''];
  for await (const chunk of await client.completions.create({
    ...compReq, prompt: ['Hello', 'The quick brown fox'], stream: true })) {
    for (const ch of chunk.choices) streamedBatch[ch.index] += ch.text;
  }
  check(same(streamedBatch, texts.choices.map((c) => c.text)),
        'a batch of prompts streamed == not streamed', JSON.stringify(streamedBatch));
  const chatLp = await client.chat.completions.create({ ...chatReq, logprobs: true,
                                                        top_logprobs: 2 });
  const content = chatLp.choices[0].logprobs.content;
  const bytes = Buffer.from(content.flatMap((c) => c.bytes));
  check(content.length === 12 && bytes.toString('utf8') === chat.choices[0].message.content &&
        content.every((c) => c.top_logprobs.length === 2 &&
                             c.top_logprobs[0].logprob === c.logprob),
        'chat logprobs: the bytes of the entries are the text', JSON.stringify(content[0]));
  const streamedChat = [];
  for await (const chunk of await client.chat.completions.create({ ...chatReq, logprobs: true,
                                                                    top_logprobs: 2,
                                                                    stream: true })) {
    streamedChat.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  }
  check(same(streamedChat, content), 'streamed chat logprobs == non-streamed');
  await refused(client.chat.completions.create({ ...chatReq, top_logprobs: 2 }), 400,
                'top_logprobs without logprobs');
}

// --- the tokenizer endpoints (vLLM's and llama-server's shapes) ----------------------------
{
  const post = async (p, body) => (await fetch(`${root}${p}`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) })).json();
  const info = await (await fetch(`${root}/tokenizer_info`)).json();
  check('eos_token' in info && info.model_max_length === nCtx, 'GET /tokenizer_info',
        JSON.stringify(info).slice(0, 200));
  const t = await post('/tokenize', { prompt: 'The quick brown fox', add_special_tokens: false });
  const byIds = await client.completions.create({ ...compReq, prompt: t.tokens });
  check(Array.isArray(t.tokens) && t.count === t.tokens.length &&
        byIds.choices[0].text === comp.choices[0].text,
        '/tokenize ids prompt the model as the text does', JSON.stringify(t));
  const llama = await post('/tokenize', { content: 'The quick brown fox' });
  check(JSON.stringify(llama.tokens) === JSON.stringify(t.tokens), "llama-server's /tokenize form");
  const d = await post('/detokenize', { tokens: t.tokens });
  check(d.prompt === 'The quick brown fox' && d.content === d.prompt, '/detokenize round trip',
        JSON.stringify(d));
  // logit_bias: +100 makes greedy pick the token; an id outside the vocabulary is a 400.
  const k = await post('/tokenize', { prompt: 'K', add_special_tokens: false });
  const biased = await client.completions.create({ ...compReq, max_tokens: 1,
                                                   logit_bias: { [k.tokens[0]]: 100 } });
  check(biased.choices[0].text === 'K', 'logit_bias picks the token', biased.choices[0].text);
  await refused(client.completions.create({ ...compReq, logit_bias: { 99999999: 1 } }), 400,
                'logit_bias outside the vocabulary');
  // OLMoE's vocabulary has no fill-in-the-middle tokens.
  const noFim = await refused(client.completions.create({ ...compReq, suffix: '\n}' }), 400,
                              'a suffix on a model without FIM tokens');
  check(noFim?.param === 'suffix', 'the FIM refusal names suffix', String(noFim?.param));
  const infill = await fetch(`${root}/infill`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_prefix: 'a', input_suffix: 'b' }) });
  const infillBody = await infill.json();
  check(infill.status === 501 && infillBody.error?.type === 'not_supported_error',
        '/infill on a model without FIM tokens: 501 as llama-server', JSON.stringify(infillBody));
  // llama-server's /completion: the same greedy text as /v1/completions, whole and streamed
  // (its events' content pieces, then a final object with stop true and the timings).
  const native = { prompt: 'The quick brown fox', n_predict: 8, temperature: 0 };
  const oai = await client.completions.create({ model: modelId, prompt: native.prompt,
                                                max_tokens: 8, temperature: 0 });
  const whole = await post('/completion', native);
  check(whole.content === oai.choices[0].text && whole.stop === true &&
        whole.tokens_predicted === 8 && whole.stop_type === 'limit' &&
        whole.tokens_evaluated === oai.usage.prompt_tokens && whole.timings?.predicted_n === 8,
        "/completion: llama-server's native response, /v1/completions' text",
        JSON.stringify([whole, oai.choices[0].text]));
  const sse = await (await fetch(`${root}/completion`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...native, stream: true }) })).text();
  const events = sse.split('\n\n').filter((e) => e.startsWith('data: '))
    .map((e) => JSON.parse(e.slice(6)));
  const last = events.at(-1);
  check(events.slice(0, -1).every((e) => e.stop === false) && last?.stop === true &&
        last?.content === '' && events.map((e) => e.content).join('') === whole.content &&
        last?.timings?.predicted_n === 8 && !sse.includes('[DONE]'),
        '/completion streamed: pieces, then the final object (no [DONE])', sse.slice(0, 300));
  const props = await (await fetch(`${root}/props`)).json();
  check(props.default_generation_settings?.n_ctx === nCtx && props.total_slots >= 1 &&
        props.default_generation_settings.params?.temperature === 0.8 &&
        typeof props.model_path === 'string' && 'chat_template' in props,
        "GET /props: llama-server's context size, slots and template", JSON.stringify(props).slice(0, 300));
  const nprobs = await post('/completion', { ...native, n_probs: 3 });
  check(nprobs.error?.param === 'n_probs', '/completion refuses n_probs, naming it',
        JSON.stringify(nprobs));
  const bad = await post('/detokenize', { tokens: [1, 1e9] });
  check(bad.error && bad.error.param === 'tokens', '/detokenize names a bad id',
        JSON.stringify(bad));
}

// --- constrained output: response_format, json schemas, GBNF grammars ---------------------
{
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 12 }, n: { type: 'integer' },
                  tags: { type: 'array', items: { enum: ['red', 'green'] }, maxItems: 3 },
                  ok: { type: 'boolean' } },
    required: ['name', 'n', 'tags'], additionalProperties: false,
  };
  const valid = (v) => v !== null && typeof v === 'object' && typeof v.name === 'string' &&
    [...v.name].length <= 12 && Number.isInteger(v.n) && Array.isArray(v.tags) &&
    v.tags.length <= 3 && v.tags.every((t) => t === 'red' || t === 'green') &&
    (v.ok === undefined || typeof v.ok === 'boolean') &&
    Object.keys(v).every((k) => k in schema.properties);
  const parse = (text) => { try { return JSON.parse(text); } catch { return undefined; } };
  for (const [temperature, seed] of [[0, 1], [1.0, 2], [1.0, 3]]) {
    const r = await client.chat.completions.create({
      ...chatReq, temperature, seed, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: 'item', strict: true, schema } } });
    const text = r.choices[0].message.content;
    check(r.choices[0].finish_reason === 'stop' && valid(parse(text)),
          `json_schema output validates (temperature ${temperature})`, text);
    check(Object.keys(parse(text) ?? {}).join(',').startsWith('name,n,tags'),
          'properties come in the declared order', text);
  }
  // Streamed: the chunks add up to the same document.
  const whole = await client.chat.completions.create({
    ...chatReq, max_tokens: 400, json_schema: schema });
  let streamed = '';
  for await (const chunk of await client.chat.completions.create({
    ...chatReq, max_tokens: 400, json_schema: schema, stream: true })) {
    streamed += chunk.choices[0]?.delta?.content ?? '';
  }
  check(streamed === whole.choices[0].message.content && valid(parse(streamed)),
        "streamed json_schema (llama-server's field) gives the same document", streamed);
  // json_object: a JSON object, whatever its keys.
  const obj = await client.chat.completions.create({
    ...chatReq, temperature: 1.0, seed: 5, max_tokens: 400,
    response_format: { type: 'json_object' } });
  const o = obj.choices[0];
  check(o.finish_reason === 'length' ||
        (parse(o.message.content) !== null && typeof parse(o.message.content) === 'object' &&
         !Array.isArray(parse(o.message.content))),
        'json_object output is an object', o.message.content);
  check(o.message.content.startsWith('{'), 'json_object output starts an object');
  // A GBNF grammar (llama-server's `grammar`) through completions.
  const yesno = await client.completions.create({
    model: modelId, prompt: 'Is it?', max_tokens: 8, temperature: 1.0, seed: 9,
    grammar: 'root ::= ("yes" | "no") "."' });
  check(['yes.', 'no.'].includes(yesno.choices[0].text) &&
        yesno.choices[0].finish_reason === 'stop', 'grammar output', yesno.choices[0].text);
  let e = await refused(client.chat.completions.create({
    ...chatReq, response_format: { type: 'json_schema',
                                   json_schema: { name: 'x', schema: { type: 'string',
                                                                       pattern: '^a+$' } } } }),
                        400, 'a schema keyword the server cannot honour');
  if (e) check(e.param === 'response_format' && e.message.includes("'pattern'"),
               'the error names the keyword', JSON.stringify(e.error));
  // This model's chat format (tulu) has no tool calls: tools are refused, naming why.
  e = await refused(client.chat.completions.create({
    ...chatReq, tools: [{ type: 'function', function: { name: 'f' } }] }), 400,
                    'tools on a model whose chat format has none');
  if (e) check(e.param === 'tools' && e.message.includes('tulu'), 'the error names the format',
               JSON.stringify(e.error));
  const none = await client.chat.completions.create({
    ...chatReq, tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'none' });
  check(none.choices[0].message.content === chat.choices[0].message.content,
        'tool_choice none: the tools are left out, the answer is the plain one');
  e = await refused(client.completions.create({ model: modelId, prompt: 'x',
                                                grammar: 'root ::= "a" | b' }),
                    400, 'a grammar with an undefined rule');
  if (e) check(e.param === 'grammar' && e.message.includes("rule 'b' is not defined"),
               'the error names the rule', JSON.stringify(e.error));
}

// --- errors -------------------------------------------------------------------------------
{
  let e = await refused(client.chat.completions.create({ ...chatReq, model: 'gpt-4o' }), 400,
                        'unknown model');
  if (e) check(e.code === 'model_not_found' && e.param === 'model' &&
               e.type === 'invalid_request_error', 'unknown model error object',
               JSON.stringify(e.error));
  e = await refused(client.chat.completions.create({ ...chatReq, max_tokens: 'ten' }), 400,
                    'wrong type');
  if (e) check(e.param === 'max_tokens', 'wrong type names the field', JSON.stringify(e.error));
  e = await refused(client.chat.completions.create({ model: modelId }), 400, 'missing messages');
  if (e) check(e.param === 'messages', 'missing field names it', JSON.stringify(e.error));
  e = await refused(client.completions.create({ ...compReq, temperature: 5 }), 400,
                    'temperature out of range');
  e = await refused(client.completions.create({ ...compReq, prompt: 'word '.repeat(nCtx * 2) }),
                    400, 'prompt longer than the context');
  if (e) check(e.code === 'context_length_exceeded', 'context_length_exceeded',
               JSON.stringify(e.error));
  e = await refused(client.completions.create({ ...compReq, prompt: [999999999] }), 400,
                    'token id outside the vocabulary');
  for (const [body, what] of [['{"model": ', 'malformed JSON'], ['[1, 2]', 'not an object'],
                              ['', 'empty body']]) {
    const r = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const j = await r.json();
    check(r.status === 400 && typeof j.error?.message === 'string' &&
          j.error.type === 'invalid_request_error' && 'param' in j.error && 'code' in j.error,
          `${what}: 400 with an error object`, `${r.status} ${JSON.stringify(j)}`);
  }
  const r = await fetch(`${baseURL}/nowhere`);
  check(r.status === 404 && (await r.json()).error, 'unknown path: 404 error object');
}

// --- 32 concurrent greedy requests == each alone ------------------------------------------
{
  const reqs = [];
  for (let i = 0; i < 32; i++) {
    const n = 6 + (i % 7) * 2;
    if (i % 3 === 0) {
      reqs.push({ kind: 'chat', stream: i % 2 === 1,
                  body: { model: modelId, max_tokens: n, ...greedy,
                          messages: [{ role: 'user', content: `Question ${i}: why ${i * 7}?` }] } });
    } else {
      reqs.push({ kind: 'comp', stream: i % 2 === 1,
                  body: { model: modelId, max_tokens: n, ...greedy,
                          prompt: `Request number ${i} says ${'la '.repeat(i % 5)}` } });
    }
  }
  // Seeded sampling is batch-invariant too.
  reqs[5].body = { ...reqs[5].body, temperature: 0.9, seed: 77 };
  async function run(r) {
    if (r.kind === 'chat') {
      if (!r.stream) return (await client.chat.completions.create(r.body)).choices[0].message.content;
      let t = '';
      for await (const c of await client.chat.completions.create({ ...r.body, stream: true })) {
        t += c.choices[0]?.delta?.content ?? '';
      }
      return t;
    }
    if (!r.stream) return (await client.completions.create(r.body)).choices[0].text;
    let t = '';
    for await (const c of await client.completions.create({ ...r.body, stream: true })) {
      t += c.choices[0]?.text ?? '';
    }
    return t;
  }
  const alone = [];
  for (const r of reqs) alone.push(await run(r));
  const stepsBefore = await metric('moetier_decode_steps_total');
  const t0 = Date.now();
  const together = await Promise.all(reqs.map(run));
  const seconds = (Date.now() - t0) / 1000;
  const steps = (await metric('moetier_decode_steps_total')) - stepsBefore;
  const bad = together.map((t, i) => (t === alone[i] ? -1 : i)).filter((i) => i >= 0);
  check(bad.length === 0, '32 concurrent requests each get their text alone',
        `differ: ${bad.join(',')}`);
  const tokens = reqs.reduce((s, r) => s + r.body.max_tokens, 0);
  // Alone, every token is a step of its own; batched, slots share steps.
  check(steps < tokens, `continuous batching: ${tokens} tokens in ${steps} steps ` +
        `(${seconds.toFixed(2)} s)`, `${steps} >= ${tokens}`);
}

// --- disconnects cancel their sequence ----------------------------------------------------
{
  const cancelledBefore = await metric('moetier_requests_cancelled_total');
  const stream = await client.chat.completions.create({ ...chatReq, max_tokens: 100000,
                                                        stream: true });
  let n = 0;
  for await (const chunk of stream) {
    if (++n === 3) break;  // leaving the loop aborts the request
  }
  const ac = new AbortController();
  const pending = client.completions.create({ ...compReq, max_tokens: 100000 },
                                            { signal: ac.signal }).catch(() => 'aborted');
  await sleep(300);
  ac.abort();
  check((await pending) === 'aborted', 'non-streamed request aborted by the client');
  await waitIdle('after two disconnects');
  // On a loaded machine the second request may reach the scheduler after the health check
  // saw it idle: wait for the count (up to 10 s) rather than read it once.
  let cancelled = 0;
  for (let i = 0; i < 100; i++) {
    cancelled = (await metric('moetier_requests_cancelled_total')) - cancelledBefore;
    if (cancelled >= 2) break;
    await sleep(100);
  }
  check(cancelled === 2, 'both disconnects cancelled their sequences', `${cancelled}`);
}

// --- a full queue gets 503 with Retry-After -----------------------------------------------
{
  const acs = [], statuses = [];
  let retryAfter = '1';  // the first refusal without "Retry-After: 1" replaces it
  const body = JSON.stringify({ ...compReq, max_tokens: 100000 });
  const all = [];
  for (let i = 0; i < 48; i++) {
    const ac = new AbortController();
    acs.push(ac);
    all.push(fetch(`${baseURL}/completions`, { method: 'POST', body, signal: ac.signal,
                                               headers: { 'content-type': 'application/json' } })
      .then(async (r) => {
        statuses.push(r.status);
        if (r.status === 503) {
          if (r.headers.get('retry-after') !== '1') retryAfter = r.headers.get('retry-after');
          await r.json();
        }
      }).catch(() => {}));
  }
  // 48 requests against 4 slots and 32 queue places: 12 refusals when they arrive faster
  // than sequences end (each runs to the end of its context). On a loaded machine arrivals
  // are slower and fewer overflow, so the check asks for refusals, not their number.
  const refusals = () => statuses.filter((s) => s === 503).length;
  for (let i = 0; i < 200 && refusals() < 48 - 36 && statuses.length < 48; i++) await sleep(50);
  acs.forEach((ac) => ac.abort());
  await Promise.all(all);
  const n503 = refusals();
  check(n503 >= 1 && retryAfter === '1', `full queue: ${n503} x 503 with Retry-After`,
        `${statuses} retry-after ${retryAfter}`);
  await waitIdle('after the flood');
  const after = await client.completions.create({ ...compReq });
  check(after.choices[0].text === comp.choices[0].text, 'serving goes on after the flood');
}

// --- metrics ------------------------------------------------------------------------------
{
  const text = await (await fetch(`${root}/metrics`)).text();
  for (const want of ['moetier_requests_total{endpoint="/v1/chat/completions",code="200"}',
                      'moetier_requests_total{endpoint="/v1/completions",code="503"}',
                      'moetier_request_duration_seconds_bucket{le="+Inf"}',
                      'moetier_prompt_tokens_total', 'moetier_generated_tokens_total',
                      'moetier_queue_depth', 'moetier_expert_hits_total{tier="stream"}',
                      'moetier_expert_misses_total{tier="stream"}',
                      'moetier_expert_read_bytes_total{tier="stream"}',
                      'moetier_expert_stall_seconds_total{tier="stream"}',
                      'moetier_expert_disk_idle_seconds_total{tier="stream"}',
                      'moetier_expert_cache_slots{tier="stream"}']) {
    check(text.includes(want), `metrics has ${want}`);
  }
}

process.exit(failures ? 1 : 0);
