import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { get as httpGet, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { gunzipSync, inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectError } from '#test/support/error-shape.ts';
import { pngBase64, startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * The platform over real HTTP: a client's view of authentication, domains, validation, rate limits,
 * usage and the one error shape. Models are pointed at an empty folder so model-backed paths answer 503.
 */
let stack: TestStack;
let image: string;
let feedId: string;
let searchId: string;

const bearer = (id: string) => ({ authorization: `Bearer ${id}` });

beforeAll(async () => {
  stack = await startTestStack({ MODEL_DIR: '/nonexistent-models', PLAN_LIMIT_FREE: '5' });
  image = await pngBase64();
  const feed = await stack.admin('POST', '/admin/v1/feeds', { name: 'Shop', plan: 'pro' });
  feedId = feed.body.feedId;
  searchId = (await stack.admin('POST', `/admin/v1/feeds/${feedId}/keys`, { name: 'web' })).body.searchId;
});

afterAll(async () => {
  await stack?.stop();
});

/**
 * Sends `text` as is over a new connection to the stack and reads the answer to the connection's end
 * (requests the HTTP client would not send: odd targets, no Host, unknown methods).
 */
function rawExchange(text: string): Promise<string> {
  const { port } = new URL(stack.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(text));
    let raw = '';
    socket.on('data', (chunk) => (raw += chunk.toString()));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('close', () => resolve(raw));
  });
}

/** A raw answer's status, head and JSON body (chunked or not); rejects anything else. */
function jsonAnswer(raw: string): { status: number; body: { error: { code: string } }; head: string } {
  if (!raw.startsWith('HTTP/1.1 ')) throw new Error('no answer');
  const end = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, end);
  let body = raw.slice(end + 4);
  if (/transfer-encoding: chunked/i.test(head)) {
    let out = '';
    for (let at = 0; ;) {
      const line = body.indexOf('\r\n', at);
      const size = parseInt(body.slice(at, line), 16);
      if (!size) break;
      out += body.slice(line + 2, line + 2 + size);
      at = line + 2 + size + 2;
    }
    body = out;
  }
  try {
    return { status: Number(raw.slice(9, 12)), head, body: JSON.parse(body) };
  } catch {
    throw new Error(`not the JSON error shape: ${raw.slice(0, 300)}`);
  }
}

