// Function calling with the official openai npm client: node serve_tools.mjs BASE_URL MODEL.
// The model is synthetic (random weights), so what it says is noise; what is checked is the
// protocol: forced calls come back as tool_calls whose arguments satisfy their function's
// schema, streamed and not; a conversation with calls and tool results renders; bad tool
// requests get 400s. Prints "ok: ..." / "FAIL: ..." and exits 1 on any failure.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../tools/oracle/package.json'));
const { default: OpenAI } = await import(require.resolve('openai'));

const [baseURL, modelId] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
let failures = 0;
const check = (cond, what, detail = '') => {
  console.log(cond ? `ok: ${what}` : `FAIL: ${what} ${detail}`);
  if (!cond) failures++;
};

// Bounded schemas: a random model must finish a call within max_tokens.
const tools = [
  { type: 'function', function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', additionalProperties: false, required: ['city', 'unit'],
                  properties: { city: { type: 'string', maxLength: 12 },
                                unit: { enum: ['celsius', 'fahrenheit'] } } } } },
  { type: 'function', function: {
    name: 'add', parameters: { type: 'object', additionalProperties: false,
                               required: ['a', 'b'],
                               properties: { a: { type: 'integer' }, b: { type: 'integer' } } } } },
];
const validArgs = {
  get_weather: (a) => typeof a.city === 'string' && [...a.city].length <= 12 &&
                      ['celsius', 'fahrenheit'].includes(a.unit) && Object.keys(a).length === 2,
  add: (a) => Number.isInteger(a.a) && Number.isInteger(a.b) && Object.keys(a).length === 2,
};
const callsValid = (calls, only) => Array.isArray(calls) && calls.length > 0 &&
  calls.every((c) => c.type === 'function' && /^call_[0-9a-f]{16}$/.test(c.id) &&
                     (!only || c.function.name === only) && c.function.name in validArgs &&
                     validArgs[c.function.name](JSON.parse(c.function.arguments)));
const base = { model: modelId, max_tokens: 400, tools,
               messages: [{ role: 'user', content: 'What is the weather in Oslo?' }] };

