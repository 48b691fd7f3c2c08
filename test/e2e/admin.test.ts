import { createServer, type IncomingMessage, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import { feedAdminDeps, getContainer } from '#lib/container.ts';
import { createFeed, deleteFeed } from '#lib/domain/admin/feeds.ts';
import { createKey } from '#lib/domain/admin/keys.ts';
import { COMPRESSION_MIN_BYTES } from '#lib/http/compression.ts';
import { ROUTES } from '#lib/http/routes.ts';
import { toLambdaContext, toProxyEvent } from '#lib/local/api-gateway-event.ts';
import { expectError } from '#test/support/error-shape.ts';
import { pngBase64, startTestStack, type TestStack } from '#test/support/local-stack.ts';

let stack: TestStack;

beforeAll(async () => {
  stack = await startTestStack();
});

afterAll(async () => {
  await stack?.stop();
});

describe('admin authentication', () => {
  it('returns 401 unauthorized without the admin token', async () => {
    const response = await stack.call('GET', '/admin/v1/feeds');
    expectError(response, 401, 'unauthorized');
    expect(response.body.error.message).toBe('Send the admin token as Authorization: Bearer <token>.');
    expect(response.headers.get('www-authenticate')).toBe('Bearer realm="admin"');
  });

  it('returns 401 unauthorized with a wrong admin token, saying it is not valid rather than missing', async () => {
    const response = await stack.call('GET', '/admin/v1/feeds', {
      headers: { authorization: 'Bearer wrong-token-wrong-token' },
    });
    expectError(response, 401, 'unauthorized');
    expect(response.body.error.message).toBe('The admin token is not valid.');
  });

  it('refuses the admin token with anything appended to it or cut from it', async () => {
    // Prepare
    const token = stack.adminToken!;
    // Act
    const answers = [
      await stack.call('GET', '/admin/v1/feeds', { headers: { authorization: `Bearer ${token}x` } }),
      await stack.call('GET', '/admin/v1/feeds', {
        headers: { authorization: `Bearer ${token.slice(0, -1)}` },
      }),
    ];
    // Assess
    for (const response of answers) expectError(response, 401, 'unauthorized');
  });

  it('does not accept a search id as admin token', async () => {
    const response = await stack.call('GET', '/admin/v1/feeds', {
      headers: { authorization: `Bearer ${stack.demo.searchId}` },
    });
    expectError(response, 401, 'unauthorized');
  });
});

describe('feeds', () => {
  it('creates, reads, lists, updates and deletes a feed', async () => {
    const created = await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'acme-shoes',
      name: 'ACME shoes',
      plan: 'free',
      domains: ['Shop.Example.com'],
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      feedId: 'acme-shoes',
      name: 'ACME shoes',
      plan: 'free',
      hourlyLimit: 100,
      customHourlyLimit: false,
      domains: ['shop.example.com'],
      requireOrigin: false,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      lastImport: null,
    });

    const read = await stack.admin('GET', '/admin/v1/feeds/acme-shoes');
    const list = await stack.admin('GET', '/admin/v1/feeds');
    expect(read.body).toEqual(created.body);
    expect(list.body.feeds.map((f: { feedId: string }) => f.feedId)).toEqual(
      expect.arrayContaining(['demo', 'acme-shoes']),
    );

    const updated = await stack.admin('PATCH', '/admin/v1/feeds/acme-shoes', {
      plan: 'enterprise',
      hourlyLimit: 5000,
      domains: ['*.example.com'],
    });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({
      plan: 'enterprise',
      hourlyLimit: 5000,
      customHourlyLimit: true,
      domains: ['*.example.com'],
    });
    // The enterprise default is told apart from a custom limit of the same number
    const byDefault = await stack.admin('PATCH', '/admin/v1/feeds/acme-shoes', { hourlyLimit: null });
    expect(byDefault.body).toMatchObject({ plan: 'enterprise', customHourlyLimit: false });
    const pinned = await stack.admin('PATCH', '/admin/v1/feeds/acme-shoes', {
      hourlyLimit: byDefault.body.hourlyLimit,
    });
    expect(pinned.body).toMatchObject({ hourlyLimit: byDefault.body.hourlyLimit, customHourlyLimit: true });

    const downgraded = await stack.admin('PATCH', '/admin/v1/feeds/acme-shoes', { plan: 'pro' });
    expect(downgraded.body).toMatchObject({ hourlyLimit: 1000, customHourlyLimit: false });

    // Its import status (DESIGN §2): the newest import, on every answer, and not part of its version
    const before = await stack.admin('GET', '/admin/v1/feeds/acme-shoes');
    const content = JSON.stringify({ id: 'p1', title: 'One' });
    const first = await stack.admin('POST', '/admin/v1/feeds/acme-shoes/imports', {
      format: 'jsonl',
      content,
    });
    await stack.importsIdle();
    const second = await stack.admin('POST', '/admin/v1/feeds/acme-shoes/imports', {
      format: 'jsonl',
      content: `${content}\n{"id":"p2"}`,
      mode: 'incremental',
    });
    const queued = await stack.admin('GET', '/admin/v1/feeds/acme-shoes');
    expect(queued.body.lastImport).toMatchObject({ importId: second.body.importId, mode: 'incremental' });
    await stack.importsIdle();
    const after = await stack.admin('GET', '/admin/v1/feeds/acme-shoes');
    expect(after.body.lastImport).toEqual({
      importId: second.body.importId,
      status: 'succeeded',
      mode: 'incremental',
      createdAt: expect.any(String),
      finishedAt: expect.any(String),
    });
    expect(second.body.importId).not.toBe(first.body.importId);
    expect(after.headers.get('etag')).toBe(before.headers.get('etag'));
    const listed = (await stack.admin('GET', '/admin/v1/feeds')).body.feeds;
    expect(listed.find((f: { feedId: string }) => f.feedId === 'acme-shoes').lastImport).toEqual(
      after.body.lastImport,
    );

    const key = (await stack.admin('POST', '/admin/v1/feeds/acme-shoes/keys', {})).body.searchId;
    const deleted = await stack.admin('DELETE', '/admin/v1/feeds/acme-shoes');
    expect(deleted.status).toBe(204);
    expectError(await stack.admin('GET', '/admin/v1/feeds/acme-shoes'), 404, 'feed_not_found');
    const image = await pngBase64();
    const orphan = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: { authorization: `Bearer ${key}` },
    });
    expectError(orphan, 401, 'invalid_search_id');
  });

  it('changes nothing when the import status cannot be read for a PATCH (its error is not after the write)', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'status-fails', name: 'Before' });
    const c = getContainer();
    const list = c.imports.list;
    c.imports.list = async () => {
      throw Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
    };
    try {
      const patched = await stack.admin('PATCH', '/admin/v1/feeds/status-fails', { name: 'After' });
      expectError(patched, 503, 'unavailable');
    } finally {
      c.imports.list = list;
    }
    expect((await stack.admin('GET', '/admin/v1/feeds/status-fails')).body.name).toBe('Before');
  });

  it('deletes a feed within seconds while a URL import is still downloading its feed file', async () => {
    // Prepare: a shop server that sends its feed file one byte every 100 ms (it would take minutes)
    const shop = createServer((_request, response) => {
      const timer = setInterval(() => response.write(' '), 100);
      response.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => shop.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(shop.address() as AddressInfo).port}/feed.xml`;
      await stack.admin('POST', '/admin/v1/feeds', { feedId: 'slow-shop', name: 'Slow' });
      const started = await stack.admin('POST', '/admin/v1/feeds/slow-shop/imports', { url });
      expect(started.status).toBe(202);
      const importPath = `/admin/v1/feeds/slow-shop/imports/${started.body.importId}`;
      let status = 'queued';
      while (status === 'queued') {
        await new Promise((resolve) => setTimeout(resolve, 100));
        status = (await stack.admin('GET', importPath)).body.status;
      }
      expect(status).toBe('running');
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Act
      const deleted = await stack.admin('DELETE', '/admin/v1/feeds/slow-shop');
      // Assess: before, the DELETE waited 10 s for the download and answered 409
      expect(deleted.status).toBe(204);
      expect((await stack.admin('GET', '/admin/v1/feeds/slow-shop')).status).toBe(404);
      await stack.importsIdle();
      expect((await stack.admin('POST', '/admin/v1/feeds', { feedId: 'slow-shop', name: 'S' })).status).toBe(
        201,
      );
      expect((await stack.admin('GET', '/admin/v1/feeds/slow-shop/imports')).body.imports).toEqual([]);
    } finally {
      shop.closeAllConnections();
      await new Promise((resolve) => shop.close(resolve));
    }
  });

  it("shows a URL import's feed URL and image links without their credentials, fetching with them", async () => {
    // Prepare: a shop whose feed answers only with its password and token; its images all answer 404
    const asked: { url?: string; authorization?: string }[] = [];
    const shop = createServer((request, response) => {
      asked.push({ url: request.url, authorization: request.headers.authorization });
      const basic = `Basic ${Buffer.from('feeduser:FEEDPASS').toString('base64')}`;
      if (request.url !== '/private.xml?token=FEEDQUERYTOKEN' || request.headers.authorization !== basic)
        return response.writeHead(404).end();
      const base = `http://127.0.0.1:${(shop.address() as AddressInfo).port}`;
      const item = (id: string, link: string) =>
        `<item><g:id>${id}</g:id><title>${id}</title><g:image_link>${link}</g:image_link><g:price>1.00 USD</g:price></item>`;
      response
        .writeHead(200, { 'content-type': 'application/xml' })
        .end(
          `<?xml version="1.0"?><rss version="2.0" xmlns:g="http://base.google.com/ns/1.0"><channel>${item(
            'one',
            `${base}/img1.jpg?X-Amz-Signature=IMGSECRETSIG`,
          )}${item('two', base.replace('//', '//imguser:IMGPASS@') + '/img2.jpg')}</channel></rss>`,
        );
    });
    await new Promise<void>((resolve) => shop.listen(0, '127.0.0.1', resolve));
    try {
      const port = (shop.address() as AddressInfo).port;
      const url = `http://feeduser:FEEDPASS@127.0.0.1:${port}/private.xml?token=FEEDQUERYTOKEN`;
      await stack.admin('POST', '/admin/v1/feeds', { feedId: 'private-shop', name: 'Private' });
      // Act
      const started = await stack.admin('POST', '/admin/v1/feeds/private-shop/imports', { url });
      await stack.importsIdle();
      const shown = await stack.admin('GET', `/admin/v1/feeds/private-shop/imports/${started.body.importId}`);
      const listed = await stack.admin('GET', '/admin/v1/feeds/private-shop/imports');
      // Assess: the feed was fetched with its credentials, and neither answer shows one
      expect(asked[0]).toMatchObject({ url: '/private.xml?token=FEEDQUERYTOKEN' });
      expect(shown.body).toMatchObject({
        status: 'failed',
        source: { kind: 'url', url: `http://***@127.0.0.1:${port}/private.xml?token=***` },
        errors: [
          {
            row: 1,
            message: `image_link http://127.0.0.1:${port}/img1.jpg?X-Amz-Signature=***: HTTP 404.`,
          },
          { row: 2, message: `image_link http://***@127.0.0.1:${port}/img2.jpg: HTTP 404.` },
        ],
      });
      expect(shown.body.message).toContain(
        `image_link http://127.0.0.1:${port}/img1.jpg?X-Amz-Signature=***`,
      );
      expect(listed.body.imports).toEqual([shown.body]);
      expect(JSON.stringify([shown.body, listed.body])).not.toMatch(/PASS|FEEDQUERYTOKEN|IMGSECRETSIG|user/);
      expect(asked.map((request) => request.url)).toContain('/img1.jpg?X-Amz-Signature=IMGSECRETSIG');
    } finally {
      shop.closeAllConnections();
      await new Promise((resolve) => shop.close(resolve));
    }
  });

  it('returns 409 conflict for an existing feed id', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'dup-feed', name: 'One' });
    expectError(
      await stack.admin('POST', '/admin/v1/feeds', { feedId: 'dup-feed', name: 'Two' }),
      409,
      'conflict',
    );
  });

  it.each([
    ['a missing name', {}, 'name'],
    ['an unknown plan', { name: 'x', plan: 'gold' }, 'plan'],
    ['an invalid domain', { name: 'x', domains: ['https://shop.example.com/cart'] }, 'domains.0'],
    ['hourlyLimit on the free plan', { name: 'x', hourlyLimit: 10 }, 'hourlyLimit'],
    ['an unknown field', { name: 'x', colour: 'red' }, '(body)'],
  ])('returns 400 for %s', async (_name, body, path) => {
    const response = await stack.admin('POST', '/admin/v1/feeds', body);
    expectError(response, 400, 'invalid_request');
    expect(response.body.error.details.map((d: { path: string }) => d.path)).toContain(path);
  });

  it('keeps an IP address given with a scheme as the address, and names what a shorthand is read as', async () => {
    // Act
    const created = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'By address',
      domains: ['https://192.0.2.10:8443/', 'http://192.0.2.11'],
    });
    const shorthand = await stack.admin('POST', '/admin/v1/feeds', { name: 'x', domains: ['https://127.1'] });
    // Assess: the full address was refused as a shorthand of itself once it came with a scheme
    expect(created.status).toBe(201);
    expect(created.body.domains).toEqual(['192.0.2.10', '192.0.2.11']);
    expectError(shorthand, 400, 'invalid_request');
    expect(shorthand.body.error.details).toEqual([
      {
        path: 'domains.0',
        message: 'is read as an IP address (127.0.0.1): write one as its four numbers, such as 192.0.2.10',
      },
    ]);
  });

  it('bounds the 400 of a body with thousands of unknown fields, and refuses lone surrogates', async () => {
    // (250,000 unknown keys made a 400 of 6.3 MB, listing each twice: past Lambda's 6 MB answer.)
    const unknown = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, 0]));
    const many = await stack.admin('POST', '/admin/v1/feeds', { name: 'x', ...unknown });
    expectError(many, 400, 'invalid_request');
    expect(JSON.stringify(many.body).length).toBeLessThan(1000);
    expect(many.body.error.message).toMatch(/Unrecognized keys: "k0", .* and 4995 more$/);
    // A lone surrogate is no character: stored, it came back as an escape no client can show.
    const lone = await stack.admin('POST', '/admin/v1/feeds', { name: 'a\ud800b' });
    expectError(lone, 400, 'invalid_request');
    expect(lone.body.error.message).toMatch(/lone surrogate/);
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'surrogate-url', name: 'Surrogate' });
    const url = await stack.admin('POST', '/admin/v1/feeds/surrogate-url/imports', {
      url: 'https://shop.example.com/feed\udc00.xml',
    });
    expectError(url, 400, 'invalid_request');
    expect(url.body.error.details[0].path).toBe('url');
  });

  it('returns 404 feed_not_found when updating a missing feed', async () => {
    expectError(await stack.admin('PATCH', '/admin/v1/feeds/missing', { name: 'x' }), 404, 'feed_not_found');
  });

  it('keeps both changes of concurrent PATCHes of the name and the domains (one was lost)', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'two-admins', name: 'Two admins' });
    for (let round = 1; round <= 10; round++) {
      const answers = await Promise.all([
        stack.admin('PATCH', '/admin/v1/feeds/two-admins', { name: `name ${round}` }),
        stack.admin('PATCH', '/admin/v1/feeds/two-admins', { domains: [`d${round}.example.com`] }),
      ]);
      expect(answers.map((answer) => answer.status)).toEqual([200, 200]);
      const feed = (await stack.admin('GET', '/admin/v1/feeds/two-admins')).body;
      expect({ round, name: feed.name, domains: feed.domains }).toEqual({
        round,
        name: `name ${round}`,
        domains: [`d${round}.example.com`],
      });
    }
  });

  it('drops a custom hourly limit with the enterprise plan: back on that plan, its default applies', async () => {
    // Prepare
    await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'limit-kept',
      name: 'Limit',
      plan: 'enterprise',
      hourlyLimit: 7,
    });
    const byDefault = await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'limit-default',
      name: 'Default',
      plan: 'enterprise',
    });
    // Act
    await stack.admin('PATCH', '/admin/v1/feeds/limit-kept', { plan: 'pro' });
    const back = await stack.admin('PATCH', '/admin/v1/feeds/limit-kept', { plan: 'enterprise' });
    // Assess
    expect(back.body).toMatchObject({ hourlyLimit: byDefault.body.hourlyLimit, customHourlyLimit: false });
  });

  it('stores each domain once, however it was written', async () => {
    // Act
    const created = await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'domains-once',
      name: 'Domains',
      domains: ['Shop.Example.com', 'shop.example.com', 'https://shop.example.com/'],
    });
    // Assess
    expect(created.body.domains).toEqual(['shop.example.com']);
  });
});

