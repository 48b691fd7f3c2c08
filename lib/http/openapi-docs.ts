/**
 * A self-contained HTML reference page rendered from the OpenAPI document (no scripts, no CDN): one
 * section per operation with its parameters, request body fields, examples and every response.
 */
type Json = Record<string, unknown>;

const esc = (value: unknown) =>
  String(value).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
const code = (value: string) => `<code>${esc(value)}</code>`;
const md = (text: string) => esc(text).replace(/`([^`]+)`/g, '<code>$1</code>');
const pretty = (value: unknown) => `<pre><code>${esc(JSON.stringify(value, null, 2))}</code></pre>`;

function resolve(doc: Json, schema: Json | undefined): Json {
  const pointer = schema?.$ref;
  if (typeof pointer !== 'string') return schema ?? {};
  let node: unknown = doc;
  for (const part of pointer.replace(/^#\//, '').split('/')) node = (node as Json)[part];
  return (node as Json) ?? {};
}

function typeOf(doc: Json, schema: Json): string {
  if (typeof schema.$ref === 'string') return schema.$ref.split('/').pop()!;
  if (Array.isArray(schema.anyOf)) return (schema.anyOf as Json[]).map((s) => typeOf(doc, s)).join(' | ');
  if (Array.isArray(schema.enum)) return (schema.enum as unknown[]).map((v) => JSON.stringify(v)).join(' | ');
  if (Array.isArray(schema.type)) return schema.type.join(' | ');
  if (schema.type === 'array') return `array of ${schema.items ? typeOf(doc, schema.items as Json) : 'any'}`;
  if (Array.isArray(schema.prefixItems))
    return `[${(schema.prefixItems as Json[]).map((s) => typeOf(doc, s)).join(', ')}]`;
  return typeof schema.type === 'string' ? schema.type : 'any';
}

function rules(schema: Json): string {
  const parts: string[] = [];
  const add = (label: string, key: string) =>
    schema[key] !== undefined && parts.push(`${label} ${JSON.stringify(schema[key])}`);
  add('default', 'default');
  if (typeof schema.minimum === 'number' && schema.minimum > -Number.MAX_SAFE_INTEGER) add('min', 'minimum');
  if (typeof schema.maximum === 'number' && schema.maximum < Number.MAX_SAFE_INTEGER) add('max', 'maximum');
  add('min length', 'minLength');
  add('max length', 'maxLength');
  add('max items', 'maxItems');
  add('pattern', 'pattern');
  return parts.join('; ');
}

function fieldRows(doc: Json, schema: Json, prefix = '', depth = 0): string {
  const resolved = resolve(doc, schema);
  const props = (resolved.properties ?? {}) as Record<string, Json>;
  const required = new Set((resolved.required ?? []) as string[]);
  let rows = '';
  for (const [name, prop] of Object.entries(props)) {
    const full = `${prefix}${name}`;
    rows += `<tr><td>${code(full)}</td><td>${esc(typeOf(doc, prop))}</td><td>${required.has(name) ? 'yes' : 'no'}</td><td>${md(
      String(prop.description ?? ''),
    )}${rules(prop) ? `<div class="rules">${esc(rules(prop))}</div>` : ''}</td></tr>`;
    const inner = resolve(doc, prop);
    if (depth < 2 && inner.type === 'object' && inner.properties)
      rows += fieldRows(doc, inner, `${full}.`, depth + 1);
    const items = inner.type === 'array' ? resolve(doc, inner.items as Json) : undefined;
    if (
      depth < 2 &&
      items?.type === 'object' &&
      items.properties &&
      typeof (inner.items as Json).$ref !== 'string'
    ) {
      rows += fieldRows(doc, items, `${full}[].`, depth + 1);
    }
  }
  return rows;
}

function fieldTable(doc: Json, schema: Json): string {
  const rows = fieldRows(doc, schema);
  if (!rows) return `<p>Type: ${code(typeOf(doc, schema))}</p>`;
  return `<table><thead><tr><th scope="col">Field</th><th scope="col">Type</th><th scope="col">Required</th><th scope="col">Description</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function operationHtml(doc: Json, path: string, method: string, op: Json): string {
  const id = String(op.operationId);
  const security = (op.security as Json[]).map((s) => Object.keys(s)[0] ?? 'none (body field)').join(' or ');
  let html = `<section class="op" id="${esc(id)}" aria-labelledby="${esc(id)}-h"><h3 id="${esc(id)}-h"><span class="method m-${esc(method)}">${esc(
    method.toUpperCase(),
  )}</span> ${code(path)} <span class="summary">${esc(op.summary)}</span></h3>`;
  html += `<p>${md(String(op.description ?? ''))}</p><p class="meta">Authentication: ${esc(security)} · operationId ${code(id)}</p>`;
  const params = (op.parameters ?? []) as Json[];
  if (params.length > 0) {
    html += `<h4>Parameters</h4><table><thead><tr><th scope="col">Name</th><th scope="col">In</th><th scope="col">Type</th><th scope="col">Required</th><th scope="col">Description</th></tr></thead><tbody>`;
    for (const p of params) {
      const schema = p.schema as Json;
      html += `<tr><td>${code(String(p.name))}</td><td>${esc(p.in)}</td><td>${esc(typeOf(doc, schema))}</td><td>${p.required ? 'yes' : 'no'}</td><td>${md(
        String(schema.description ?? ''),
      )} ${esc(rules(schema))}</td></tr>`;
    }
    html += '</tbody></table>';
  }
  const body = op.requestBody as Json | undefined;
  if (body) {
    const media = (body.content as Json)['application/json'] as Json;
    html += `<h4>Request body ${body.required ? '' : '(optional)'} — ${code(typeOf(doc, media.schema as Json))}</h4>${fieldTable(doc, media.schema as Json)}`;
    html += `<details><summary>Example request</summary>${pretty(media.example)}</details>`;
  }
  html += '<h4>Responses</h4>';
  for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
    const headers = Object.keys((response.headers ?? {}) as Json);
    const media = (response.content as Json | undefined)?.['application/json'] as Json | undefined;
    html += `<div class="response"><p><span class="status s${esc(status[0])}">${esc(status)}</span> ${md(String(response.description))}${
      headers.length ? ` <span class="meta">Headers: ${headers.map(code).join(', ')}</span>` : ''
    }</p>`;
    if (media?.example !== undefined)
      html += `<details><summary>Example</summary>${pretty(media.example)}</details>`;
    for (const [name, example] of Object.entries((media?.examples ?? {}) as Record<string, Json>)) {
      html += `<details><summary>${code(name)}: ${esc(example.summary)}</summary>${pretty(example.value)}</details>`;
    }
    html += '</div>';
  }
  return `${html}</section>`;
}

