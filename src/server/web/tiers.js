// The expert tier panel: polls GET /v1/tiers every second. Its counters are cumulative, so
// the rates shown (tokens/s, hit rate now, disk reads, stall) come from the last two polls;
// the heat map shows experts by layer: routing counts (all, or the last 10 s) or what the
// stream tier's cache holds now.

const POLL_MS = 1000;
const RECENT_S = 10;

const pct = (x) => `${(100 * x).toFixed(x < 0.1 ? 1 : 0)} %`;

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function stepSeconds(t) { return t.tokens.decode_seconds + t.tokens.mixed_seconds; }

export class TierPanel {
  // `el`: the panel's elements (index.html); `getJson(path)`: the API; `onAuthError(error)`:
  // a 401 (polling stops until start() is called again).
  constructor(el, getJson, onAuthError) {
    this.el = el;
    this.getJson = getJson;
    this.onAuthError = onAuthError;
    this.samples = [];  // the polls of the last RECENT_S seconds, oldest first
    this.running = false;
    this.lastTps = null;
    this.mode = 'total';
    for (const radio of el.modes) {
      radio.addEventListener('change', () => {
        this.mode = radio.value;
        this.drawHeat();
      });
    }
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.poll();
  }

  async poll() {
    if (this.el.panel.hidden) {  // folded away: ask again once it shows
      setTimeout(() => this.poll(), POLL_MS);
      return;
    }
    try {
      this.update(await this.getJson('v1/tiers'));
    } catch (error) {
      if (error.status === 401) {
        this.running = false;
        this.onAuthError(error);
        return;
      }
      this.el.storage.textContent = `No tier data: ${error.message}`;
    }
    setTimeout(() => this.poll(), POLL_MS);
  }

  // What runs on a GPU (--device, --gpu-expert-cache), or nothing shown without one.
  showDevice(d, x) {
    this.el.device.hidden = !d;
    if (!d) return;
    const held = [];
    if (d.attention_layers) held.push(`attention of ${d.attention_layers} layers`);
    if (d.output_head) held.push('the output head');
    if (d.swiglu_layers) held.push(`shared experts or dense FFN of ${d.swiglu_layers} layers`);
    if (d.experts) {
      const runs = d.expert_runs + x.requests;
      held.push(`${d.experts} experts (${bytes(d.expert_bytes)}), ` +
                `${runs ? pct(d.expert_runs / runs) : '0 %'} of expert runs`);
    }
    this.el.device.textContent = `GPU ${d.name}: ${held.join(', ') || 'nothing'}`;
  }

  update(t) {
    const now = t.uptime_seconds;
    this.samples = this.samples.filter((s) => now - s.uptime_seconds <= RECENT_S);
    const prev = this.samples.at(-1);
    this.samples.push(t);
    this.latest = t;
    const el = this.el;
    const x = t.experts;
    const experts = t.n_layer * t.n_expert;
    el.storage.textContent =
        t.storage === 'stream' ? `stream: a cache of ${t.cache_slots} of ${experts} experts`
        : t.storage === 'resident' ? 'resident: every expert in RAM, no cache'
        : t.storage === 'mmap' ? 'mmap: experts read from the file mapping; the page cache decides what stays'
        : t.storage;

    if (el.device) this.showDevice(t.device, x);

    const dt = prev ? now - prev.uptime_seconds : 0;
    const dGenerated = prev ? t.tokens.generated - prev.tokens.generated : 0;
    const dStep = prev ? stepSeconds(t) - stepSeconds(prev) : 0;
    // The pace of decoding: generated tokens over the time of steps that only decode (as
    // llama-server's predicted_per_second leaves out the prompt).
    const dDecoded = prev ? t.tokens.decode_generated - prev.tokens.decode_generated : 0;
    const dDecodeSeconds = prev ? t.tokens.decode_seconds - prev.tokens.decode_seconds : 0;
    if (dDecoded > 0 && dDecodeSeconds > 0) this.lastTps = dDecoded / dDecodeSeconds;
    el.tps.textContent = this.lastTps === null ? '–'
        : dGenerated > 0 ? `${this.lastTps.toFixed(1)}`
        : `idle (last ${this.lastTps.toFixed(1)})`;

    const dRequests = prev ? x.requests - prev.experts.requests : 0;
    const total = x.requests > 0 ? pct(x.hit_rate) : '–';
    el.hit.textContent = dRequests > 0
        ? `${pct((x.hits - prev.experts.hits) / dRequests)} now · ${total} in all` : total;

    const dRead = prev ? x.read_bytes - prev.experts.read_bytes : 0;
    el.read.textContent = t.storage !== 'stream' ? 'none (no cache to fill)'
        : `${dt > 0 ? bytes(dRead / dt) : '0 B'}/s · ${bytes(x.read_bytes)} in all`;

    const dStall = prev ? x.demand_stall_seconds - prev.experts.demand_stall_seconds : 0;
    el.stall.textContent = dStep > 0
        ? `${pct(dStall / dStep)} of step time · ${x.demand_stall_seconds.toFixed(2)} s in all`
        : `${x.demand_stall_seconds.toFixed(2)} s in all`;

    const dEvict = prev ? x.evictions - prev.experts.evictions : 0;
    el.evict.textContent = `${dt > 0 ? (dEvict / dt).toFixed(1) : '0'}/s · ${x.evictions} in all`;
    el.generated.textContent = `${t.tokens.generated} tokens`;
    el.slots.textContent = `${t.slots.busy} of ${t.slots.total}` +
                           (t.queue_depth ? ` · ${t.queue_depth} waiting` : '');
    this.drawHeat();
    this.fillLayers(t);
  }

