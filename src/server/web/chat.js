// The chat page: conversations kept in localStorage, answers streamed from
// /v1/chat/completions (thinking apart from the answer), settings, the API key, and the
// expert tier panel (tiers.js). Keyboard: Enter sends, Shift+Enter is a new line, Escape
// stops an answer; every control is a button, link or labelled field in reading order.
import { ApiError, apiKey, getJson, streamChat } from './api.js';
import { renderMarkdown } from './markdown.js';
import { TierPanel } from './tiers.js';

const CONVERSATIONS_STORE = 'moetier.conversations';
const SETTINGS_STORE = 'moetier.settings';
const RENDER_INTERVAL_MS = 50;  // while streaming, re-render an answer at most this often

const $ = (id) => document.getElementById(id);
const el = {
  newChat: $('new-chat'), list: $('conversations'), title: $('chat-title'),
  model: $('model-name'), settingsToggle: $('settings-toggle'), settings: $('settings'),
  settingsReset: $('settings-reset'), keyChange: $('key-change'), tiersToggle: $('tiers-toggle'),
  tiers: $('tiers'), banner: $('banner'), messages: $('messages'), emptyNote: $('empty-note'),
  composer: $('composer'), prompt: $('prompt'), send: $('send'), stop: $('stop'),
  keyDialog: $('key-dialog'), keyForm: $('key-form'), keyInput: $('key-input'),
  keyReason: $('key-reason'),
};

// Timings of each answer, performance.now() milliseconds (the browser test reads them).
window.moetier = { timings: [], ready: false };

// --- stored state ----------------------------------------------------------------------