describe('feed versions (ETag, If-Match)', () => {
  const patch = (feedId: string, body: unknown, ifMatch: string) =>
    stack.call('PATCH', `/admin/v1/feeds/${feedId}`, {
      body,
      headers: { authorization: `Bearer ${stack.adminToken}`, 'if-match': ifMatch },
    });
  const etag = async (feedId: string) =>
    (await stack.admin('GET', `/admin/v1/feeds/${feedId}`)).headers.get('etag') ?? '';

  it('keeps the domain a second editor added from the same version: 412 instead of a lost update', async () => {
    const made = await stack.admin('POST', '/admin/v1/feeds', {
      feedId: 'versioned',
      name: 'Versioned',
      domains: ['a.example.com'],
    });
    const read = await etag('versioned');
    expect(read).toMatch(/^"[\w-]{27}"$/);
    expect(made.headers.get('etag')).toBe(read);

    // Two editors read the feed, each adds a domain to the list it read.
    const first = await patch('versioned', { domains: ['a.example.com', 'x.example.com'] }, read);
    const second = await patch('versioned', { domains: ['a.example.com', 'y.example.com'] }, read);

    expect(first.status).toBe(200);
    expect(first.headers.get('etag')).not.toBe(read);
    expect(first.headers.get('etag')).toBe(await etag('versioned'));
    expectError(second, 412, 'precondition_failed');
    const feed = (await stack.admin('GET', '/admin/v1/feeds/versioned')).body;
    expect(feed.domains).toEqual(['a.example.com', 'x.example.com']);

    // Read again, applied to the new version: both domains stay.
    const again = await patch(
      'versioned',
      { domains: [...feed.domains, 'y.example.com'] },
      `"stale-tag-of-nothing", ${await etag('versioned')}`,
    );
    expect(again.status).toBe(200);
    expect(again.body.domains).toEqual(['a.example.com', 'x.example.com', 'y.example.com']);
  });

  it('reads an If-Match list sent on several header lines as one list (only the last line counted)', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'versioned-lines', name: 'Lines' });
    const current = await etag('versioned-lines');
    const send = (lines: string[]) =>
      new Promise<number>((resolve, reject) => {
        const request = httpRequest(`${stack.url}/admin/v1/feeds/versioned-lines`, {
          method: 'PATCH',
          headers: { authorization: `Bearer ${stack.adminToken}`, 'content-type': 'application/json' },
        });
        request.setHeader('If-Match', lines);
        request.on('response', (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        });
        request.on('error', reject);
        request.end(JSON.stringify({ name: 'Lines' }));
      });
    expect(await send([current, '"stale"'])).toBe(200);
    expect(await send(['"stale"', await etag('versioned-lines')])).toBe(200);
    expect(await send(['"stale"', '"older"'])).toBe(412);
  });

  it('deletes only the version in If-Match: 412 and the feed kept for another one', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'versioned-delete', name: 'Delete me' });
    const read = await etag('versioned-delete');
    await stack.admin('PATCH', '/admin/v1/feeds/versioned-delete', { name: 'Renamed meanwhile' });
    const remove = (ifMatch: string) =>
      stack.call('DELETE', '/admin/v1/feeds/versioned-delete', {
        headers: { authorization: `Bearer ${stack.adminToken}`, 'if-match': ifMatch },
      });

    expectError(await remove(read), 412, 'precondition_failed');
    expect((await stack.admin('GET', '/admin/v1/feeds/versioned-delete')).body.name).toBe(
      'Renamed meanwhile',
    );
    expect((await remove(await etag('versioned-delete'))).status).toBe(204);
    expect((await stack.admin('GET', '/admin/v1/feeds/versioned-delete')).status).toBe(404);
  });

  it('applies one of five PATCHes sent at once with the same version', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'versioned-race', name: 'Race' });
    const read = await etag('versioned-race');
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => patch('versioned-race', { name: `name ${i}` }, read)),
    );
    const applied = answers.filter((answer) => answer.status === 200);
    expect(applied).toHaveLength(1);
    for (const answer of answers.filter((a) => a.status !== 200))
      expectError(answer, 412, 'precondition_failed');
    expect((await stack.admin('GET', '/admin/v1/feeds/versioned-race')).body.name).toBe(
      applied[0]!.body.name,
    );
  });

  it("takes *, refuses a weak or another feed's version (412) and a value that is no entity tag (400)", async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'versioned-forms', name: 'Forms' });
    const read = await etag('versioned-forms');
    expectError(await patch('versioned-forms', { name: 'weak' }, `W/${read}`), 412, 'precondition_failed');
    for (const bad of ['abc', read.slice(1, -1), '"a" "b"']) {
      const answer = await patch('versioned-forms', { name: 'bad' }, bad);
      expectError(answer, 400, 'invalid_request');
      expect(answer.body.error.details[0].path).toBe('If-Match');
    }
    expect((await patch('versioned-forms', { name: 'any' }, '*')).status).toBe(200);

    // A feed created again under the id is another feed: the earlier one's version does not apply to it.
    const before = await etag('versioned-forms');
    await stack.admin('DELETE', '/admin/v1/feeds/versioned-forms');
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'versioned-forms', name: 'Again' });
    expectError(await patch('versioned-forms', { name: 'old' }, before), 412, 'precondition_failed');
    expect((await stack.admin('GET', '/admin/v1/feeds/versioned-forms')).body.name).toBe('Again');
  });
});