describe('search-id authentication', () => {
  it('returns 401 missing_search_id without a search id', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', { body: { imageData: image } });
    expectError(response, 401, 'missing_search_id');
    // (RFC 9110: a 401 names the scheme that authenticates)
    expect(response.headers.get('www-authenticate')).toBe('Bearer realm="search"');
  });

  it('takes the body search id beside an Authorization header of another scheme', async () => {
    const basic = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image, searchId },
      headers: { authorization: 'Basic Zm9vOmJhcg==' },
    });
    const emptyBearer = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image, searchId },
      headers: { authorization: 'Bearer ' },
    });
    // Authenticated by the body's id: the feed is empty, so the answer is an empty list.
    expect([basic.status, emptyBearer.status]).toEqual([200, 200]);
    expect([basic.body, emptyBearer.body]).toEqual([[], []]);
    // Without a body id, the header's form is explained.
    const alone = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { authorization: 'Basic Zm9vOmJhcg==' },
    });
    expectError(alone, 401, 'missing_search_id');
  });

  it('returns 401 invalid_search_id for an unknown search id', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: bearer('vps_unknown'),
    });
    expectError(response, 401, 'invalid_search_id');
    expect(response.headers.get('www-authenticate')).toBe('Bearer realm="search", error="invalid_token"');
  });

  it('reads a search id sent as a number in the body on every endpoint, as the document types it', async () => {
    // (The document typed it as a string but on detect; the middleware reads a number as its digits.)
    const notImage = Buffer.from('not an image').toString('base64');
    const bodies: [string, Record<string, unknown>][] = [
      ['/api/v1/search/image', { imageData: notImage, searchId: 12345 }],
      ['/api/v1/detect', { imageData: notImage, searchId: 12345 }],
      ['/api/v1/related', { productId: 'nowhere', searchId: 12345 }],
      ['/', { imageData: notImage, feedId: 12345 }],
    ];
    for (const [path, body] of bodies)
      expectError(await stack.call('POST', path, { body }), 401, 'invalid_search_id');
    // Neither a string nor a number: the field's message names both.
    const flag = await stack.call('POST', '/api/v1/related', { body: { productId: 'p', searchId: true } });
    expectError(flag, 400, 'invalid_request');
    expect(flag.body.error.details).toEqual([{ path: 'searchId', message: 'expected a string or a number' }]);
  });

  it('accepts the search id in the Authorization header', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: bearer(searchId),
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual([]);
  });

  it('takes the Bearer scheme in any case (RFC 9110)', async () => {
    // Act
    const answers = [
      await stack.call('POST', '/api/v1/search/image', {
        body: { imageData: image },
        headers: { authorization: `bearer ${searchId}` },
      }),
      await stack.call('POST', '/api/v1/search/image', {
        body: { imageData: image },
        headers: { authorization: `BEARER ${searchId}` },
      }),
    ];
    // Assess
    expect(answers.map((response) => response.status)).toEqual([200, 200]);
  });

  it('accepts the search id in the body', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image, searchId },
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual([]);
  });

  it('accepts feedId in the body of the root search, with limit and offset as strings', async () => {
    const response = await stack.call('POST', '/', {
      body: { imageData: image, feedId: searchId, limit: '5', offset: '0' },
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual([]);
  });

  it('returns 400 when header and body name different search ids', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image, searchId: 'vps_other' },
      headers: bearer(searchId),
    });
    expectError(response, 400, 'invalid_request');
    expect(response.body.error.details[0].path).toBe('searchId');
  });

  it('returns 401 invalid_search_id, not 500, for a search id longer than any search id', async () => {
    const long = `vps_${'x'.repeat(3000)}`;
    expectError(
      await stack.call('POST', '/api/v1/search/image', { body: { imageData: image }, headers: bearer(long) }),
      401,
      'invalid_search_id',
    );
    expectError(
      await stack.call('POST', '/api/v1/related', { body: { searchId: long, productId: 'p1' } }),
      401,
      'invalid_search_id',
    );
  });

  it('returns 400 for a related productId longer than any product id', async () => {
    const response = await stack.call('POST', '/api/v1/related', {
      body: { productId: 'p'.repeat(1100) },
      headers: bearer(searchId),
    });
    expectError(response, 400, 'invalid_request');
  });

  it('takes a null or empty search id field in the body as absent when the header carries one', async () => {
    const notImage = Buffer.from('not an image').toString('base64');
    const cases: [string, Record<string, unknown>][] = [null, ''].flatMap((absent) => [
      ['/api/v1/search/image', { imageData: notImage, searchId: absent }],
      ['/', { imageData: notImage, feedId: absent }],
      ['/api/v1/related', { productId: 'nowhere', searchId: absent }],
      ['/api/v1/detect', { imageData: notImage, searchId: absent }],
    ]);
    // The header's id is used: the request gets past authentication to its own answer (not 400 for the
    // field, nor 401 as if the body's absent id had replaced the header's).
    for (const [path, body] of cases) {
      const response = await stack.call('POST', path, { body, headers: bearer(searchId) });
      if (path === '/api/v1/related') expectError(response, 404, 'product_not_found');
      else expectError(response, 422, 'invalid_image');
    }
  });

  it('answers a body nested thousands of levels deep like any other (it exhausted the stack: 500)', async () => {
    const notImage = Buffer.from('not an image').toString('base64');
    const deep = '{"a":'.repeat(5000) + 'null' + '}'.repeat(5000);
    for (const [path, body] of [
      ['/api/v1/search/image', `{"imageData":"${notImage}","extra":${deep}}`],
      ['/', `{"imageData":"${notImage}","feedId":"${searchId}","extra":${deep}}`],
      ['/api/v1/related', `{"productId":"nowhere","context":{"type":"x","extra":${deep}}}`],
      ['/api/v1/detect', `{"imageData":"${notImage}","action":${deep}}`],
    ]) {
      const response = await stack.call('POST', path!, {
        raw: body!,
        headers: { ...bearer(searchId), 'content-type': 'application/json' },
      });
      expect(response.status, path).toBeLessThan(500);
    }
  });

  it('returns 401 for an Authorization header that is not Bearer', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { authorization: `Basic ${searchId}` },
    });
    expectError(response, 401, 'missing_search_id');
  });

  it('returns 403 search_id_revoked after the key is revoked', async () => {
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feedId}/keys`, { name: 'old' })).body.searchId;
    const before = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: bearer(key),
    });
    expect(before.status).toBe(200);

    const revoked = await stack.admin('DELETE', `/admin/v1/keys/${encodeURIComponent(key)}`);
    const after = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: bearer(key),
    });

    expect(revoked.status).toBe(200);
    expect(revoked.body.revokedAt).toEqual(expect.any(String));
    expectError(after, 403, 'search_id_revoked');
  });
});

describe('allowed domains', () => {
  let restricted: string;

  beforeAll(async () => {
    const feed = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Restricted',
      domains: ['shop.example.com', '*.example.org'],
    });
    restricted = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
  });

  it('returns 403 domain_not_allowed for an Origin outside the list', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: 'https://evil.example.net' },
    });
    expectError(response, 403, 'domain_not_allowed');
  });

  it('accepts an Origin in the list, a wildcard subdomain, and a Referer when Origin is absent', async () => {
    const exact = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: 'https://shop.example.com' },
    });
    const wildcard = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: 'https://www.example.org' },
    });
    const referer = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), referer: 'https://shop.example.com/products/1' },
    });
    expect([exact.status, wildcard.status, referer.status]).toEqual([200, 200, 200]);
    expect(exact.headers.get('access-control-allow-origin')).toBe('https://shop.example.com');
  });

  it('refuses an opaque Origin (null), whatever the Referer says, and an empty Origin falls back to Referer', async () => {
    const opaque = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: 'null' },
    });
    const opaqueWithReferer = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: 'null', referer: 'https://shop.example.com/products/1' },
    });
    const emptyOrigin = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), origin: '', referer: 'https://evil.example.net/page' },
    });
    expectError(opaque, 403, 'domain_not_allowed');
    expectError(opaqueWithReferer, 403, 'domain_not_allowed');
    expectError(emptyOrigin, 403, 'domain_not_allowed');
    // A feed without domains (and without requireOrigin) accepts any origin, an opaque one too.
    const open = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(searchId), origin: 'null' },
    });
    expect(open.status).toBe(200);
  });

  it('refuses requests with neither Origin nor Referer when the feed sets requireOrigin, with or without domains', async () => {
    const keyOf = async (body: Record<string, unknown>) => {
      const feed = await stack.admin('POST', '/admin/v1/feeds', { name: 'Browser only', ...body });
      return (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body
        .searchId as string;
    };
    const withDomains = await keyOf({ domains: ['shop.example.com'], requireOrigin: true });
    const anyPage = await keyOf({ requireOrigin: true });
    const search = (id: string, headers: Record<string, string> = {}) =>
      stack.call('POST', '/api/v1/search/image', {
        body: { imageData: image },
        headers: { ...bearer(id), ...headers },
      });
    // Act
    const serverToServer = [await search(withDomains), await search(anyPage)];
    const fromPages = [
      await search(withDomains, { origin: 'https://shop.example.com' }),
      await search(anyPage, { origin: 'https://any.example.net' }),
      await search(anyPage, { referer: 'https://any.example.net/page' }),
    ];
    // Assess: each refusal says what the feed asks for (one without domains has none to name)
    for (const refused of serverToServer) expectError(refused, 403, 'domain_not_allowed');
    expect(serverToServer[0]!.body.error.message).toContain('its domains');
    expect(serverToServer[1]!.body.error.message).toBe(
      'This search id only accepts requests with an Origin or Referer header.',
    );
    expect(fromPages.map((response) => response.status)).toEqual([200, 200, 200]);
    // An opaque origin is no page of any site: refused too, also when the feed names no domains
    expectError(await search(anyPage, { origin: 'null' }), 403, 'domain_not_allowed');
  });

  it('refuses a Referer outside the list', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { ...bearer(restricted), referer: 'https://example.org.evil.net/' },
    });
    expectError(response, 403, 'domain_not_allowed');
  });
});

describe('request validation', () => {
  const cases: [string, string, Record<string, unknown>, string][] = [
    ['limit 0', '/api/v1/search/image', { limit: 0 }, 'limit'],
    ['limit 101', '/api/v1/search/image', { limit: 101 }, 'limit'],
    ['limit "x"', '/api/v1/search/image', { limit: 'x' }, 'limit'],
    ['negative offset', '/api/v1/search/image', { offset: -1 }, 'offset'],
    ['offset + limit over 1000', '/api/v1/search/image', { offset: 995, limit: 10 }, 'offset'],
    ['missing imageData', '/api/v1/search/image', { imageData: undefined }, 'imageData'],
    ['invalid base64', '/api/v1/search/image', { imageData: 'not base64!!' }, 'imageData'],
    ['root search limit "abc"', '/', { limit: 'abc' }, 'limit'],
    [
      'unknown filter key',
      '/api/v1/related',
      { filters: [{ key: 'colour', value: 'red' }] },
      'filters.0.key',
    ],
    ['neither imageData nor productId', '/api/v1/related', { imageData: undefined }, 'imageData'],
    ['unknown detect action', '/api/v1/detect', { action: 'OCR' }, 'action'],
  ];

  for (const [name, path, patch, field] of cases) {
    it(`returns 400 for ${name}`, async () => {
      const body = { imageData: image, ...patch };
      const response = await stack.call('POST', path, { body, headers: bearer(searchId) });
      expectError(response, 400, 'invalid_request');
      expect(response.body.error.details.map((d: { path: string }) => d.path)).toContain(field);
    });
  }

  it('returns 400 for malformed JSON', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      raw: '{"imageData": ',
      headers: { ...bearer(searchId), 'content-type': 'application/json' },
    });
    expectError(response, 400, 'invalid_request');
  });

  it('returns 415 for a body that is not JSON', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      raw: 'imageData=abc',
      headers: { ...bearer(searchId), 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectError(response, 415, 'unsupported_media_type');
  });

  it('returns 400 for a body that is not UTF-8, whatever its size', async () => {
    for (const size of [16, 3_000_000]) {
      const response = await fetch(`${stack.url}/api/v1/search/image`, {
        method: 'POST',
        headers: { ...bearer(searchId), 'content-type': 'application/json' },
        body: Buffer.alloc(size, 0xff),
      });
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({
        error: { code: 'invalid_request', message: 'The request body is not valid UTF-8.' },
      });
    }
  });

  it('returns 415 for raw image bytes (a binary upload instead of JSON), readable by a browser', async () => {
    const bytes = Buffer.from(await pngBase64(), 'base64');
    for (const type of ['image/png', 'multipart/form-data; boundary=x', 'application/octet-stream']) {
      const response = await fetch(`${stack.url}/api/v1/search/image`, {
        method: 'POST',
        headers: { ...bearer(searchId), 'content-type': type, origin: 'https://shop.example.com' },
        body: Buffer.concat([bytes, Buffer.from([0xff, 0xfe])]),
      });
      expect(response.status, type).toBe(415);
      expect(await response.json()).toMatchObject({ error: { code: 'unsupported_media_type' } });
      expect(response.headers.get('access-control-allow-origin'), type).toBe('*');
    }
  });

  it("lets a browser read the local server's own errors on public paths, as the gateway's", async () => {
    const origin = { origin: 'https://shop.example.com' };
    const post = (type: string, body: Buffer<ArrayBuffer>) =>
      fetch(`${stack.url}/api/v1/related`, {
        method: 'POST',
        headers: { ...origin, 'content-type': type },
        body,
      });
    const wrongMethod = await fetch(`${stack.url}/api/v1/related`, { headers: origin });
    const unknown = await fetch(`${stack.url}/api/v1/nothing`, { method: 'POST', headers: origin });
    const tooLarge = await post('application/json', Buffer.alloc(7 * 1024 * 1024, 0x20));
    const binary = await post('image/png', Buffer.from([0x89, 0xff, 0xfe]));
    // A handler's own answer, for the headers it lets a browser read (its request id among them).
    const handled = await fetch(`${stack.url}/api/v1/related`, {
      method: 'POST',
      headers: { ...origin, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(handled.status).toBe(401);
    const exposed = handled.headers.get('access-control-expose-headers');
    expect(exposed).toContain('X-Request-Id');
    expect([wrongMethod.status, unknown.status, tooLarge.status, binary.status]).toEqual([
      405, 404, 413, 415,
    ]);
    for (const response of [wrongMethod, unknown, tooLarge, binary]) {
      expect(response.headers.get('access-control-allow-origin')).toBe('*');
      // The same answer for every origin, never compressed: no Vary, as the gateway's (README says so).
      expect(response.headers.get('vary'), String(response.status)).toBeNull();
      // Without it, the browser hid their X-Request-Id (the handlers' answers exposed it).
      expect(response.headers.get('access-control-expose-headers'), String(response.status)).toBe(exposed);
    }
    // The admin API's errors carry none (its gateway responses have no CORS headers either).
    const admin = await fetch(`${stack.url}/admin/v1/nothing`, { headers: origin });
    expect(admin.status).toBe(404);
    expect(admin.headers.get('access-control-allow-origin')).toBeNull();
    expect(admin.headers.get('access-control-expose-headers')).toBeNull();
  });

  it('takes the JSON media type in any case and with spaced parameters', async () => {
    for (const type of [
      'APPLICATION/JSON',
      'application/json ; charset=UTF-8',
      'Application/Json;charset=utf-8',
    ]) {
      const response = await stack.call('POST', '/api/v1/search/image', {
        raw: JSON.stringify({ imageData: Buffer.from('not an image').toString('base64') }),
        headers: { ...bearer(searchId), 'content-type': type },
      });
      expectError(response, 422, 'invalid_image');
    }
  });

  it('answers requests the HTTP parser refuses in the JSON error shape', async () => {
    // Headers over Node's 16 KB limit
    const big = await fetch(`${stack.url}/api/v1/search/image`, {
      method: 'POST',
      headers: { 'x-filler': 'x'.repeat(20_000) },
    });
    expect(big.status).toBe(431);
    expect(await big.json()).toMatchObject({ error: { status: 431, code: 'invalid_request' } });
    // A request line of 4 MB, all written before the answer is read: the 431, not a reset (the socket
    // was closed with the rest unread)
    const long = await rawExchange(
      `GET /api/v1/related-products?q=${'a'.repeat(4 * 2 ** 20)} HTTP/1.1\r\n\r\n`,
    );
    expect(jsonAnswer(long)).toMatchObject({ status: 431, body: { error: { code: 'invalid_request' } } });
    // A method Node does not know, over a raw socket
    const raw = await rawExchange('FOO / HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))).toMatchObject({
      error: { status: 400, code: 'invalid_request', message: 'Malformed HTTP request.' },
    });
  });

  it('closes a refused request that never stops sending, after its answer', async () => {
    const { port } = new URL(stack.url);
    const started = Date.now();
    const { raw, closedAfter } = await new Promise<{ raw: string; closedAfter: number }>((resolve) => {
      // (Half-open: the client keeps writing after the server's FIN, as a client busy sending would.)
      const socket = connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true }, () => {
        socket.write(`GET /api/v1/related-products?q=${'a'.repeat(20_000)}`);
        // A request line that goes on and on, a kilobyte every 50 ms
        const more = setInterval(() => socket.writable && socket.write('a'.repeat(1024)), 50);
        socket.on('close', () => clearInterval(more));
      });
      let raw = '';
      socket.on('data', (chunk) => (raw += chunk.toString()));
      socket.on('error', () => undefined);
      socket.setTimeout(15_000, () => socket.destroy());
      socket.on('close', () => resolve({ raw, closedAfter: Date.now() - started }));
    });
    expect(jsonAnswer(raw).status).toBe(431);
    expect(closedAfter).toBeLessThan(10_000);
  });

  it('answers an over-size body at once and closes the connection within seconds, however long it goes on', async () => {
    // (The whole body was read before the 413: a client sending without end was held until Node's 300-s
    // request timeout.)
    const { port } = new URL(stack.url);
    const started = Date.now();
    const { raw, answeredAfter, closedAfter } = await new Promise<{
      raw: string;
      answeredAfter: number;
      closedAfter: number;
    }>((resolve) => {
      const socket = connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true }, () => {
        socket.write(
          `POST /api/v1/search/image HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
            `Authorization: Bearer ${searchId}\r\nContent-Length: 1000000000\r\n\r\n`,
        );
        // 1 GB announced, 64 KB every 5 ms: over three minutes to send it all
        const more = setInterval(() => socket.writable && socket.write(Buffer.alloc(65_536, 0x20)), 5);
        socket.on('close', () => clearInterval(more));
      });
      let raw = '';
      let answeredAfter = -1;
      socket.on('data', (chunk) => {
        if (answeredAfter < 0) answeredAfter = Date.now() - started;
        raw += chunk.toString();
      });
      socket.on('error', () => undefined);
      socket.setTimeout(20_000, () => socket.destroy());
      socket.on('close', () => resolve({ raw, answeredAfter, closedAfter: Date.now() - started }));
    });
    expect(jsonAnswer(raw)).toMatchObject({ status: 413, body: { error: { code: 'payload_too_large' } } });
    expect(answeredAfter).toBeLessThan(5_000);
    expect(closedAfter).toBeLessThan(10_000);
  });

  it('closes the connection after any answer to an over-size body, not under a next request', async () => {
    const big = Buffer.alloc(7 * 1024 * 1024, 0x20);
    const unknown = await fetch(`${stack.url}/api/v1/nothing`, { method: 'POST', body: big });
    const fitting = await fetch(`${stack.url}/api/v1/nothing`, { method: 'POST', body: '{}' });
    expect([unknown.status, unknown.headers.get('connection')]).toEqual([404, 'close']);
    expect([fitting.status, fitting.headers.get('connection')]).toEqual([404, 'keep-alive']);
  });

  it('answers in the JSON error shape a target starting with //, a request without Host, and CONNECT', async () => {
    // (A `//` target was read as a host: 500, or the socket closed with no answer; Node answered a
    // Host-less request itself, bodiless; CONNECT closed the socket.)
    const send = async (text: string) => jsonAnswer(await rawExchange(text));
    const notImage = JSON.stringify({ imageData: Buffer.from('not an image').toString('base64') });
    const root = await send(
      `POST // HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n` +
        `Authorization: Bearer ${searchId}\r\n` +
        `Content-Length: ${notImage.length}\r\n\r\n${notImage}`,
    );
    expect([root.status, root.body.error.code]).toEqual([422, 'invalid_image']);
    const bracket = await send('GET //[/admin/v1/feeds HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect([bracket.status, bracket.body.error.code]).toEqual([404, 'not_found']);
    const hostless = await send('GET /admin/v1/feeds HTTP/1.1\r\nConnection: close\r\n\r\n');
    expect([hostless.status, hostless.body.error.code]).toEqual([401, 'unauthorized']);
    const star = await rawExchange('OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(star).toMatch(/^HTTP\/1\.1 204 /);
    const tunnel = await send('CONNECT /admin/v1/feeds HTTP/1.1\r\nHost: x\r\n\r\n');
    expect([tunnel.status, tunnel.body.error.code]).toEqual([405, 'method_not_allowed']);
    for (const answer of [root, bracket, hostless, tunnel]) expect(answer.head).toMatch(/X-Request-Id: /i);
  });

  it('returns 422 invalid_image for base64 that is not an image', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: Buffer.from('definitely not an image').toString('base64') },
      headers: bearer(searchId),
    });
    expectError(response, 422, 'invalid_image');
  });

  it('accepts a data: URL prefix on imageData', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: `data:image/png;base64,${image}` },
      headers: bearer(searchId),
    });
    expect(response.status).toBe(200);
  });
});

