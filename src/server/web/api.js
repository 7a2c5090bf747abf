// The server's HTTP API as the page uses it: requests carry the stored API key, failures
// come back as ApiError (with the server's OpenAI-style message), and a streamed chat
// completion is read event by event. Paths are relative to the page, so the page also works
// behind a proxy that serves it under a sub-path.

const KEY_STORE = 'moetier.apiKey';

export class ApiError extends Error {
  constructor(status, message, code = '') {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const apiKey = {
  get() { return localStorage.getItem(KEY_STORE) ?? ''; },
  set(key) {
    if (key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
  },
};

function headers(extra = {}) {
  const key = apiKey.get();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function errorOf(res) {
  let message = `HTTP ${res.status}`;
  let code = '';
  try {
    const body = await res.json();
    message = body.error?.message ?? message;
    code = body.error?.code ?? '';
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, message, code);
}

export async function getJson(path, { signal } = {}) {
  const res = await fetch(path, { headers: headers(), signal });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// POSTs a streamed chat completion and calls onChunk with each parsed event until the
// stream's "[DONE]". An error event from the server throws ApiError; aborting `signal`
// throws the fetch's AbortError.
export async function streamChat(body, signal, onChunk) {
  const res = await fetch('v1/chat/completions', {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += value;
    for (let end; (end = pending.indexOf('\n\n')) >= 0;) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk.error.message, chunk.error.code ?? '');
        onChunk(chunk);
      }
    }
  }
}