describe('retries with an Idempotency-Key', () => {
  const post = (path: string, body: unknown, key: string) =>
    stack.call('POST', path, {
      body,
      headers: { authorization: `Bearer ${stack.adminToken}`, 'idempotency-key': key },
    });
  const feedsNamed = async (name: string) =>
    (await stack.admin('GET', '/admin/v1/feeds')).body.feeds.filter((f: { name: string }) => f.name === name);

  it('creates one feed for a retried POST without feedId, and answers the retry with the same feed', async () => {
    const first = await post('/admin/v1/feeds', { name: 'Retried shop' }, 'key-retried-shop');
    const retry = await post('/admin/v1/feeds', { name: 'Retried shop' }, 'key-retried-shop');

    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.body).toEqual(first.body);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('x-request-id')).not.toBe(first.headers.get('x-request-id'));
    expect(retry.headers.get('original-request')).toBe(first.headers.get('x-request-id'));
    expect(first.headers.get('original-request')).toBeNull();
    expect(await feedsNamed('Retried shop')).toHaveLength(1);
    // Without a key, the same POST is a new feed, as before.
    await stack.admin('POST', '/admin/v1/feeds', { name: 'Retried shop' });
    expect(await feedsNamed('Retried shop')).toHaveLength(2);
  });

  it('creates one feed when the same POST is sent five times at once', async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => post('/admin/v1/feeds', { name: 'Raced shop' }, 'key-raced-shop')),
    );
    const created = answers.filter((answer) => answer.status === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    for (const answer of answers.filter((a) => a.status !== 201)) {
      expectError(answer, 409, 'idempotency_key_in_use');
      expect(answer.headers.get('retry-after')).toBe('1');
    }
    expect(new Set(created.map((answer) => answer.body.feedId)).size).toBe(1);
    expect(await feedsNamed('Raced shop')).toHaveLength(1);
  });

  it('refuses the key of an answered request for another body or path (422), and a malformed key (400)', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-keys', name: 'Idem keys' });
    expect((await post('/admin/v1/feeds/idem-keys/keys', { name: 'web' }, 'key-reused')).status).toBe(201);

    expectError(
      await post('/admin/v1/feeds/idem-keys/keys', { name: 'app' }, 'key-reused'),
      422,
      'idempotency_key_reused',
    );
    expectError(await post('/admin/v1/feeds', { name: 'web' }, 'key-reused'), 422, 'idempotency_key_reused');
    // The same body on another feed's keys is another request: the path's feed id is part of it
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-keys-other', name: 'Idem keys other' });
    const otherFeed = await post('/admin/v1/feeds/idem-keys-other/keys', { name: 'web' }, 'key-reused');
    expectError(otherFeed, 422, 'idempotency_key_reused');
    expect(otherFeed.body.error.message).toMatch(/used for another request/);
    const keys = (await stack.admin('GET', '/admin/v1/feeds/idem-keys/keys')).body.keys;
    expect(keys.map((k: { name: string }) => k.name)).toEqual(['web']);

    // A body too deep to fingerprint is a 400 like without the key (its recursion overflowed: a 500)
    const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`;
    const nested = await stack.call('POST', '/admin/v1/feeds', {
      raw: deep,
      headers: {
        authorization: `Bearer ${stack.adminToken}`,
        'idempotency-key': 'key-deep',
        'content-type': 'application/json',
      },
    });
    expectError(nested, 400, 'invalid_request');

    for (const bad of ['x'.repeat(256), 'clé', 'two words']) {
      const answer = await post('/admin/v1/feeds', { name: 'never' }, bad);
      expectError(answer, 400, 'invalid_request');
      expect(answer.body.error.details[0].path).toBe('Idempotency-Key');
    }
    expect(await feedsNamed('never')).toHaveLength(0);
  });

  it('replays a retry whose fields come in another order, whose path ends in a slash, or whose key is quoted', async () => {
    const first = await post('/admin/v1/feeds', { name: 'Order shop', plan: 'free' }, 'key-order');
    const reordered = await post('/admin/v1/feeds', { plan: 'free', name: 'Order shop' }, 'key-order');
    const slashed = await post('/admin/v1/feeds/', { name: 'Order shop', plan: 'free' }, 'key-order');
    const quoted = await post('/admin/v1/feeds', { name: 'Order shop', plan: 'free' }, '"key-order"');
    for (const retry of [reordered, slashed, quoted]) {
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body).toEqual(first.body);
    }
    expect(await feedsNamed('Order shop')).toHaveLength(1);
  });

  it('leaves no half-made search id or import behind a 5xx, so the retry with its key makes one', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-5xx', name: 'Five' });
    const c = getContainer();
    const throttled = () => Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
    const register = c.apiKeys.register;
    const put = c.objects.put;
    try {
      // The gateway refuses the new key once, after the key was stored.
      let failRegister = true;
      c.apiKeys.register = async (...args) => {
        if (!failRegister) return register.apply(c.apiKeys, args);
        failRegister = false;
        throw throttled();
      };
      expectError(
        await post('/admin/v1/feeds/idem-5xx/keys', { name: 'web' }, 'key-5xx'),
        503,
        'unavailable',
      );
      expect((await post('/admin/v1/feeds/idem-5xx/keys', { name: 'web' }, 'key-5xx')).status).toBe(201);
      expect((await stack.admin('GET', '/admin/v1/feeds/idem-5xx/keys')).body.keys).toHaveLength(1);

      // The import's request marker is written once, after its record, but the answer is lost.
      let failMarker = true;
      c.objects.put = async (...args) => {
        if (!failMarker || !args[0].endsWith('/request.json')) return put.apply(c.objects, args);
        failMarker = false;
        await put.apply(c.objects, args);
        throw throttled();
      };
      // The record cannot be written once, after the uploaded feed file was: the file goes too.
      const create = c.imports.create;
      c.imports.create = async () => {
        c.imports.create = create;
        throw throttled();
      };
      const lone = { format: 'jsonl', content: JSON.stringify({ id: 'p0', title: '' }), mode: 'incremental' };
      expectError(await post('/admin/v1/feeds/idem-5xx/imports', lone, 'key-5xx-record'), 503, 'unavailable');
      expect(await c.objects.list('imports/idem-5xx/')).toEqual([]);

      const body = { format: 'jsonl', content: JSON.stringify({ id: 'p1', title: '' }), mode: 'incremental' };
      expectError(await post('/admin/v1/feeds/idem-5xx/imports', body, 'key-5xx-import'), 503, 'unavailable');
      // Taken back: the feed file and the marker (whose event would start the worker for no record)
      expect(await c.objects.list('imports/idem-5xx/')).toEqual([]);
      const started = await post('/admin/v1/feeds/idem-5xx/imports', body, 'key-5xx-import');
      expect(started.status).toBe(202);
      const imports = (await stack.admin('GET', '/admin/v1/feeds/idem-5xx/imports')).body.imports;
      expect(imports.map((i: { importId: string }) => i.importId)).toEqual([started.body.importId]);
    } finally {
      c.apiKeys.register = register;
      c.objects.put = put;
    }
  });

  it('does not replay an answer for a feed deleted since, or deleted and created again (it named what is gone)', async () => {
    // Prepare: a feed made, a search id and an import, each with a key; then the feed deleted
    const feed = { feedId: 'idem-gone', name: 'Gone' };
    const content = JSON.stringify({ id: 'p1', title: '' });
    const importBody = { format: 'jsonl', content, mode: 'incremental' };
    expect((await post('/admin/v1/feeds', feed, 'key-gone-feed')).status).toBe(201);
    expect((await post('/admin/v1/feeds/idem-gone/keys', { name: 'web' }, 'key-gone-key')).status).toBe(201);
    expect((await post('/admin/v1/feeds/idem-gone/imports', importBody, 'key-gone-import')).status).toBe(202);
    await stack.importsIdle();
    // (A replay while the feed lives is an answer as before)
    const replayed = await post('/admin/v1/feeds/idem-gone/keys', { name: 'web' }, 'key-gone-key');
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect((await stack.admin('DELETE', '/admin/v1/feeds/idem-gone')).status).toBe(204);

    // Act / Assess: deleted, then created again under the id: each retry is told to send a new key
    for (const recreate of [false, true]) {
      if (recreate) expect((await stack.admin('POST', '/admin/v1/feeds', feed)).status).toBe(201);
      for (const [path, body, key] of [
        ['/admin/v1/feeds', feed, 'key-gone-feed'],
        ['/admin/v1/feeds/idem-gone/keys', { name: 'web' }, 'key-gone-key'],
        ['/admin/v1/feeds/idem-gone/imports', importBody, 'key-gone-import'],
      ] as const) {
        const retry = await post(path, body, key);
        expectError(retry, 422, 'idempotency_key_reused');
        expect(retry.body.error.message, key).toMatch(/feed idem-gone, which has been deleted since/);
      }
    }
    // …and nothing was made for them: the feed created again holds no search id and no import
    expect((await stack.admin('GET', '/admin/v1/feeds/idem-gone/keys')).body.keys).toEqual([]);
    expect((await stack.admin('GET', '/admin/v1/feeds/idem-gone/imports')).body.imports).toEqual([]);
  });

  it('does not replay an answer for a feed whose deletion has started', async () => {
    // Prepare: a deletion stopped part way leaves the feed marked (hidden) until it is finished
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-deleting', name: 'Deleting' });
    expect((await post('/admin/v1/feeds/idem-deleting/keys', { name: 'web' }, 'key-deleting')).status).toBe(
      201,
    );
    const feed = (await stack.container.feeds.get('idem-deleting', { fresh: true }))!;
    await stack.container.feeds.markDeleting('idem-deleting', new Date(), feed.createdAt, feed.updatedAt);
    // Act
    const retry = await post('/admin/v1/feeds/idem-deleting/keys', { name: 'web' }, 'key-deleting');
    // Assess
    expectError(retry, 422, 'idempotency_key_reused');
  });

  it("replays a key's answer whatever the clocks of the functions that made the feed and the answer", async () => {
    // Prepare: the feed created by a function whose clock is a minute ahead of the one answering later
    const c = getContainer();
    const now = c.clock.now.bind(c.clock);
    c.clock.now = () => new Date(now().getTime() + 60_000);
    try {
      await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-skew', name: 'Skew' });
    } finally {
      c.clock.now = now;
    }
    // Act: a search id created with a key, then the retry
    const first = await post('/admin/v1/feeds/idem-skew/keys', { name: 'web' }, 'key-skew');
    const retry = await post('/admin/v1/feeds/idem-skew/keys', { name: 'web' }, 'key-skew');
    // Assess: the same answer again (compared by time, the feed looked created after the answer)
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toEqual(first.body);
  });

  it('keeps no error: a retry after the cause is fixed runs, and one import is started per key', async () => {
    const missing = await post('/admin/v1/feeds/idem-later/keys', { name: 'web' }, 'key-after-404');
    expectError(missing, 404, 'feed_not_found');
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'idem-later', name: 'Later' });
    const retried = await post('/admin/v1/feeds/idem-later/keys', { name: 'web' }, 'key-after-404');
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBeNull();

    const content = JSON.stringify({ id: 'p1', title: '' });
    const body = { format: 'jsonl', content, mode: 'incremental' };
    const started = await post('/admin/v1/feeds/idem-later/imports', body, 'key-import');
    const again = await post('/admin/v1/feeds/idem-later/imports', body, 'key-import');
    expect([started.status, again.status]).toEqual([202, 202]);
    expect(again.body.importId).toBe(started.body.importId);
    const imports = (await stack.admin('GET', '/admin/v1/feeds/idem-later/imports')).body.imports;
    expect(imports.map((i: { importId: string }) => i.importId)).toEqual([started.body.importId]);
  });
});

/** Creates feeds until their list is an answer the gateway compresses (COMPRESSION_MIN_BYTES). */
async function feedListToCompress(): Promise<void> {
  for (let i = 0; ; i += 1) {
    const list = await stack.admin('GET', '/admin/v1/feeds');
    if (JSON.stringify(list.body).length >= COMPRESSION_MIN_BYTES) return;
    await stack.admin('POST', '/admin/v1/feeds', { name: `Listed ${i}` });
  }
}

describe('HEAD requests', () => {
  it('answers HEAD on every GET route like GET, without the body (they were 405s)', async () => {
    await feedListToCompress();
    const feed = stack.demo.feedId;
    const paths = [
      '/admin/v1/feeds',
      `/admin/v1/feeds/${feed}`,
      `/admin/v1/feeds/${feed}/keys`,
      `/admin/v1/feeds/${feed}/usage`,
      `/admin/v1/feeds/${feed}/imports`,
      `/admin/v1/feeds/${feed}/products?limit=2`,
      '/admin/v1/feeds/nowhere',
    ];
    const send = (method: string, path: string, token = stack.adminToken) =>
      fetch(`${stack.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'accept-encoding': 'gzip, deflate, br' },
      });
    // The same headers, Content-Encoding included (a HEAD named none where the GET's answer, from 1 KB,
    // was gzipped), but for the ones about the connection and how a body is framed: a HEAD answer sends
    // no Content-Length (RFC 9110 §9.3.2 lets a server leave out what only making the body gives).
    const framing = ['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length'];
    // (Names and values: each request has its own id.)
    const shown = (headers: Headers) =>
      [...headers.entries()].map(([name, value]) => [name, name === 'x-request-id' ? 'an id' : value]);
    const compared = (headers: Headers) => shown(headers).filter(([name]) => !framing.includes(name!));
    const codings: (string | null)[] = [];
    for (const [path, token] of [...paths.map((path) => [path, stack.adminToken]), [paths[0]!, 'wrong']]) {
      const get = await send('GET', path!, token);
      const head = await send('HEAD', path!, token);
      expect(head.status, path).toBe(get.status);
      expect(compared(head.headers), path).toEqual(compared(get.headers));
      codings.push(get.headers.get('content-encoding'));
      expect((await get.text()).length, path).toBeGreaterThan(0);
      expect(await head.text(), path).toBe('');
    }
    // Both kinds were compared: answers from 1 KB (gzipped) and smaller ones (as they are).
    expect(codings).toContain('gzip');
    expect(codings).toContain(null);
    // A 405 names HEAD where GET is allowed.
    const wrong = await stack.admin('DELETE', '/admin/v1/feeds');
    expectError(wrong, 405, 'method_not_allowed');
    expect(wrong.headers.get('allow')).toBe('POST, GET, HEAD');
  });
});