describe('endpoints before the models are available', () => {
  it('answers related products by image from the real stores: an empty feed gives []', async () => {
    const response = await stack.call('POST', '/api/v1/related', {
      body: { imageData: image },
      headers: bearer(searchId),
    });
    expect(response.status).toBe(200);
    expect(response.body).toEqual([]);
  });

  it('returns 404 product_not_found for an unknown productId without an image', async () => {
    const response = await stack.call('POST', '/api/v1/related', {
      body: { productId: 'nope' },
      headers: bearer(searchId),
    });
    expectError(response, 404, 'product_not_found');
  });

  it('returns 503 unavailable with Retry-After for detection when the models cannot load', async () => {
    const response = await stack.call('POST', '/api/v1/detect', {
      body: { imageData: image },
      headers: bearer(searchId),
    });
    expectError(response, 503, 'unavailable');
    expect(response.headers.get('retry-after')).toBe('5');
  });

  it('deletes a feed, its vector files under every model version included (it answered 503)', async () => {
    // Prepare: the feed's vectors as a model version's index keeps them, and another feed's
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'gone-models', name: 'Gone', plan: 'pro' });
    const index = stack.config.vectorIndex;
    if (index.kind !== 'local') throw new Error('local vectors expected');
    const folder = (feedId: string) =>
      join(index.dir, 'older-model-v1', Buffer.from(feedId).toString('base64url'));
    for (const feedId of ['gone-models', 'kept-models']) {
      await mkdir(folder(feedId), { recursive: true });
      await writeFile(join(folder(feedId), 'vectors.bin'), 'x');
    }
    // Act
    const deleted = await stack.admin('DELETE', '/admin/v1/feeds/gone-models');
    // Assess
    expect(deleted.status).toBe(204);
    expect((await stack.admin('GET', '/admin/v1/feeds/gone-models')).status).toBe(404);
    expect(existsSync(folder('gone-models'))).toBe(false);
    expect(existsSync(join(folder('kept-models'), 'vectors.bin'))).toBe(true);
  });
});