  // The heat map's values, (n_layer) rows of (n_expert), or null when there are none.
  heatRows() {
    const t = this.latest;
    if (this.mode === 'resident') {
      return t.resident?.map((row) => Array.from(row, (c) => (c === '1' ? 1 : 0))) ?? null;
    }
    const counts = t.routing.counts;
    if (this.mode === 'recent') {
      const old = this.samples[0].routing.counts;
      return counts.map((row, l) => row.map((c, e) => c - (old[l]?.[e] ?? 0)));
    }
    return counts;
  }

  drawHeat() {
    const t = this.latest;
    if (!t) return;
    const { canvas, summary } = this.el;
    const rows = this.heatRows();
    const ctx = canvas.getContext('2d');
    canvas.hidden = !rows || rows.length === 0 || t.n_expert === 0;
    if (canvas.hidden) {
      const why = this.mode === 'resident' ? `no cache to show (${t.storage})` : 'no experts';
      summary.textContent = why;
      canvas.setAttribute('aria-label', `Heat map: ${why}`);
      return;
    }
    const cw = Math.max(2, Math.floor(320 / t.n_expert));
    const ch = Math.max(3, Math.min(14, Math.floor(360 / t.n_layer)));
    canvas.width = cw * t.n_expert;
    canvas.height = ch * t.n_layer;
    const hot = [];  // [share of its layer, layer, expert]
    for (let l = 0; l < rows.length; l++) {
      const row = rows[l];
      const max = Math.max(...row);
      const sum = row.reduce((a, b) => a + b, 0);
      for (let e = 0; e < row.length; e++) {
        const v = max > 0 ? row[e] / max : 0;
        // Pale for none, deep orange for the layer's busiest expert.
        ctx.fillStyle = v === 0 ? '#eef0f4' : `hsl(${28 - 20 * v} 90% ${88 - 48 * v}%)`;
        ctx.fillRect(e * cw, l * ch, cw - (cw > 3 ? 1 : 0), ch - 1);
        if (sum > 0 && row[e] > 0) hot.push([row[e] / sum, l, e]);
      }
    }
    let text;
    if (this.mode === 'resident') {
      const held = rows.reduce((a, row) => a + row.reduce((x, y) => x + y, 0), 0);
      text = `${held} of ${t.n_layer * t.n_expert} experts in the cache`;
    } else {
      hot.sort((a, b) => b[0] - a[0]);
      text = hot.length === 0 ? 'no routing yet'
          : 'hottest: ' + hot.slice(0, 3).map(([s, l, e]) => `layer ${l} expert ${e} (${pct(s)})`)
                .join(', ');
    }
    summary.textContent = text;
    canvas.setAttribute('aria-label',
                        `Heat map of ${t.n_layer} layers by ${t.n_expert} experts: ${text}`);
  }

  fillLayers(t) {
    const cells = (values) => {
      const tr = document.createElement('tr');
      values.forEach((v, i) => {
        const cell = document.createElement(i === 0 ? 'th' : 'td');
        if (i === 0) cell.scope = 'row';
        cell.textContent = v;
        tr.append(cell);
      });
      return tr;
    };
    this.el.layerRows.replaceChildren(...t.layers.map((c, l) => cells([
      String(l),
      c.requests ? pct(c.hits / c.requests) : '–',
      c.resident === null ? '–' : `${c.resident} of ${t.n_expert}`,
      bytes(c.read_bytes),
      `${c.demand_stall_seconds.toFixed(2)} s`,
    ])));
  }
}