function load(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

let conversations = load(CONVERSATIONS_STORE, []);  // newest first
let settings = load(SETTINGS_STORE, {});
let current = null;  // the conversation shown
let model = '';
let defaults = {};   // the server's sampling defaults (/props)

function save() {
  try {
    localStorage.setItem(CONVERSATIONS_STORE, JSON.stringify(conversations));
  } catch (e) {
    showBanner(`Could not save the conversations in this browser: ${e.message}`);
  }
}

function newConversation() {
  return { id: crypto.randomUUID(), title: 'New chat', updated: Date.now(), messages: [] };
}

// --- the banner (errors) -----------------------------------------------------------------

function showBanner(text, action) {
  el.banner.replaceChildren(document.createTextNode(text));
  if (action) {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = action.label;
    button.addEventListener('click', action.run);
    el.banner.append(' ', button);
  }
  el.banner.hidden = false;
}

function hideBanner() {
  el.banner.hidden = true;
  el.banner.replaceChildren();
}

// --- the API key ---------------------------------------------------------------------------

// Asks for a key; resolves true when the dialog was saved (an empty key: none). Callers that ask while the dialog is
// open (the chat and the tier panel both got a 401) share its answer.
let keyPrompt = null;
function askForKey(reason) {
  if (keyPrompt) return keyPrompt;
  el.keyReason.textContent = reason;
  el.keyInput.value = apiKey.get();
  el.keyDialog.returnValue = '';
  keyPrompt = new Promise((resolve) => {
    el.keyDialog.addEventListener('close', () => {
      const saved = el.keyDialog.returnValue === 'save';
      if (saved) apiKey.set(el.keyInput.value.trim());
      el.keyInput.value = '';
      keyPrompt = null;
      resolve(saved);
    }, { once: true });
    el.keyDialog.showModal();
    el.keyInput.focus();
  });
  return keyPrompt;
}

async function handleAuthError(error) {
  if (!(error instanceof ApiError) || error.status !== 401) return false;
  const saved = await askForKey(apiKey.get() ? 'The server did not accept the stored API key.'
                                             : 'This server needs an API key.');
  if (saved) {
    hideBanner();
    await connect();
  } else {
    showBanner('The server needs an API key.', { label: 'Enter API key', run: () => handleAuthError(error) });
  }
  return true;
}

// --- conversations list ------------------------------------------------------------------

function renderList() {
  el.list.replaceChildren(...conversations.map((c) => {
    const item = document.createElement('li');
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'conv-open';
    open.textContent = c.title;
    if (c === current) open.setAttribute('aria-current', 'true');
    open.addEventListener('click', () => select(c));
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'conv-delete';
    remove.textContent = '×';
    remove.setAttribute('aria-label', `Delete conversation: ${c.title}`);
    remove.addEventListener('click', () => removeConversation(c));
    item.append(open, remove);
    return item;
  }));
}

function select(conversation) {
  if (generation) generation.controller.abort();
  current = conversation;
  el.title.textContent = conversation.title;
  renderList();
  renderMessages();
  el.prompt.focus();
}

function removeConversation(conversation) {
  if (generation && current === conversation) generation.controller.abort();
  conversations = conversations.filter((c) => c !== conversation);
  save();
  if (current === conversation) {
    current = conversations[0] ?? newConversation();
    el.title.textContent = current.title;
    renderMessages();
  }
  renderList();
  (el.list.querySelector('.conv-open') ?? el.newChat).focus();
}

// --- messages ------------------------------------------------------------------------------

function messageView(message, index) {
  const view = document.createElement('article');
  view.className = `msg ${message.role}`;
  view.setAttribute('aria-label', message.role === 'user' ? 'You' : 'Answer');
  if (message.role === 'user') {
    const text = document.createElement('div');
    text.className = 'user-text';
    text.textContent = message.content;
    view.append(text);
    return view;
  }
  const thinking = document.createElement('details');
  thinking.className = 'thinking';
  const summary = document.createElement('summary');
  const thought = document.createElement('div');
  thought.className = 'thinking-text';
  thinking.append(summary, thought);
  const content = document.createElement('div');
  content.className = 'markdown';
  const meta = document.createElement('p');
  meta.className = 'msg-meta';
  const actions = document.createElement('div');
  actions.className = 'msg-actions';
  view.append(thinking, content, meta, actions);
  view.parts = { thinking, summary, thought, content, meta, actions };
  fillAnswer(view, message, index);
  return view;
}

// Writes an answer's state into its view (again at every render while it streams).
function fillAnswer(view, message, index) {
  const { thinking, summary, thought, content, meta, actions } = view.parts;
  const streaming = generation?.message === message;
  thinking.hidden = !message.reasoning;
  if (message.reasoning) {
    thought.textContent = message.reasoning;
    summary.textContent = streaming && !message.content ? 'Thinking…' : 'Thinking';
    // Open while the model thinks; folded once, when the answer starts.
    if (streaming && !message.content) thinking.open = true;
    if (streaming && message.content && !view.parts.folded) {
      thinking.open = false;
      view.parts.folded = true;
    }
  }
  content.innerHTML = renderMarkdown(message.content ?? '');
  const notes = [];
  if (message.tokens) notes.push(`${message.tokens} tokens`);
  if (message.tokensPerSecond) notes.push(`${message.tokensPerSecond.toFixed(1)} tokens/s`);
  if (message.stopped) notes.push('stopped');
  if (message.error) notes.push(`error: ${message.error}`);
  meta.textContent = streaming ? 'Answering…' : notes.join(' · ');
  const last = index === current.messages.length - 1;
  if (!streaming && last && actions.childElementCount === 0) {
    const regenerate = document.createElement('button');
    regenerate.type = 'button';
    regenerate.className = 'regenerate';
    regenerate.textContent = 'Regenerate';
    regenerate.addEventListener('click', () => regenerateLast());
    actions.append(regenerate);
  }
  if (streaming || !last) actions.replaceChildren();
}

function renderMessages() {
  const views = current.messages.map((m, i) => messageView(m, i));
  el.messages.replaceChildren(...(views.length ? views : [el.emptyNote]));
  el.messages.scrollTop = el.messages.scrollHeight;
}

// Copy buttons of code blocks (written by markdown.js).
el.messages.addEventListener('click', async (event) => {
  const button = event.target.closest('.copy-code');
  if (!button) return;
  const code = button.closest('.code-block')?.querySelector('code');
  try {
    await navigator.clipboard.writeText(code?.textContent ?? '');
    button.textContent = 'Copied';
  } catch {
    button.textContent = 'Copy failed';
  }
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
});

// --- settings ------------------------------------------------------------------------------

const NUMBER_FIELDS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];