describe('routing', () => {
  it('returns 404 not_found for an unknown path', async () => {
    expectError(await stack.call('POST', '/api/v2/search/image', { body: {} }), 404, 'not_found');
  });

  it('returns 405 with Allow for a known path and another method', async () => {
    const response = await stack.call('GET', '/api/v1/search/image');
    expectError(response, 405, 'method_not_allowed');
    expect(response.headers.get('allow')).toBe('POST');
  });

  it('names GET and HEAD in Allow for a page path (the dashboard at /, /docs, demo files)', async () => {
    const cases: [string, string, string][] = [
      ['PUT', '/', 'GET, HEAD, POST'],
      ['DELETE', '/docs', 'GET, HEAD'],
      ['POST', '/openapi.json', 'GET, HEAD'],
      ['PATCH', '/demo/feed.xml', 'GET, HEAD'],
    ];
    for (const [method, path, allow] of cases) {
      const response = await stack.call(method, path, { raw: '' });
      expectError(response, 405, 'method_not_allowed');
      expect(response.headers.get('allow'), `${method} ${path}`).toBe(allow);
    }
    // A GET of such a path with no file behind it is a 404 (an import fetching a moved image needs it),
    // and so is another method on an image or asset path with no file
    expectError(await stack.call('GET', '/demo/images/missing.webp'), 404, 'not_found');
    expectError(await stack.call('DELETE', '/demo/images/missing.webp'), 404, 'not_found');
    // Repeated slashes are one: an admin path keeps the admin API's headers (no public CORS)
    const slashes = await stack.call('DELETE', '//admin/v1/feeds', { raw: '' });
    expectError(slashes, 405, 'method_not_allowed');
    expect(slashes.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('handles query parameters and headers named like object members as any other', async () => {
    // `constructor`, `__proto__` and `toString` are names like any other to HTTP (they once gave 500s)
    for (const name of ['constructor', '__proto__', 'toString']) {
      const query = await stack.call('POST', `/api/v1/detect?${name}=1`, { body: { imageData: image } });
      expectError(query, 401, 'missing_search_id');
      const header = await stack.call('POST', '/api/v1/detect', {
        body: { imageData: image },
        headers: { [name === '__proto__' ? 'x-proto' : name]: 'x' },
      });
      expectError(header, 401, 'missing_search_id');
    }
  });

  it('answers a CORS preflight, allowing the tracing headers monitoring scripts add', async () => {
    // (A header the answer does not allow fails the preflight: with Sentry's or OpenTelemetry's trace
    // propagation on, the browser refused every search.)
    const asked = [
      ...['authorization', 'content-type', 'traceparent', 'tracestate', 'baggage', 'sentry-trace'],
      // Datadog's (RUM and its tracers), Elastic APM's before W3C, Jaeger's and SkyWalking's (sw8 protocol)
      ...['x-datadog-trace-id', 'x-datadog-parent-id', 'x-datadog-origin', 'x-datadog-sampling-priority'],
      ...['x-datadog-tags', 'elastic-apm-traceparent', 'uber-trace-id', 'sw8', 'sw8-correlation', 'sw8-x'],
    ];
    const response = await stack.call('OPTIONS', '/api/v1/search/image', {
      headers: {
        origin: 'https://shop.example.com',
        'access-control-request-method': 'POST',
        'access-control-request-headers': asked.join(','),
      },
    });
    expect(response.status).toBe(204);
    const allowed = response.headers.get('access-control-allow-headers')!.toLowerCase().split(',');
    expect(allowed).toEqual(expect.arrayContaining(asked));
    expect(response.headers.get('access-control-max-age')).toBe('7200');
    // Any origin, as the gateway's preflight (Cors.ALL_ORIGINS): the answer does not depend on the Origin,
    // so no Vary is needed (it echoed the Origin without one: a shared cache could mix origins up).
    expect(response.headers.get('access-control-allow-origin')).toBe('*');
    expect(response.headers.get('vary')).toBeNull();
  });

  it('compresses answers from 1 KB with the coding the gateway would choose', async () => {
    // Prepare: enough feeds for their list to pass 1 KB, which no import changes while it is read
    for (let i = 0; i < 4; i += 1) await stack.admin('POST', '/admin/v1/feeds', { name: `Compressed ${i}` });
    await stack.importsIdle();
    const get = (path: string, headers: Record<string, string>) =>
      new Promise<{ headers: IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
        const request = httpGet(`${stack.url}${path}`, { headers }, (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => resolve({ headers: response.headers, body: Buffer.concat(chunks) }));
        });
        request.on('error', reject);
      });
    const admin = { authorization: `Bearer ${stack.adminToken}`, origin: 'https://shop.example.com' };
    const asking = (codings: string) => get('/admin/v1/feeds', { ...admin, 'accept-encoding': codings });
    // Act
    const plain = await get('/admin/v1/feeds', admin);
    const browser = await asking('gzip, deflate, br, zstd');
    const deflated = await asking('deflate, gzip;q=0.5');
    // The client prefers br, which the gateway does not produce: it compresses nothing (rather than gzip)
    const brotliFirst = await asking('br, gzip;q=0.8');
    const declined = await asking('gzip;q=0, identity');
    const anyCoding = await asking('*');
    const originless = await get('/admin/v1/feeds', { authorization: admin.authorization });
    const small = await get('/api/v1/detect', { 'accept-encoding': 'gzip' });
    // Assess
    expect(plain.body.length).toBeGreaterThan(1024);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(browser.headers['content-encoding']).toBe('gzip');
    expect(browser.body.length).toBeLessThan(plain.body.length / 2);
    expect(JSON.parse(gunzipSync(browser.body).toString())).toEqual(JSON.parse(plain.body.toString()));
    expect(deflated.headers['content-encoding']).toBe('deflate');
    expect(JSON.parse(inflateSync(deflated.body).toString())).toEqual(JSON.parse(plain.body.toString()));
    for (const answer of [brotliFirst, declined, anyCoding]) {
      expect(answer.headers['content-encoding']).toBeUndefined();
      expect(JSON.parse(answer.body.toString())).toEqual(JSON.parse(plain.body.toString()));
    }
    // Every answer names both, compressed or not, with an Origin or without: a shared cache keys a stored
    // answer on what its own Vary names (a plain one, stored, went to a client asking for gzip, and an
    // origin-less one to a browser, which cannot read it without its allow-origin header).
    for (const answer of [plain, browser, deflated, brotliFirst, declined, anyCoding, originless])
      expect(answer.headers.vary).toBe('Origin, Accept-Encoding');
    expect(small.headers['content-encoding']).toBeUndefined();
    expect(JSON.parse(small.body.toString()).error.code).toBe('method_not_allowed');
  });
});

describe('rate limits', () => {
  it('returns 429 with Retry-After once the plan hourly limit is spent', async () => {
    const feed = await stack.admin('POST', '/admin/v1/feeds', { name: 'Free shop' });
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
    const statuses: number[] = [];
    let last;
    for (let i = 0; i < 6; i++) {
      last = await stack.call('POST', '/api/v1/search/image', {
        body: { imageData: image },
        headers: bearer(key),
      });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    expectError(last!, 429, 'rate_limited');
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(last!.headers.get('ratelimit-limit')).toBe('5');
    expect(last!.headers.get('ratelimit-remaining')).toBe('0');
  });

  it("lets a shop's page read Retry-After and the RateLimit headers of a 429", async () => {
    // Prepare
    const feed = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Page',
      plan: 'enterprise',
      hourlyLimit: 1,
    });
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
    const fromPage = () =>
      stack.call('POST', '/api/v1/search/image', {
        body: { imageData: image },
        headers: { ...bearer(key), origin: 'https://shop.example' },
      });
    // Act
    await fromPage();
    const refused = await fromPage();
    // Assess
    expectError(refused, 429, 'rate_limited');
    const exposed = refused.headers.get('access-control-expose-headers')!.split(',');
    expect(exposed).toEqual(
      expect.arrayContaining(['Retry-After', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']),
    );
  });

  it('uses the custom hourly limit of an enterprise feed', async () => {
    const feed = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Big',
      plan: 'enterprise',
      hourlyLimit: 2,
    });
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
    const first = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: bearer(key),
    });
    expect(first.headers.get('ratelimit-limit')).toBe('2');
    expect(first.headers.get('ratelimit-remaining')).toBe('1');
  });

  it('admits exactly the limit when 50 requests race', async () => {
    const feed = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Race',
      plan: 'enterprise',
      hourlyLimit: 20,
    });
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        stack.call('POST', '/api/v1/search/image', { body: { imageData: image }, headers: bearer(key) }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(20);
    expect(statuses.filter((s) => s === 429)).toHaveLength(30);
  });
});

