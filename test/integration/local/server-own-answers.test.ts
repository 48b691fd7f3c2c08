import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpServer } from '#lib/local/server.ts';
import { redactSearchId } from '#lib/log.ts';
import { exchange as exchangeWith, type RawAnswer, rawAnswers } from '#test/support/raw-http.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

/**
 * The answers the local server gives itself, without a handler (no route, a method a path does not take,
 * CONNECT, an expectation it cannot meet, a request the parser refuses): the one error shape, the headers
 * HTTP asks for, and a log line with their request id.
 */
const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
const logger = recordingLogger(lines, { fields: true });

let url: string;
let port: number;
let close: () => Promise<void>;

beforeAll(async () => {
  const started = await startHttpServer({ port: 0, maxBodyBytes: 1_000, logger });
  url = started.url;
  port = Number(new URL(url).port);
  close = () => new Promise((resolve) => started.server.close(() => resolve()));
});

afterAll(async () => {
  await close?.();
});

const exchange = (text: string, body?: Buffer) => exchangeWith(port, text, body);

/** Asserts the one error shape, its request id in X-Request-Id too. */
function expectShape(answer: RawAnswer, status: number, code: string): void {
  expect(answer.status).toBe(status);
  expect(answer.headers['content-type']).toMatch(/^application\/json/);
  expect(answer.body).toEqual({
    error: { status, code, message: expect.any(String), details: [] },
    requestId: answer.headers['x-request-id'],
  });
}

/** The access-log line of the answer with that request id. */
const logLine = (requestId: string) =>
  lines.find((line) => line.message === 'request' && line.fields?.requestId === requestId);