function fillSettings() {
  const form = el.settings.elements;
  form.system.value = settings.system ?? '';
  for (const name of NUMBER_FIELDS) {
    form[name].value = settings[name] ?? '';
    form[name].placeholder = defaults[name] !== undefined ? String(defaults[name])
                                                          : form[name].placeholder;
  }
  form.thinking.value = settings.thinking ?? '';
}

el.settings.addEventListener('input', () => {
  const form = el.settings.elements;
  settings = { system: form.system.value, thinking: form.thinking.value };
  for (const name of NUMBER_FIELDS) {
    if (form[name].value !== '' && form[name].validity.valid) settings[name] = Number(form[name].value);
  }
  localStorage.setItem(SETTINGS_STORE, JSON.stringify(settings));
});
el.settings.addEventListener('submit', (event) => event.preventDefault());
el.settingsReset.addEventListener('click', () => {
  settings = {};
  localStorage.removeItem(SETTINGS_STORE);
  fillSettings();
});
el.keyChange.addEventListener('click', async () => {
  if (await askForKey('The key this page sends (empty: none).')) await connect();
  el.keyChange.focus();
});

function toggle(button, panel) {
  const open = button.getAttribute('aria-expanded') !== 'true';
  button.setAttribute('aria-expanded', String(open));
  panel.hidden = !open;
  return open;
}
el.settingsToggle.addEventListener('click', () => {
  if (toggle(el.settingsToggle, el.settings)) el.settings.elements.system.focus();
});
el.tiersToggle.addEventListener('click', () => {
  const open = toggle(el.tiersToggle, el.tiers);
  document.body.classList.toggle('tiers-hidden', !open);
});

// --- generation ----------------------------------------------------------------------------

let generation = null;  // { message, controller, view }

function requestBody(history) {
  const messages = [];
  if (settings.system?.trim()) messages.push({ role: 'system', content: settings.system });
  for (const m of history) {
    if (m.role === 'user' || m.content) messages.push({ role: m.role, content: m.content ?? '' });
  }
  const body = { model, messages, stream: true, stream_options: { include_usage: true } };
  for (const name of NUMBER_FIELDS) {
    if (settings[name] !== undefined) body[name] = settings[name];
  }
  if (settings.thinking) body.chat_template_kwargs = { enable_thinking: settings.thinking === 'on' };
  return body;
}

function setBusy(busy) {
  el.send.hidden = busy;
  el.stop.hidden = !busy;
  el.messages.setAttribute('aria-busy', String(busy));
  if (!busy && (document.activeElement === el.stop || document.activeElement === document.body)) {
    el.prompt.focus();
  }
}