describe('usage', () => {
  it('counts requests per day per endpoint, including refusals, in the admin API', async () => {
    const feed = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Metered',
      plan: 'enterprise',
      hourlyLimit: 3,
    });
    const id = feed.body.feedId;
    const key = (await stack.admin('POST', `/admin/v1/feeds/${id}/keys`, {})).body.searchId;
    for (let i = 0; i < 4; i++) {
      await stack.call('POST', '/api/v1/search/image', { body: { imageData: image }, headers: bearer(key) });
    }
    await stack.call('POST', '/', { body: { imageData: image, feedId: key } });

    const usage = await stack.admin('GET', `/admin/v1/feeds/${id}/usage`);

    expect(usage.status).toBe(200);
    const today = new Date().toISOString().slice(0, 10);
    expect(usage.body.days).toEqual([
      {
        day: today,
        endpoint: 'root_search',
        requests: 1,
        ok: 0,
        clientErrors: 0,
        serverErrors: 0,
        rateLimited: 1,
      },
      {
        day: today,
        endpoint: 'search_image',
        requests: 4,
        ok: 3,
        clientErrors: 0,
        serverErrors: 0,
        rateLimited: 1,
      },
    ]);
    expect(usage.body.totals.requests).toBe(5);
    expect(usage.body.keys).toEqual([expect.objectContaining({ searchId: key, requests: 5 })]);
  });

  it('counts related-products requests per context (type and domain) of valid requests', async () => {
    // Prepare
    await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'metered-contexts',
      name: 'Contexts',
      plan: 'pro',
    });
    const key = (await stack.admin('POST', '/admin/v1/feeds/metered-contexts/keys', {})).body.searchId;
    const related = (body: Record<string, unknown>) =>
      stack.call('POST', '/api/v1/related', { body: { productId: 'none', ...body }, headers: bearer(key) });
    // Act: the product is unknown (404), still a valid request of its context; a 400 has none
    const answers = [
      await related({
        context: { type: 'pdp', domain: 'Shop.Example', pageUrl: 'https://shop.example/p/1' },
      }),
      await related({ context: { type: 'pdp', domain: 'shop.example', category: 'Shoes' } }),
      await related({ context: { type: 'cart' } }),
      await related({ context: { category: 'Shoes' } }),
      await related({}),
      await related({ context: { type: 'pdp', domain: 'shop.example' }, limit: 'many' }),
    ];
    const usage = await stack.admin('GET', '/admin/v1/feeds/metered-contexts/usage');
    // Assess
    expect(answers.map((answer) => answer.status)).toEqual([404, 404, 404, 404, 404, 400]);
    expect(usage.body.contexts).toEqual([
      { type: 'pdp', domain: 'shop.example', requests: 2 },
      { type: 'cart', domain: '', requests: 1 },
    ]);
    expect(usage.body.totals.requests).toBe(6);
  });

  it('counts an answer of 500 or more as a server error, a 503 too', async () => {
    // Prepare
    const feed = await stack.admin('POST', '/admin/v1/feeds', { name: 'Failing' });
    const key = (await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, {})).body.searchId;
    // Act: the models cannot load, so detection answers 503
    const detect = await stack.call('POST', '/api/v1/detect', {
      body: { imageData: image },
      headers: bearer(key),
    });
    const usage = await stack.admin('GET', `/admin/v1/feeds/${feed.body.feedId}/usage`);
    // Assess
    expectError(detect, 503, 'unavailable');
    expect(usage.body.days).toEqual([
      expect.objectContaining({ endpoint: 'detect', requests: 1, ok: 0, clientErrors: 0, serverErrors: 1 }),
    ]);
    expect(usage.body.totals).toMatchObject({ requests: 1, serverErrors: 1 });
  });

  it('records the last use of a key', async () => {
    const keys = await stack.admin('GET', `/admin/v1/feeds/${feedId}/keys`);
    const used = keys.body.keys.find((k: { searchId: string }) => k.searchId === searchId);
    expect(used.lastUsedAt).toEqual(expect.any(String));
  });
});
