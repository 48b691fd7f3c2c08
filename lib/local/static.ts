import { readFile, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildOpenApiDocument } from '#lib/http/openapi.ts';
import { renderOpenApiHtml } from '#lib/http/openapi-docs.ts';

/**
 * Local mode's pages: the dashboard at `/` (its TypeScript bundled on demand by esbuild, rebuilt when a
 * source changes), the OpenAPI document at `/openapi.json` and its reference page at `/docs`. Only GET
 * and HEAD reach here, so `POST /` stays the root search.
 */
const DASHBOARD = resolve(dirname(fileURLToPath(import.meta.url)), '../../dashboard');
const ENTRY = join(DASHBOARD, 'src', 'main.ts');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json; charset=utf-8',
};

const PAGE_HEADERS = {
  'Content-Security-Policy':
    "default-src 'self'; img-src 'self' data: blob: http: https:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'same-origin',
  'Cache-Control': 'no-cache',
};

const dashboardScript = bundler(ENTRY);

/**
 * How far before a build's start a modification counts as after it: a file system stamps files from a
 * clock that lags the system's by up to a tick (and some to the second), so an edit saved just after a
 * build began, that the build did not read, could look older than the build. (Cost: requests within this
 * long of an edit rebuild the bundle.)
 */
const FILE_CLOCK_SLACK_MS = 2000;

/**
 * Bundles `entry` (esbuild, on demand) and answers the bundle until one of the files it was built from
 * changes (by modification time), or goes: those come from the build's metafile, so a module imported
 * from outside the entry's folder (lib/domain/domain-pattern.ts) counts too.
 */
export function bundler(entry: string): () => Promise<string> {
  let bundle: { builtAt: number; built: Promise<{ code: string; inputs: string[] }> } | undefined;
  const build = () => {
    const builtAt = Date.now() - FILE_CLOCK_SLACK_MS;
    const built = import('esbuild').then(async (esbuild) => {
      const cwd = process.cwd();
      const result = await esbuild.build({
        absWorkingDir: cwd,
        entryPoints: [entry],
        bundle: true,
        format: 'esm',
        target: 'es2022',
        write: false,
        metafile: true,
        legalComments: 'none',
        logLevel: 'silent',
      });
      // (The metafile names inputs relative to the working directory.)
      const inputs = Object.keys(result.metafile.inputs).map((input) => resolve(cwd, input));
      return { code: result.outputFiles[0]!.text, inputs };
    });
    bundle = { builtAt, built };
    built.catch(() => {
      if (bundle?.built === built) bundle = undefined;
    });
    return built;
  };
  return async () => {
    const current = bundle;
    if (!current) return (await build()).code;
    const { code, inputs } = await current.built;
    if (!(await changedSince(inputs, current.builtAt))) return code;
    // (Another request may have started the new build meanwhile.)
    return (await (bundle && bundle !== current ? bundle.built : build())).code;
  };
}

/** Whether one of `files` was modified at or after `time` (ms), or is gone. */
async function changedSince(files: string[], time: number): Promise<boolean> {
  const times = await Promise.all(
    files.map((file) =>
      stat(file).then(
        (s) => s.mtimeMs,
        () => Infinity,
      ),
    ),
  );
  return times.some((modified) => modified >= time);
}

function send(
  response: ServerResponse,
  method: string,
  status: number,
  type: string,
  body: string | Buffer,
  extra: Record<string, string> = {},
) {
  response.writeHead(status, {
    'Content-Type': type,
    'Content-Length': String(Buffer.byteLength(body)),
    ...PAGE_HEADERS,
    ...extra,
  });
  response.end(method === 'HEAD' ? undefined : body);
}

const PAGE_PATHS = new Set([
  '/openapi.json',
  '/docs',
  '/docs/',
  '/',
  '/index.html',
  '/assets/app.js',
  '/demo/feed.xml',
]);
const ASSET_PATH = /^\/assets\/([a-z0-9-]+\.(?:css|svg|png))$/;

/** Fixed pages (GET and HEAD only, whatever else is there): another method on them is a 405 naming them. */
export function isPagePath(path: string): boolean {
  return PAGE_PATHS.has(path);
}

/** Answers the request when it is for a page or asset; false lets the API route table handle it. */
export async function serveStatic(
  request: IncomingMessage,
  response: ServerResponse,
  url: URL,
): Promise<boolean> {
  const method = request.method ?? 'GET';
  if (method !== 'GET' && method !== 'HEAD') return false;
  const path = url.pathname;
  if (path === '/openapi.json') {
    // (A request without Host: the address it reached.)
    const address = request.socket.localAddress ?? 'localhost';
    const reached = `${address.includes(':') ? `[${address}]` : address}:${request.socket.localPort}`;
    const host = request.headers.host ?? reached;
    const document = buildOpenApiDocument({ serverUrl: `http://${host}` });
    send(response, method, 200, TYPES['.json']!, JSON.stringify(document, null, 2), {
      'Access-Control-Allow-Origin': '*',
    });
    return true;
  }
  if (path === '/docs' || path === '/docs/') {
    send(response, method, 200, TYPES['.html']!, renderOpenApiHtml(buildOpenApiDocument()));
    return true;
  }
  if (path === '/' || path === '/index.html') {
    send(response, method, 200, TYPES['.html']!, await readFile(join(DASHBOARD, 'index.html')));
    return true;
  }
  if (path === '/assets/app.js') {
    send(response, method, 200, TYPES['.js']!, await dashboardScript());
    return true;
  }
  const asset = ASSET_PATH.exec(path);
  if (asset) {
    const body = await readFile(join(DASHBOARD, 'assets', asset[1]!)).catch(() => undefined);
    if (!body) return false;
    send(response, method, 200, TYPES[extname(asset[1]!)]!, body);
    return true;
  }
  return false;
}