async function generate() {
  const conversation = current;
  const history = conversation.messages.slice();
  const message = { role: 'assistant', content: '', reasoning: '' };
  conversation.messages.push(message);
  const controller = new AbortController();
  generation = { message, controller };
  const timing = { sent: performance.now(), firstToken: null, done: null, tokens: 0 };
  window.moetier.timings.push(timing);
  renderMessages();
  const view = el.messages.lastElementChild;
  setBusy(true);
  hideBanner();

  let lastRender = 0;
  let renderTimer = null;
  let failure = null;
  const render = () => {
    renderTimer = null;
    lastRender = performance.now();
    const nearBottom =
        el.messages.scrollHeight - el.messages.scrollTop - el.messages.clientHeight < 80;
    fillAnswer(view, message, conversation.messages.indexOf(message));
    if (nearBottom) el.messages.scrollTop = el.messages.scrollHeight;
  };
  try {
    await streamChat(requestBody(history), controller.signal, (chunk) => {
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.reasoning_content) message.reasoning += delta.reasoning_content;
      if (delta?.content) message.content += delta.content;
      if (chunk.usage) message.tokens = chunk.usage.completion_tokens;
      if (!delta?.content && !delta?.reasoning_content) return;
      if (timing.firstToken === null) {
        timing.firstToken = performance.now();
        render();  // the first token shows at once
        timing.firstShown = performance.now();
      } else if (renderTimer === null) {
        const wait = Math.max(0, RENDER_INTERVAL_MS - (performance.now() - lastRender));
        renderTimer = setTimeout(render, wait);
      }
    });
  } catch (error) {
    if (error.name === 'AbortError') {
      message.stopped = true;
    } else {
      message.error = error.message;
      failure = error;
    }
  } finally {
    clearTimeout(renderTimer);
    timing.done = performance.now();
    timing.tokens = message.tokens ?? 0;
    if (message.tokens > 1 && timing.firstToken !== null && timing.done > timing.firstToken) {
      message.tokensPerSecond = (message.tokens - 1) / ((timing.done - timing.firstToken) / 1000);
    }
    generation = null;
    conversation.updated = Date.now();
    save();
    if (current === conversation) {
      fillAnswer(view, message, conversation.messages.indexOf(message));
    }
    setBusy(false);
  }
  if (failure && !(await handleAuthError(failure))) {
    showBanner(`The answer failed: ${failure.message}`);
  }
}

async function send() {
  const text = el.prompt.value;
  if (!text.trim() || generation) return;
  if (!model) {
    showBanner('Not connected to the server yet.', { label: 'Retry', run: connect });
    return;
  }
  if (!conversations.includes(current)) conversations.unshift(current);
  if (current.messages.length === 0) {
    current.title = text.trim().replace(/\s+/g, ' ').slice(0, 48);
    el.title.textContent = current.title;
  }
  current.messages.push({ role: 'user', content: text });
  // Most recent first in the list.
  conversations = [current, ...conversations.filter((c) => c !== current)];
  el.prompt.value = '';
  save();
  renderList();
  await generate();
}

async function regenerateLast() {
  if (generation) return;
  const last = current.messages.at(-1);
  if (last?.role === 'assistant') current.messages.pop();
  el.prompt.focus();
  await generate();
}

function stop() {
  generation?.controller.abort();
}

el.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  send();
});
el.prompt.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
el.stop.addEventListener('click', stop);
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && generation && !el.keyDialog.open) {
    event.preventDefault();
    stop();
  }
});
el.newChat.addEventListener('click', () => {
  select(conversations.find((c) => c.messages.length === 0) ?? newConversation());
});

// --- start ---------------------------------------------------------------------------------

const tierPanel = new TierPanel({
  panel: el.tiers, storage: $('tier-storage'), device: $('tier-device'), tps: $('tier-tps'), hit: $('tier-hit'), read: $('tier-read'),
  stall: $('tier-stall'), evict: $('tier-evict'), generated: $('tier-generated'),
  slots: $('tier-slots'), canvas: $('heat'), summary: $('heat-summary'),
  layerRows: $('layer-rows'), modes: document.querySelectorAll('input[name="heat-mode"]'),
}, getJson, (error) => handleAuthError(error));

async function connect() {
  try {
    const health = await getJson('health');
    if (health.api_key_required === true && !apiKey.get()) {
      if (!(await askForKey('This server needs an API key.'))) {
        showBanner('The server needs an API key.', { label: 'Enter API key', run: connect });
        return;
      }
    }
    const [models, props] = await Promise.all([getJson('v1/models'), getJson('props')]);
    model = models.data[0].id;
    el.model.textContent = model;
    const params = props.default_generation_settings?.params ?? {};
    defaults = { temperature: params.temperature, top_p: params.top_p, top_k: params.top_k,
                 min_p: params.min_p };
    fillSettings();
    hideBanner();
    tierPanel.start();
    window.moetier.ready = true;
  } catch (error) {
    if (await handleAuthError(error)) return;
    showBanner(`Cannot reach the server: ${error.message}`, { label: 'Retry', run: connect });
  }
}

current = conversations[0] ?? newConversation();
el.title.textContent = current.title;
renderList();
renderMessages();
fillSettings();
connect();
