import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const DEMO = resolve(dirname(fileURLToPath(import.meta.url)), '../../demo');
const TYPES: Record<string, string> = {
  webp: 'image/webp',
  jpg: 'image/jpeg',
  png: 'image/png',
  xml: 'application/xml; charset=utf-8',
};

const DEMO_PATH = /^\/demo\/(feed\.xml|images\/[A-Za-z0-9_-]+\.(webp|jpg|png))$/;

/**
 * Local mode only: serves the committed demo catalogue, `/demo/feed.xml` and `/demo/images/<name>`, so the
 * demo import and the dashboard load them over HTTP like a shop's own files. True when it answered.
 */
export async function serveDemoFile(
  request: IncomingMessage,
  response: ServerResponse,
  url: URL,
): Promise<boolean> {
  if (request.method !== 'GET' && request.method !== 'HEAD') return false;
  const match = DEMO_PATH.exec(url.pathname);
  if (!match) return false;
  const body = await readFile(resolve(DEMO, match[1]!)).catch(() => undefined);
  if (!body) return false;
  const ext = match[1]!.split('.').pop()!;
  response.writeHead(200, {
    'Content-Type': TYPES[ext] ?? 'application/octet-stream',
    'Content-Length': body.length,
    'Cache-Control': 'public, max-age=3600',
  });
  response.end(request.method === 'HEAD' ? undefined : body);
  return true;
}