const STYLE = `
:root{color-scheme:light;--fg:#1b1f24;--muted:#4a5360;--bg:#fff;--line:#d5dae1;--accent:#0b57d0}
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--accent)}a:focus-visible,summary:focus-visible{outline:3px solid #f9a825;outline-offset:2px}
.layout{display:grid;grid-template-columns:260px 1fr;min-height:100vh}
nav{border-right:1px solid var(--line);padding:16px;position:sticky;top:0;height:100vh;overflow:auto;background:#f6f8fa}
nav h2{font-size:13px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:16px 0 4px}
nav ul{list-style:none;margin:0;padding:0}nav li a{display:block;padding:3px 6px;border-radius:4px;text-decoration:none;color:var(--fg);font-size:14px}
nav li a:hover{background:#e7ebf0}main{padding:24px 40px;max-width:1100px}
h1{margin-top:0}h2.tag{border-bottom:2px solid var(--line);padding-bottom:4px;margin-top:40px}
.op{border:1px solid var(--line);border-radius:8px;padding:12px 18px;margin:18px 0}
.op h3{margin:4px 0 8px;font-size:17px}.summary{font-weight:400;color:var(--muted)}
.method{display:inline-block;min-width:64px;text-align:center;border-radius:4px;padding:1px 6px;color:#fff;font-size:13px;font-weight:700}
.m-get{background:#0a6b3d}.m-post{background:#0b57d0}.m-patch{background:#7a4a00}.m-delete{background:#b3261e}
.status{display:inline-block;min-width:42px;font-weight:700;border-radius:4px;padding:0 6px;color:#fff}.s2{background:#0a6b3d}.s4{background:#8a4b00}.s5{background:#b3261e}
.meta{color:var(--muted);font-size:13px}.rules{color:var(--muted);font-size:12px}
table{border-collapse:collapse;width:100%;margin:6px 0 12px;font-size:14px}th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
pre{background:#0f1720;color:#e6edf3;padding:10px;border-radius:6px;overflow:auto;font-size:13px}code{font-family:ui-monospace,Menlo,Consolas,monospace}
details{margin:4px 0}summary{cursor:pointer}.response{margin:6px 0 10px}
@media (max-width:800px){.layout{grid-template-columns:1fr}nav{position:static;height:auto}}
`;