describe('HEAD in the handlers', () => {
  it('drops the body of a HEAD answer in the handler itself (the gateway passes a body on)', async () => {
    await feedListToCompress();
    // The handler as the gateway's HEAD method calls it, without the local server in between
    const route = ROUTES.find((candidate) => candidate.name === 'AdminListFeeds')!;
    const module = (await import(pathToFileURL(resolve(route.entry)).href)) as Record<string, unknown>;
    const handler = module[route.handler] as (
      event: APIGatewayProxyEvent,
      context: Context,
    ) => Promise<APIGatewayProxyResult>;
    const invoke = (method: string, acceptEncoding?: string) => {
      const headers: Record<string, string> = { authorization: `Bearer ${stack.adminToken}` };
      if (acceptEncoding) headers['accept-encoding'] = acceptEncoding;
      const request = {
        method,
        httpVersion: '1.1',
        rawHeaders: Object.entries(headers).flat(),
        headers,
        socket: { remoteAddress: '127.0.0.1' },
      } as unknown as IncomingMessage;
      const url = new URL('http://localhost/admin/v1/feeds');
      const event = toProxyEvent(request, url, { route, pathParameters: {} }, null);
      return handler(event, toLambdaContext(route.name, event.requestContext.requestId));
    };
    const [get, head] = [await invoke('GET'), await invoke('HEAD')];
    expect([get.statusCode, head.statusCode]).toEqual([200, 200]);
    expect(get.body.length).toBeGreaterThan(0);
    expect(head.body).toBe('');
    expect(head.headers?.['Content-Type']).toBe(get.headers?.['Content-Type']);
    // With the body gone, the gateway has nothing to compress: the handler names the coding the GET's
    // answer gets from it (from 1 KB, for a client that takes gzip), and none for a client that does not.
    expect(Buffer.byteLength(get.body)).toBeGreaterThanOrEqual(COMPRESSION_MIN_BYTES);
    expect(get.headers?.['Content-Encoding']).toBeUndefined();
    expect((await invoke('HEAD', 'gzip, deflate, br')).headers?.['Content-Encoding']).toBe('gzip');
    expect((await invoke('HEAD', 'br, gzip;q=0.8')).headers?.['Content-Encoding']).toBeUndefined();
    expect(head.headers?.['Content-Encoding']).toBeUndefined();
  });
});