describe('local HTTP server: its own answers', () => {
  it('refuses an expectation other than 100-continue in the one error shape, and reads on', async () => {
    // (Node answered it a bare 417: no body, no Content-Type, no request id.) A 100 KB body written at
    // once, then a next request on the same connection: both answered, the body dropped, not a reset.
    const body = Buffer.alloc(100_000, 0x20);
    const { raw } = await exchange(
      'POST /api/v1/search/image HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n' +
        `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
      Buffer.concat([body, Buffer.from('GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')]),
    );

    const [refused, next, ...more] = rawAnswers(raw);
    expectShape(refused!, 417, 'invalid_request');
    expect(refused!.body.error.message).toContain('100-continue');
    // Readable by a browser like the server's other errors on a public path
    expect(refused!.headers['access-control-allow-origin']).toBe('*');
    expectShape(next!, 404, 'not_found');
    expect(more).toEqual([]);
  });

  it('closes the connection of a refused expectation whose body does not come', async () => {
    const { raw, closedAfter } = await exchange(
      'POST /api/v1/search/image HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 100\r\n\r\n',
    );

    expect(rawAnswers(raw).map((answer) => answer.status)).toEqual([417]);
    expect(closedAfter).toBeLessThan(5_000);
  });

  it('names in the Allow of a 405 to CONNECT what a 405 to another method there names', async () => {
    // (CONNECT's 405 had no Allow, which HTTP requires.)
    for (const path of ['/', '/admin/v1/feeds', '/docs']) {
      const other = await fetch(`${url}${path}`, { method: 'PUT' });
      expect(other.status).toBe(405);
      const { raw } = await exchange(`CONNECT ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const [answer] = rawAnswers(raw);
      expectShape(answer!, 405, 'method_not_allowed');
      expect(answer!.headers.allow, path).toBe(other.headers.get('allow'));
    }
    // A proxy's target (host:port) is no resource of this server: an empty Allow (RFC 9110 §10.2.1)
    const [tunnel] = rawAnswers((await exchange('CONNECT x:1 HTTP/1.1\r\nHost: x\r\n\r\n')).raw);
    expectShape(tunnel!, 405, 'method_not_allowed');
    expect(tunnel!.headers.allow).toBe('');
  });

  it('logs each of its own answers with its request id, method, path and status, and nothing sent', async () => {
    // (They carried an X-Request-Id that was in no log line.)
    const secret = 'Bearer vps_secret-token-of-the-client';
    const sent = async (text: string, body?: Buffer) => rawAnswers((await exchange(text, body)).raw)[0]!;
    const cases: [RawAnswer, Record<string, unknown>][] = [
      [
        await sent(
          `GET /nothing?q=query-secret HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ${secret}\r\n\r\n`,
        ),
        { method: 'GET', path: '/nothing', status: 404, code: 'not_found' },
      ],
      [
        // A search id in a path no route takes is named by its hash, as the handlers' lines name one
        await sent(
          'DELETE /admin/v1/keys/vps_path-secret/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
        ),
        {
          method: 'DELETE',
          path: `/admin/v1/keys/${redactSearchId('vps_path-secret')}/x`,
          status: 404,
          code: 'not_found',
        },
      ],
      [
        await sent(
          `DELETE /api/v1/search/image HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: ${secret}\r\n\r\n`,
        ),
        { method: 'DELETE', path: '/api/v1/search/image', status: 405, code: 'method_not_allowed' },
      ],
      [
        await sent(
          `POST /api/v1/search/image HTTP/1.1\r\nHost: x\r\nAuthorization: ${secret}\r\n` +
            'Content-Type: application/json\r\nContent-Length: 2000\r\n\r\n',
          Buffer.from(`{"imageData":"${'body-secret'.repeat(180)}"}`.padEnd(2000)),
        ),
        { method: 'POST', path: '/api/v1/search/image', status: 413, code: 'payload_too_large' },
      ],
      [
        await sent(
          `POST /api/v1/related HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nAuthorization: ${secret}\r\n` +
            'Connection: close\r\nContent-Length: 27\r\n\r\n{"imageData":"body-secret"}',
        ),
        { method: 'POST', path: '/api/v1/related', status: 417, code: 'invalid_request' },
      ],
      [
        await sent(`CONNECT /admin/v1/feeds HTTP/1.1\r\nHost: x\r\nAuthorization: ${secret}\r\n\r\n`),
        { method: 'CONNECT', path: '/admin/v1/feeds', status: 405, code: 'method_not_allowed' },
      ],
      [
        await sent(`GET / HTTP/1.1\r\nAuthorization: ${secret}\r\nX-Filler: ${'x'.repeat(20_000)}\r\n\r\n`),
        { status: 431, code: 'invalid_request', error: 'HPE_HEADER_OVERFLOW' },
      ],
      [await sent('FOO / HTTP/1.1\r\nHost: x\r\n\r\n'), { status: 400, code: 'invalid_request' }],
    ];

    for (const [answer, fields] of cases) {
      const line = logLine(answer.headers['x-request-id']!);
      expect(line, JSON.stringify(fields)).toMatchObject({ level: 'info', message: 'request', fields });
    }
    const logged = JSON.stringify(lines);
    for (const sentOnly of ['secret-token', 'query-secret', 'path-secret', 'body-secret', 'xxxxxxxx'])
      expect(logged).not.toContain(sentOnly);
  });

  it('answers no CORS preflight on the admin API, as deployed, and still on the public one', async () => {
    // (An admin preflight was a 204 allowing any origin; the deployed admin API has no OPTIONS methods.)
    const preflight = (path: string) =>
      fetch(`${url}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin: 'https://elsewhere.example',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization,content-type',
        },
      });
    const admin = await preflight('/admin/v1/feeds');
    const adminBody = (await admin.json()) as RawAnswer['body'];
    expect([admin.status, adminBody.error.code]).toEqual([405, 'method_not_allowed']);
    expect(admin.headers.get('allow')).toBe('POST, GET, HEAD');
    expect(admin.headers.get('access-control-allow-origin')).toBeNull();
    expect(admin.headers.get('access-control-allow-methods')).toBeNull();
    expect(logLine(adminBody.requestId)?.fields).toMatchObject({ method: 'OPTIONS', status: 405 });

    for (const path of ['/admin', '/admin/']) {
      const bare = await preflight(path);
      expect(bare.status, path).not.toBe(204);
      expect(bare.headers.get('access-control-allow-origin'), path).toBeNull();
    }

    // The same answer for every origin, as the gateway's: it echoed the Origin without Vary (a shared
    // cache could give one origin's preflight to another).
    const publicPath = await preflight('/api/v1/search/image');
    expect(publicPath.status).toBe(204);
    expect(publicPath.headers.get('access-control-allow-origin')).toBe('*');
    expect(publicPath.headers.get('vary')).toBeNull();
    // The gateway's methods (infra/stacks/api-stack.ts defaultCorsPreflightOptions): every public route is a
    // POST.
    expect(publicPath.headers.get('access-control-allow-methods')).toBe('POST,OPTIONS');
  });
});