/** Renders the OpenAPI document as one readable HTML page. */
export function renderOpenApiHtml(doc: Json): string {
  const info = doc.info as Json;
  const paths = doc.paths as Record<string, Record<string, Json>>;
  const byTag = new Map<string, { path: string; method: string; op: Json }[]>();
  for (const [path, item] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(item)) {
      // HEAD repeats its GET without the body: said once, in the document's description.
      if (method === 'head') continue;
      const tag = ((op.tags as string[] | undefined) ?? ['Other'])[0]!;
      byTag.set(tag, [...(byTag.get(tag) ?? []), { path, method, op }]);
    }
  }
  let nav = '<p><a href="/">← Dashboard</a> · <a href="/openapi.json">openapi.json</a></p>';
  let body = `<h1>${esc(info.title)} <span class="meta">v${esc(info.version)} · OpenAPI ${esc(doc.openapi)}</span></h1>`;
  body += String(info.description ?? '')
    .split('\n\n')
    .map((p) => `<p>${md(p)}</p>`)
    .join('');
  for (const [tag, ops] of byTag) {
    nav += `<h2>${esc(tag)}</h2><ul>${ops
      .map(
        ({ path, method, op }) =>
          `<li><a href="#${esc(op.operationId)}">${esc(method.toUpperCase())} ${esc(path)}</a></li>`,
      )
      .join('')}</ul>`;
    body += `<h2 class="tag">${esc(tag)}</h2>${ops.map(({ path, method, op }) => operationHtml(doc, path, method, op)).join('')}`;
  }
  const components = doc.components as Json;
  nav += '<h2>Schemas</h2><ul>';
  body += '<h2 class="tag" id="schemas">Schemas</h2>';
  for (const [name, schema] of Object.entries(components.schemas as Record<string, Json>)) {
    nav += `<li><a href="#schema-${esc(name)}">${esc(name)}</a></li>`;
    body += `<section class="op" id="schema-${esc(name)}"><h3>${esc(name)}</h3><p>${md(String(schema.description ?? ''))}</p>${fieldTable(doc, schema)}</section>`;
  }
  nav += '</ul><h2>Security</h2><ul>';
  body += '<h2 class="tag">Security schemes and headers</h2><table><tbody>';
  for (const [name, scheme] of Object.entries(components.securitySchemes as Record<string, Json>)) {
    nav += `<li><a href="#security-${esc(name)}">${esc(name)}</a></li>`;
    body += `<tr><th scope="row" id="security-${esc(name)}">${esc(name)}</th><td>${esc(scheme.type)} ${esc(scheme.scheme)} (${esc(scheme.bearerFormat)})</td><td>${md(String(scheme.description))}</td></tr>`;
  }
  for (const [name, header] of Object.entries(components.headers as Record<string, Json>)) {
    body += `<tr><th scope="row">${code(name)}</th><td>header</td><td>${md(String(header.description))}</td></tr>`;
  }
  body += '</tbody></table>';
  nav += '</ul>';
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${esc(
    info.title,
  )} — API reference</title><style>${STYLE}</style></head><body><div class="layout"><nav aria-label="Operations">${nav}</nav><main>${body}</main></div></body></html>`;
}