describe('search ids', () => {
  it('creates and lists keys of a feed, newest first, with revocation visible', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'keys-feed', name: 'Keys' });
    const first = await stack.admin('POST', '/admin/v1/feeds/keys-feed/keys', { name: 'storefront' });
    const second = await stack.admin('POST', '/admin/v1/feeds/keys-feed/keys', { name: 'staging' });
    await stack.admin('DELETE', `/admin/v1/keys/${first.body.searchId}`);

    const list = await stack.admin('GET', '/admin/v1/feeds/keys-feed/keys');

    expect(first.status).toBe(201);
    expect(first.body.searchId).toMatch(/^vps_[A-Za-z0-9_-]{32}$/);
    expect(list.body.keys.map((k: { name: string }) => k.name)).toEqual(['staging', 'storefront']);
    expect(list.body.keys[0].revokedAt).toBeUndefined();
    expect(list.body.keys[1].revokedAt).toEqual(expect.any(String));
    expect(second.body.feedId).toBe('keys-feed');
  });

  it('does not let a key or usage an earlier feed of the same id left behind count for the new feed', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'reborn', name: 'Reborn' });
    const old = (await stack.admin('POST', '/admin/v1/feeds/reborn/keys', { name: 'web' })).body;
    const stored = (await stack.container.keys.get(old.searchId))!;
    const oldFeed = (await stack.container.feeds.get('reborn', { fresh: true }))!;
    expect((await stack.admin('DELETE', '/admin/v1/feeds/reborn')).status).toBe(204);
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'reborn', name: 'Reborn again' });
    // What the deletion can leave in AWS: a key its sweep missed (the byFeed index lags a new key) and a
    // usage row a public function wrote from its auth cache after the sweep.
    await stack.container.keys.create(stored);
    await stack.container.usage.record({
      feedId: 'reborn',
      feedCreatedAt: oldFeed.createdAt,
      searchId: old.searchId,
      endpoint: 'related',
      outcome: 'ok',
      at: new Date(),
    });

    const related = await stack.call('POST', '/api/v1/related', {
      body: { productId: 'p1' },
      headers: { authorization: `Bearer ${old.searchId}` },
    });
    const keys = await stack.admin('GET', '/admin/v1/feeds/reborn/keys');
    const usage = await stack.admin('GET', '/admin/v1/feeds/reborn/usage');

    expectError(related, 401, 'invalid_search_id');
    expect(keys.body.keys).toEqual([]);
    expect(usage.body.totals.requests).toBe(0);
    expect(usage.body.keys).toEqual([]);
  });

  it("accepts a new feed's key at once where the earlier feed of its id is still cached", async () => {
    // This process's auth cache holds the feed after a public call...
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'cached', name: 'Cached' });
    const first = (await stack.admin('POST', '/admin/v1/feeds/cached/keys', { name: 'web' })).body;
    const related = (searchId: string) =>
      stack.call('POST', '/api/v1/related', {
        body: { productId: 'p1' },
        headers: { authorization: `Bearer ${searchId}` },
      });
    expectError(await related(first.searchId), 404, 'product_not_found');
    // ...when another process (an admin function in AWS) deletes it, creates it again and a key for it.
    const config = stack.container.config;
    const db = createDocumentClient(config);
    const other = {
      ...feedAdminDeps(stack.container),
      feeds: new DynamoDbFeedStore(db, config.tables.feeds),
      keys: new DynamoDbKeyStore(db, config.tables.keys),
    };
    await deleteFeed(other, 'cached');
    await createFeed(other, {
      feedId: 'cached',
      name: 'Again',
      plan: 'free',
      domains: [],
      requireOrigin: false,
    });
    const second = await createKey(other, 'cached', { name: 'web' });

    expectError(await related(second.searchId), 404, 'product_not_found');
  });

  it('keeps the feed creation time it binds a key to out of the key resource', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'key-shape', name: 'Shape' });
    const created = await stack.admin('POST', '/admin/v1/feeds/key-shape/keys', { name: 'web' });
    const listed = await stack.admin('GET', '/admin/v1/feeds/key-shape/keys');
    const revoked = await stack.admin('DELETE', `/admin/v1/keys/${created.body.searchId}`);

    const shape = {
      searchId: created.body.searchId,
      feedId: 'key-shape',
      name: 'web',
      createdAt: expect.any(String),
    };
    expect(created.body).toEqual(shape);
    expect(listed.body.keys).toEqual([shape]);
    expect(revoked.body).toEqual({ ...shape, revokedAt: expect.any(String) });
  });

  it('returns 404 when creating a key for a missing feed or revoking an unknown key', async () => {
    expectError(await stack.admin('POST', '/admin/v1/feeds/nowhere/keys', {}), 404, 'feed_not_found');
    expectError(await stack.admin('DELETE', '/admin/v1/keys/vps_unknown'), 404, 'not_found');
  });

  it('returns 404, not 500, for ids longer than any id (past DynamoDB key limits)', async () => {
    const long = 'x'.repeat(3000);
    for (const [method, path] of [
      ['GET', `/admin/v1/feeds/${long}`],
      ['PATCH', `/admin/v1/feeds/${long}`],
      ['GET', `/admin/v1/feeds/${long}/keys`],
      ['GET', `/admin/v1/feeds/${long}/products`],
      ['GET', `/admin/v1/feeds/${stack.demo.feedId}/imports/${'i'.repeat(1100)}`],
      ['DELETE', `/admin/v1/keys/${long}`],
    ] as const) {
      const response = await stack.admin(method, path, method === 'PATCH' ? { name: 'x' } : undefined);
      expectError(response, 404, 'not_found');
    }
  });

  it('returns 400 for a product-list cursor this listing did not write', async () => {
    const feed = `/admin/v1/feeds/${stack.demo.feedId}/products?limit=2`;
    for (const cursor of ['!!!', Buffer.from('p'.repeat(1100)).toString('base64url'), '_-_-'])
      expectError(await stack.admin('GET', `${feed}&cursor=${cursor}`), 400, 'invalid_request');
  });
});

