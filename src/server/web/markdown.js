// A small Markdown renderer for model output. Every character of the source is
// HTML-escaped before any rule runs, so the only markup in the result is what the rules
// below write: fenced code, inline code, headings, emphasis, strike-through, links
// (http, https and mailto only), lists, block quotes, rules, tables, paragraphs.
// Unfinished constructs (a fence still open while an answer streams) render as far as
// they go.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])(?:\s+(.*))?$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

const indentOf = (line) => line.match(/^\s*/)[0].replace(/\t/g, '    ').length;
const isBlank = (line) => line.trim() === '';

// Where a block other than a paragraph starts (a paragraph ends there).
function startsBlock(line, next) {
  return (FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
          LIST_ITEM.test(line) || (line.includes('|') && next !== undefined &&
                                   TABLE_RULE.test(next) && next.includes('-')));
}

function safeUrl(url) {
  return /^(https?:\/\/|mailto:)/i.test(url);
}

// Inline rules over one block's text. Code spans and links are cut out first (their
// content is not emphasis) and put back at the end, in placeholders no escaped text holds.
function inline(text) {
  const held = [];
  const hold = (html) => `\u0000${held.push(html) - 1}\u0000`;
  let s = text.replace(/\u0000/g, '');
  s = s.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, _ticks, code) => {
    const trimmed = /^ [\s\S]* $/.test(code) ? code.slice(1, -1) : code;
    return hold(`<code>${escapeHtml(trimmed)}</code>`);
  });
  s = escapeHtml(s);
  s = s.replace(/\[([^\]\u0000]+)\]\(([^()\s]+)\)/g, (whole, label, url) => {
    const raw = url.replace(/&amp;/g, '&');
    if (!safeUrl(raw)) return whole;
    return hold(`<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`);
  });
  s = s.replace(/(^|[\s(])(https?:\/\/[^\s<\u0000]*[^\s<.,;:!?)\u0000])/g,
                (_, before, url) => before + hold(
                    `<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  s = s.replace(/(^|[^*])\*(?=[^\s*])([^*]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>');
  s = s.replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
  s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
  // Links may hold emphasis (and emphasis links), so restore until nothing is left.
  while (/\u0000\d+\u0000/.test(s)) s = s.replace(/\u0000(\d+)\u0000/g, (_, i) => held[i]);
  return s;
}

function codeBlock(lang, lines) {
  const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : '<span></span>';
  const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
  return `<div class="code-block"><div class="code-head">${label}` +
         '<button type="button" class="copy-code">Copy</button></div>' +
         `<pre><code${cls}>${escapeHtml(lines.join('\n'))}</code></pre></div>`;
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith('|')) row = row.slice(1);
  if (row.endsWith('|') && !row.endsWith('\\|')) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(header, rule, rows) {
  const aligns = splitRow(rule).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : '');
  const cell = (tag, text, i) => {
    const align = aligns[i] ? ` class="align-${aligns[i]}"` : '';  // (no inline styles: CSP)
    return `<${tag}${align}>${inline(text)}</${tag}>`;
  };
  const head = splitRow(header).map((c, i) => cell('th', c, i)).join('');
  const body = rows.map((r) => `<tr>${splitRow(r).map((c, i) => cell('td', c, i)).join('')}</tr>`);
  return `<div class="table-wrap"><table><thead><tr>${head}</tr></thead>` +
         `<tbody>${body.join('')}</tbody></table></div>`;
}

// A list starting at lines[i]; returns [html, next line index].
function list(lines, i) {
  const first = LIST_ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const base = indentOf(first[1]);
  const items = [];
  let loose = false;
  while (i < lines.length) {
    const line = lines[i];
    const m = LIST_ITEM.exec(line);
    if (m && indentOf(m[1]) <= base + 1 && /\d/.test(m[2]) === ordered) {
      items.push({ lines: [m[3] ?? ''], indent: indentOf(m[1]) + m[2].length + 1 });
      i++;
      continue;
    }
    if (isBlank(line)) {
      // The list goes on past a blank line only into an indented line or another item.
      let j = i + 1;
      while (j < lines.length && isBlank(lines[j])) j++;
      const nm = j < lines.length ? LIST_ITEM.exec(lines[j]) : null;
      const continues = j < lines.length &&
          (indentOf(lines[j]) > base || (nm && /\d/.test(nm[2]) === ordered));
      if (!continues) break;
      loose = true;
      items.at(-1).lines.push('');
      i++;
      continue;
    }
    const item = items.at(-1);
    if (indentOf(line) > base) {
      const cut = Math.min(indentOf(line), item.indent);
      item.lines.push(line.replace(/\t/g, '    ').slice(cut));
      i++;
      continue;
    }
    if (startsBlock(line, lines[i + 1])) break;
    item.lines.push(line.trim());  // a lazy continuation of the item's paragraph
    i++;
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const open = ordered ? (start !== 1 ? `<ol start="${start}">` : '<ol>') : '<ul>';
  const body = items.map((it) => `<li>${blocks(it.lines, !loose)}</li>`).join('');
  return [`${open}${body}${ordered ? '</ol>' : '</ul>'}`, i];
}

// Block rules over lines; `tight`: paragraphs without <p> (a tight list's items).
function blocks(lines, tight = false) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      i++;
      continue;
    }
    let m = FENCE.exec(line);
    if (m) {
      const fence = m[1];
      const body = [];
      const indent = indentOf(line);
      for (i++; i < lines.length; i++) {
        const close = lines[i].trim();
        if (close.length >= fence.length && close === fence[0].repeat(close.length)) {
          i++;
          break;
        }
        body.push(lines[i].replace(/\t/g, '    ').slice(Math.min(indent, indentOf(lines[i]))));
      }
      out.push(codeBlock(m[2], body));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const level = Math.min(6, m[1].length + 2);  // the page's own h1 and h2 come first
      out.push(`<h${level}>${inline(m[2] ?? '')}</h${level}>`);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.push('<hr>');
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        quoted.push(m[1]);
        i++;
      }
      out.push(`<blockquote>${blocks(quoted)}</blockquote>`);
      continue;
    }
    if (LIST_ITEM.test(line)) {
      const [html, next] = list(lines, i);
      out.push(html);
      i = next;
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) &&
        lines[i + 1].includes('-')) {
      const rows = [];
      let j = i + 2;
      for (; j < lines.length && lines[j].includes('|') && !isBlank(lines[j]); j++) {
        rows.push(lines[j]);
      }
      out.push(table(line, lines[i + 1], rows));
      i = j;
      continue;
    }
    const para = [line.trim()];
    for (i++; i < lines.length && !isBlank(lines[i]) && !startsBlock(lines[i], lines[i + 1]);
         i++) {
      para.push(lines[i].trim());
    }
    const html = para.map(inline).join('<br>');
    out.push(tight ? html : `<p>${html}</p>`);
  }
  return out.join('');
}

// The HTML of `source` (a whole answer or the part of it streamed so far).
export function renderMarkdown(source) {
  return blocks(String(source).replace(/\r\n?/g, '\n').split('\n'));
}
