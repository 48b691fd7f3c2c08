import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpImageFetcher, isBlockedAddress } from '#lib/adapters/http-image-fetcher.ts';
import { FetchError } from '#lib/domain/catalogue/imports.ts';

let server: Server;
let base: string;
const limits = { maxBytes: 1000, timeoutMs: 2000 };

beforeAll(async () => {
  server = createServer((request, response) => {
    if (request.url === '/img') return response.end(Buffer.from('image bytes'));
    if (request.url === '/redirect') {
      response.writeHead(302, { location: '/img' });
      return response.end();
    }
    if (request.url === '/to-metadata') {
      response.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' });
      return response.end();
    }
    if (request.url === '/big') return response.end(Buffer.alloc(5000));
    if (request.url === '/chunked') {
      // No Content-Length: the cap must hold while streaming.
      response.write(Buffer.alloc(600));
      response.write(Buffer.alloc(600));
      return response.end();
    }
    if (request.url === '/slow') return void setTimeout(() => response.end('late'), 3000);
    if (request.url === '/trickle') {
      // A part every 50 ms for 5 s.
      let sent = 0;
      const timer = setInterval(() => {
        if (response.destroyed || sent === 100) {
          clearInterval(timer);
          return void response.end();
        }
        sent += 1;
        response.write('x');
      }, 50);
      return;
    }
    response.writeHead(404);
    response.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('HttpImageFetcher', () => {
  const open = new HttpImageFetcher({ allowPrivate: true });
  const guarded = new HttpImageFetcher({ allowPrivate: false });

  it('fetches bytes and follows redirects', async () => {
    const { bytes, url } = await open.fetch(`${base}/redirect`, limits);
    expect(bytes.toString()).toBe('image bytes');
    expect(url).toBe(`${base}/img`);
  });

  it('refuses loopback, private and metadata addresses unless allowed', async () => {
    await expect(guarded.fetch(`${base}/img`, limits)).rejects.toThrow(/private or reserved/);
    await expect(guarded.fetch('http://localhost:9/x', limits)).rejects.toThrow(/private or reserved/);
    await expect(guarded.fetch('http://[::1]:9/x', limits)).rejects.toThrow(/private or reserved/);
    await expect(guarded.fetch('http://169.254.169.254/latest/meta-data/', limits)).rejects.toBeInstanceOf(
      FetchError,
    );
  });

  it("lets local mode's flag through to loopback and private networks, never to link-local or metadata", async () => {
    for (const url of [
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]:9/x',
      'http://[::ffff:169.254.169.254]/x',
      'http://224.0.0.1/x',
      'http://0.0.0.0:9/x',
    ])
      await expect(open.fetch(url, limits), url).rejects.toThrow(/private or reserved/);
    // Loopback is fetched; a private LAN address is tried (nothing answers on it here)
    await expect(open.fetch(`${base}/img`, limits)).resolves.toMatchObject({ url: `${base}/img` });
    await expect(open.fetch('http://10.255.255.1:9/x', { ...limits, timeoutMs: 200 })).rejects.not.toThrow(
      /private or reserved/,
    );
  });

  it('checks every redirect hop again', async () => {
    // Only the test server's address is let through; its redirect points at the metadata service.
    const testServerOnly = new HttpImageFetcher({ allowPrivate: false, allowAddresses: ['127.0.0.1'] });
    await expect(testServerOnly.fetch(`${base}/img`, limits)).resolves.toMatchObject({ url: `${base}/img` });
    await expect(testServerOnly.fetch(`${base}/to-metadata`, limits)).rejects.toThrow(
      '169.254.169.254 is a private or reserved address; refused.',
    );
  });

  it('caps the size, the time and reports HTTP errors', async () => {
    await expect(open.fetch(`${base}/big`, limits)).rejects.toThrow(/larger than 1000 bytes/);
    await expect(open.fetch(`${base}/slow`, { maxBytes: 1000, timeoutMs: 200 })).rejects.toThrow(/timed out/);
    await expect(open.fetch(`${base}/missing`, limits)).rejects.toThrow('HTTP 404.');
    await expect(open.fetch('ftp://example.com/x', limits)).rejects.toThrow(/http and https/);
  });

  it('stops where it is when its signal aborts: waiting for the answer, or reading the body', async () => {
    const waiting = new AbortController();
    setTimeout(() => waiting.abort(), 100);
    const started = Date.now();
    await expect(open.fetch(`${base}/slow`, limits, { signal: waiting.signal })).rejects.toThrow('stopped.');
    expect(Date.now() - started).toBeLessThan(1000);

    const reading = new AbortController();
    const { body } = await open.open(
      `${base}/trickle`,
      { maxBytes: 1000, timeoutMs: 10_000 },
      {
        signal: reading.signal,
      },
    );
    let parts = 0;
    const read = (async () => {
      for await (const _part of body) if (++parts === 3) reading.abort();
    })();
    await expect(read).rejects.toThrow('stopped.');
    expect(parts).toBe(3);
    await expect(open.fetch(`${base}/img`, limits, { signal: reading.signal })).rejects.toBeInstanceOf(
      FetchError,
    );
  });

  it('streams a body with open() and stops it at the size cap', async () => {
    const { body } = await open.open(`${base}/img`, limits);
    const parts: Buffer[] = [];
    for await (const chunk of body) parts.push(chunk);
    expect(Buffer.concat(parts).toString()).toBe('image bytes');
    const big = await open.open(`${base}/chunked`, limits);
    await expect(
      (async () => {
        for await (const _chunk of big.body) void _chunk;
      })(),
    ).rejects.toThrow(/larger than 1000 bytes/);
  });

  it.each([
    ['10.1.2.3', true],
    ['172.20.0.1', true],
    ['192.168.1.1', true],
    ['127.0.0.1', true],
    ['169.254.169.254', true],
    ['100.64.0.1', true],
    ['::1', true],
    ['fd00:ec2::254', true],
    ['fe80::1', true],
    ['::ffff:127.0.0.1', true],
    ['8.8.8.8', false],
    ['2606:4700:4700::1111', false],
  ])('classifies %s as blocked=%s', (address, blocked) => {
    expect(isBlockedAddress(address)).toBe(blocked);
  });
});