describe('usage queries', () => {
  it('returns 400 for a malformed or reversed range', async () => {
    expectError(
      await stack.admin('GET', '/admin/v1/feeds/demo/usage?from=yesterday'),
      400,
      'invalid_request',
    );
    expectError(
      await stack.admin('GET', '/admin/v1/feeds/demo/usage?from=2026-02-01&to=2026-01-01'),
      400,
      'invalid_request',
    );
  });

  it('names the query, not the body, for a parameter the route does not take', async () => {
    for (const path of [
      '/admin/v1/feeds/demo/usage?colour=red',
      '/admin/v1/feeds/demo/imports?limit[]=1',
      '/admin/v1/feeds/demo/products?page=2',
      // Routes that take no parameter at all refuse one too (the feeds list ignored ?limit=1)
      '/admin/v1/feeds?limit=1',
      '/admin/v1/feeds/demo?fields=name',
      '/admin/v1/feeds/demo/keys?includeRevoked=false',
    ]) {
      const response = await stack.admin('GET', path);
      expectError(response, 400, 'invalid_request');
      expect(
        response.body.error.details.map((d: { path: string }) => d.path),
        path,
      ).toEqual(['(query)']);
      expect(response.body.error.message, path).toMatch(/^Invalid \(query\)/);
    }
  });

  it('refuses a query on the routes that change things, before changing anything', async () => {
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'query-kept', name: 'Kept' });
    const calls: [string, string, unknown][] = [
      ['DELETE', '/admin/v1/feeds/query-kept?force=true', undefined],
      ['PATCH', '/admin/v1/feeds/query-kept?dryRun=1', { name: 'Changed' }],
      ['POST', '/admin/v1/feeds?dryRun=1', { feedId: 'query-made', name: 'Made' }],
      ['POST', '/admin/v1/feeds/query-kept/keys?plan=pro', { name: 'web' }],
    ];
    for (const [method, path, body] of calls) {
      const response = await stack.admin(method, path, body);
      expectError(response, 400, 'invalid_request');
      expect(
        response.body.error.details.map((d: { path: string }) => d.path),
        path,
      ).toEqual(['(query)']);
    }
    expect((await stack.admin('GET', '/admin/v1/feeds/query-kept')).body.name).toBe('Kept');
    expect((await stack.admin('GET', '/admin/v1/feeds/query-made')).status).toBe(404);
    expect((await stack.admin('GET', '/admin/v1/feeds/query-kept/keys')).body.keys).toEqual([]);
  });

  it('names a day that is not in the calendar as such, not as a bad range', async () => {
    const response = await stack.admin('GET', '/admin/v1/feeds/demo/usage?from=2026-02-30&to=2026-03-01');
    expectError(response, 400, 'invalid_request');
    expect(response.body.error.details).toEqual([{ path: 'from', message: 'not a day of the calendar' }]);
  });
});

describe('local runtime', () => {
  it('keeps data across a restart on the same folder', async () => {
    const { startLocalStack } = await import('#lib/local/stack.ts');
    const dataDir = stack.config.local.dataDir;
    await stack.admin('POST', '/admin/v1/feeds', { feedId: 'survivor', name: 'Persisted' });
    const demoKey = stack.demo.searchId;
    await stack.close();

    const again = await startLocalStack({
      ...process.env,
      LOG_LEVEL: 'silent',
      PORT: '0',
      DATA_DIR: dataDir,
    });
    try {
      const response = await fetch(`${again.url}/admin/v1/feeds/survivor`, {
        headers: { authorization: `Bearer ${again.adminToken}` },
      });
      expect(response.status).toBe(200);
      expect(again.adminToken).toBe(stack.adminToken);
      expect(again.demo.searchId).toBe(demoKey);
    } finally {
      await again.close();
      stack = { ...stack, stop: async () => {} } as TestStack;
    }
  });
});