// The template is Qwen3's: a hybrid thinking model. enable_thinking false: it answers at once
// (with thinking on, a random model would ramble in its <think> block; see below).
const noThinking = { chat_template_kwargs: { enable_thinking: false } };
for (const [temperature, seed] of [[0, 1], [1.0, 2], [1.0, 3]]) {
  const r = await client.chat.completions.create({ ...base, ...noThinking, temperature, seed,
                                                   tool_choice: 'required' });
  const c = r.choices[0];
  check(c.finish_reason === 'tool_calls' && c.message.content === null &&
        callsValid(c.message.tool_calls), `tool_choice required (temperature ${temperature})`,
        JSON.stringify(c));
}
{
  const r = await client.chat.completions.create({
    ...base, ...noThinking, temperature: 1.0, seed: 4, parallel_tool_calls: false,
    tool_choice: { type: 'function', function: { name: 'add' } } });
  const c = r.choices[0];
  check(c.finish_reason === 'tool_calls' && callsValid(c.message.tool_calls, 'add') &&
        c.message.tool_calls.length === 1, 'a named function, one call', JSON.stringify(c));
}
// Streamed: the deltas add up to the calls the same request gets whole.
{
  const req = { ...base, ...noThinking, temperature: 0, tool_choice: 'required' };
  const whole = (await client.chat.completions.create(req)).choices[0];
  const calls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    for (const d of ch.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: '', arguments: '' };
      calls[d.index].name += d.function?.name ?? '';
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
    finish = ch.finish_reason ?? finish;
  }
  check(finish === 'tool_calls' && JSON.stringify(calls) ===
        JSON.stringify(whole.message.tool_calls.map((c) => ({ name: c.function.name,
                                                              arguments: c.function.arguments }))),
        'streamed tool_calls match the whole response', JSON.stringify(calls));
}
// tool_choice auto: free text until the model opens a call; from its "<tool_call>" on, the
// call follows the schemas. A logit bias stands in for a model that wants to call.
{
  const root = baseURL.replace(/\/v1$/, '');
  const open = await (await fetch(`${root}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: '<tool_call>', add_special_tokens: false }) })).json();
  check(open.tokens?.length === 1, '"<tool_call>" is one token', JSON.stringify(open));
  for (const seed of [5, 6]) {
    const r = await client.chat.completions.create({
      ...base, temperature: 1.0, seed, parallel_tool_calls: false,
      logit_bias: { [open.tokens[0]]: 100 } });
    const c = r.choices[0];
    check(c.finish_reason === 'tool_calls' && callsValid(c.message.tool_calls) &&
          c.message.tool_calls.length === 1,
          `tool_choice auto: an opened call is well formed (seed ${seed})`, JSON.stringify(c));
  }
  const free = await client.chat.completions.create({ ...base, max_tokens: 6, temperature: 0 });
  check(free.choices[0].message.tool_calls === undefined &&
        typeof free.choices[0].message.content === 'string',
        'tool_choice auto without a call: plain content', JSON.stringify(free.choices[0]));
}
// tool_choice auto with a JSON response format (as agent frameworks send it): the output is
// calls or an answer in the format, from the first token. Biases stand in for a model that
// wants to call, and for one that answers.
{
  const root = baseURL.replace(/\/v1$/, '');
  const open = await (await fetch(`${root}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: '<tool_call>', add_special_tokens: false }) })).json();
  const response_format = { type: 'json_schema', json_schema: { name: 'answer', schema: {
    type: 'object', additionalProperties: false, required: ['answer'],
    properties: { answer: { type: 'string', maxLength: 8 } } } } };
  const calls = await client.chat.completions.create({
    ...base, temperature: 1.0, seed: 9, response_format,
    logit_bias: { [open.tokens[0]]: 100 } });
  check(calls.choices[0].finish_reason === 'tool_calls' &&
        callsValid(calls.choices[0].message.tool_calls),
        'tools with a response format: calls', JSON.stringify(calls.choices[0]));
  const answer = await client.chat.completions.create({
    ...base, ...noThinking, temperature: 1.0, seed: 9, response_format,
    logit_bias: { [open.tokens[0]]: -100 } });
  const c = answer.choices[0];
  let doc = null;
  try { doc = JSON.parse(c.message.content); } catch { /* checked below */ }
  check(c.finish_reason === 'stop' && c.message.tool_calls === undefined && doc !== null &&
        Object.keys(doc).join() === 'answer' && [...doc.answer].length <= 8,
        'tools with a response format: an answer in the format', JSON.stringify(c));
}
// With thinking on (the default), the model may reason before the calls "required" asks for:
// the grammar holds after its </think>. Biases stand in for a model that opens a block and
// soon closes it. (That "<tool_call>" inside the block stays words under tool_choice auto is
// checked by server_tests: a random model cannot be steered into writing it there.)
{
  const root = baseURL.replace(/\/v1$/, '');
  const ids = async (text) => (await (await fetch(`${root}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }) })).json()).tokens;
  const [open] = await ids('<think>');
  const [close] = await ids('</think>');
  const r = await client.chat.completions.create({
    ...base, temperature: 1.0, seed: 10, tool_choice: 'required',
    logit_bias: { [open]: 50, [close]: 100 } });
  const c = r.choices[0];
  check(c.finish_reason === 'tool_calls' && callsValid(c.message.tool_calls) &&
        c.message.reasoning_content === '',
        'tool_choice required with thinking: a think block, then calls', JSON.stringify(c));
}
// A conversation that went through a call renders and generates (auto: free text here).
{
  const r = await client.chat.completions.create({
    model: modelId, max_tokens: 8, temperature: 0, tools,
    messages: [
      { role: 'system', content: 'You help.' },
      { role: 'user', content: 'Add 2 and 3.' },
      { role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function',
                       function: { name: 'add', arguments: '{"a": 2, "b": 3}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '5' },
    ] });
  const c = r.choices[0];
  check(r.usage.prompt_tokens > 100 && ['stop', 'length', 'tool_calls'].includes(c.finish_reason),
        'a conversation with a call and its result', JSON.stringify(r.usage));
}
// tool_choice none: no tools offered, plain text.
{
  const r = await client.chat.completions.create({ ...base, max_tokens: 6, temperature: 0,
                                                   tool_choice: 'none' });
  const withTools = await client.chat.completions.create({ ...base, max_tokens: 6,
                                                           temperature: 0, tool_choice: 'auto' });
  check(r.choices[0].message.tool_calls === undefined &&
        r.usage.prompt_tokens < withTools.usage.prompt_tokens,
        'tool_choice none leaves the tools out of the prompt');
}
// A thinking model's <think> block comes back apart, as reasoning_content (a grammar
// stands in for a model that thinks), whole and streamed.
{
  const req = { model: modelId, max_tokens: 40, temperature: 1.0, seed: 8,
                messages: [{ role: 'user', content: 'Think first.' }],
                grammar: 'root ::= "<think>\\nhmm, " [a-z]{1,6} "\\n</think>\\n\\n" [a-z]{1,6}' };
  const whole = (await client.chat.completions.create(req)).choices[0];
  check(/^hmm, [a-z]{1,6}$/.test(whole.message.reasoning_content) &&
        /^[a-z]{1,6}$/.test(whole.message.content), 'reasoning_content apart from the answer',
        JSON.stringify(whole.message));
  let reasoning = '', content = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
    content += chunk.choices[0]?.delta?.content ?? '';
  }
  check(reasoning === whole.message.reasoning_content && content === whole.message.content,
        'streamed reasoning_content and content match the whole response',
        JSON.stringify({ reasoning, content }));
}
// Fill in the middle (OpenAI's suffix; Qwen3's vocabulary has <|fim_prefix|>, <|fim_suffix|>
// and <|fim_middle|>): the prompt is the prefix and the suffix between those three tokens.
{
  const root = baseURL.replace(/\/v1$/, '');
  const count = async (text) => (await (await fetch(`${root}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }) })).json()).tokens.length;
  const prefix = 'def add(a, b):\n    c = ', suffix = '\n    return c\n';
  const r = await client.completions.create({ model: modelId, prompt: prefix, suffix,
                                              max_tokens: 4, temperature: 0 });
  const want = (await count(prefix)) + (await count(suffix)) + 3;
  check(r.usage.prompt_tokens === want && typeof r.choices[0].text === 'string',
        'completions with a suffix: fill in the middle', JSON.stringify(r.usage));
}
// llama-server's /infill (llama.vscode's requests): the repo-level FIM prompt, its native
// response; the same greedy text as /v1/completions with that prompt's tokens.
{
  const root = baseURL.replace(/\/v1$/, '');
  const post = async (path, body) => {
    const res = await fetch(`${root}${path}`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, json: await res.json() };
  };
  const req = { input_prefix: 'def add(a, b):\n    ', input_suffix: '\n\nprint(add(1, 2))\n',
                input_extra: [{ filename: 'util.py', text: 'import os\n' }], prompt: 'return',
                n_predict: 6, temperature: 0, samplers: ['top_k'], t_max_predict_ms: 1000,
                cache_prompt: true };
  const r = await post('/infill', req);
  const j = r.json;
  const prompt = '<|repo_name|>myproject\n<|file_sep|>util.py\nimport os\n<|file_sep|>filename\n' +
                 '<|fim_prefix|>def add(a, b):\n    return<|fim_suffix|>\n\nprint(add(1, 2))\n' +
                 '<|fim_middle|>';
  check(r.status === 200 && j.prompt === prompt && j.stop === true &&
        j.tokens_predicted === 6 && j.stop_type === 'limit' && typeof j.content === 'string' &&
        j.timings?.predicted_n === 6 && j.timings?.prompt_n + j.timings?.cache_n ===
        j.tokens_evaluated && j.tokens_cached === j.tokens_evaluated + 5,
        '/infill: the repo-level FIM prompt and the native response', JSON.stringify(j));
  // Each piece is tokenized on its own (the file name apart from the file's text), as
  // llama-server does.
  const ids = [];
  for (const piece of ['<|repo_name|>', 'myproject\n', '<|file_sep|>', 'util.py\n',
                       'import os\n', '<|file_sep|>', 'filename\n', '<|fim_prefix|>',
                       'def add(a, b):\n    ', 'return', '<|fim_suffix|>',
                       '\n\nprint(add(1, 2))\n', '<|fim_middle|>']) {
    ids.push(...(await post('/tokenize', { prompt: piece, add_special_tokens: false })).json.tokens);
  }
  const same = await client.completions.create({ model: modelId, prompt: ids, max_tokens: 6,
                                                 temperature: 0 });
  check(ids.length === j.tokens_evaluated && same.choices[0].text === j.content,
        '/infill writes what /v1/completions writes from the same prompt',
        JSON.stringify([j.content, same.choices[0].text]));
  for (const [body, status, param] of [
    [{ input_prefix: 'a' }, 400, 'input_suffix'],
    [{ ...req, input_extra: [{ filename: 'f' }] }, 400, 'input_extra'],
    [{ ...req, stream: true }, 400, 'stream'],
  ]) {
    const e = await post('/infill', body);
    check(e.status === status && e.json.error?.param === param,
          `/infill refuses a bad body: ${status} naming ${param}`, JSON.stringify(e));
  }
}
// Bad tool requests.
for (const [body, param, what] of [
  [{ tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice',
   'a named function that is not among the tools'],
  [{ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools', 'a bad name'],
  [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string',
                                                                        format: 'uri' } } }],
     tool_choice: 'required' }, 'tools', 'a schema the grammar cannot express'],
  [{ tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice',
   'required calls and a response format'],
  [{ grammar: 'root ::= "a"' }, 'grammar', 'tools with a GBNF grammar'],
]) {
  try {
    await client.chat.completions.create({ ...base, ...body });
    check(false, what, 'accepted');
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === 400 && e.param === param,
          `${what}: 400 naming ${param}`, `${e.status} ${e.param} ${e.message}`);
  }
}
process.exit(failures ? 1 : 0);
