import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbIdempotencyStore } from '#lib/adapters/dynamodb-idempotency-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import {
  DynamoDbUsageStore,
  MAX_DAILY_CONTEXTS,
  OTHER_CONTEXTS,
} from '#lib/adapters/dynamodb-usage-store.ts';
import type { Config } from '#lib/config.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';

let config: Config;
let stop: () => Promise<void>;
let feeds: DynamoDbFeedStore;
let keys: DynamoDbKeyStore;
let usage: DynamoDbUsageStore;
let idempotency: DynamoDbIdempotencyStore;

beforeAll(async () => {
  ({ config, stop } = await startTestStores());
  const db = createDocumentClient(config);
  feeds = new DynamoDbFeedStore(db, config.tables.feeds);
  keys = new DynamoDbKeyStore(db, config.tables.keys);
  usage = new DynamoDbUsageStore(db, config.tables.usage);
  idempotency = new DynamoDbIdempotencyStore(db, config.tables.idempotency);
});

afterAll(async () => {
  await stop?.();
});

const feed = (feedId: string): Feed => ({
  feedId,
  name: feedId,
  plan: 'free',
  domains: ['a.example.com'],
  requireOrigin: false,
  createdAt: '2026-11-01T00:00:00.000Z',
  updatedAt: '2026-11-01T00:00:00.000Z',
});

describe('DynamoDbFeedStore', () => {
  it('stores, reads, lists, replaces and deletes feeds', async () => {
    await feeds.create(feed('f1'));
    await feeds.put({ ...feed('f1'), name: 'renamed', domains: [] });

    expect(await feeds.get('f1')).toEqual({ ...feed('f1'), name: 'renamed', domains: [] });
    expect((await feeds.list()).map((f) => f.feedId)).toContain('f1');

    await feeds.delete('f1');
    expect(await feeds.get('f1')).toBeUndefined();
  });

  it('refuses to create a feed twice and to replace a missing one', async () => {
    await feeds.create(feed('f2'));
    await expect(feeds.create(feed('f2'))).rejects.toMatchObject({ code: 'conflict' });
    await expect(feeds.put(feed('missing'))).rejects.toMatchObject({ code: 'feed_not_found' });
  });

  it('marks a feed as being deleted once, and refuses to replace it from then on', async () => {
    await feeds.create(feed('f3'));
    await feeds.markDeleting('f3', new Date('2026-11-22T10:00:00Z'));
    await feeds.markDeleting('f3', new Date('2026-11-22T11:00:00Z'));

    expect(await feeds.get('f3', { fresh: true })).toEqual({
      ...feed('f3'),
      deletingAt: '2026-11-22T10:00:00.000Z',
    });
    // An update that read the feed before the mark must not write it back without the mark.
    await expect(feeds.put({ ...feed('f3'), name: 'renamed' })).rejects.toMatchObject({
      code: 'feed_not_found',
    });
    await expect(feeds.create(feed('f3'))).rejects.toMatchObject({ code: 'conflict' });
    await expect(feeds.markDeleting('missing', new Date())).rejects.toMatchObject({
      code: 'feed_not_found',
    });
  });
});

describe('DynamoDbKeyStore', () => {
  it('finds keys by id and by feed, revokes and touches them', async () => {
    const at = new Date('2026-11-22T10:00:00Z');
    await keys.create({ searchId: 'k1', feedId: 'fk', name: 'web', createdAt: at.toISOString() });
    await keys.create({ searchId: 'k2', feedId: 'fk', name: 'app', createdAt: at.toISOString() });

    await keys.revoke('k1', at);
    await keys.touch('k2', at);
    await keys.touch('gone', at);

    expect((await keys.get('k1'))?.revokedAt).toBe(at.toISOString());
    expect((await keys.get('k2'))?.lastUsedAt).toBe(at.toISOString());
    expect((await keys.listByFeed('fk')).map((k) => k.searchId).sort()).toEqual(['k1', 'k2']);
    await expect(keys.revoke('gone', at)).rejects.toMatchObject({ code: 'not_found' });

    await keys.delete('k1');
    expect(await keys.get('k1')).toBeUndefined();
    expect((await keys.listByFeed('fk')).map((k) => k.searchId)).toEqual(['k2']);

    await keys.deleteByFeed('fk');
    expect(await keys.listByFeed('fk')).toEqual([]);
  });
});

describe('DynamoDbUsageStore', () => {
  it('admits exactly the limit when 50 consumers race on one bucket', async () => {
    const now = new Date('2026-11-22T10:30:00Z');
    const decisions = await Promise.all(Array.from({ length: 50 }, () => usage.consume('race', 17, now)));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(17);
    expect(
      decisions.filter((d) => !d.allowed).every((d) => d.retryAfterSeconds > 0 && d.remaining === 0),
    ).toBe(true);
  });

  it('never over-admits when two processes race on a bucket after earlier ones', async () => {
    // 40 of a limit of 60 admitted 30 minutes earlier (in the previous clock hour); then 50 requests
    // race through two processes, one of which has not read the earlier buckets yet: 20 fit.
    const other = new DynamoDbUsageStore(createDocumentClient(config), config.tables.usage);
    for (let i = 0; i < 40; i++) await usage.consume('race-history', 60, new Date('2026-11-22T10:50:00Z'));
    const now = new Date('2026-11-22T11:20:00Z');
    const decisions = await Promise.all(
      Array.from({ length: 50 }, (_, i) => (i % 2 ? usage : other).consume('race-history', 60, now)),
    );
    expect(decisions.filter((d) => d.allowed)).toHaveLength(20);
    expect(Math.min(...decisions.filter((d) => d.allowed).map((d) => d.remaining))).toBe(0);
  });

  it('counts a bucket 12 buckets back in full until it leaves the rolling hour', async () => {
    for (let i = 0; i < 10; i++) await usage.consume('rolling', 10, new Date('2026-11-22T11:10:00Z'));
    expect((await usage.consume('rolling', 10, new Date('2026-11-22T11:10:00Z'))).allowed).toBe(false);

    // The bucket 11:10–11:15 counts until 12:15, then the whole limit is back.
    expect((await usage.consume('rolling', 10, new Date('2026-11-22T12:14:59Z'))).allowed).toBe(false);
    const admitted = [];
    for (let i = 0; i < 11; i++)
      admitted.push((await usage.consume('rolling', 10, new Date('2026-11-22T12:15:00Z'))).allowed);
    expect(admitted.filter(Boolean)).toHaveLength(10);
  });

  it('admits at most the limit in the hour after a burst just before a clock hour ends', async () => {
    // The review's first scenario: 100 at 10:59:30, then a request every 5 s until 11:59:25.
    const burst = Date.parse('2026-11-22T10:59:30Z');
    let admitted = 0;
    for (let i = 0; i < 100; i++)
      if ((await usage.consume('burst', 100, new Date(burst))).allowed) admitted++;
    const refused = await usage.consume('burst', 100, new Date(burst));
    for (let t = burst + 30_000; t < burst + 3_600_000; t += 5_000)
      if ((await usage.consume('burst', 100, new Date(t))).allowed) admitted++;
    expect(admitted).toBeLessThanOrEqual(100 + Math.ceil(100 / 12));
    expect(admitted).toBe(100);
    // The 101st at 10:59:30 waits until the burst's bucket leaves at 12:00, and is then let in.
    expect(refused).toMatchObject({ allowed: false, retryAfterSeconds: 3630, resetSeconds: 3630 });
    const retry = new Date(burst + refused.retryAfterSeconds * 1000);
    expect((await usage.consume('burst', 100, retry)).allowed).toBe(true);
  });

  it('admits the whole limit when the last hour holds nothing, up to one bucket', async () => {
    // The review's second scenario: 100 at 10:00:05, then nothing until 11:30.
    for (let i = 0; i < 100; i++) await usage.consume('idle', 100, new Date('2026-11-22T10:00:05Z'));
    expect((await usage.consume('idle', 100, new Date('2026-11-22T11:04:59Z'))).allowed).toBe(false);
    let admitted = 0;
    for (let i = 0; i < 101; i++)
      if ((await usage.consume('idle', 100, new Date('2026-11-22T11:30:00Z'))).allowed) admitted++;
    expect(admitted).toBe(100);
  });

  it('reads the earlier buckets with one query per bucket and process (and once more when read early)', async () => {
    const db = createDocumentClient(config);
    const sent: string[] = [];
    const send = db.send.bind(db);
    db.send = ((command: { constructor: { name: string } }, ...rest: unknown[]) => {
      sent.push(command.constructor.name);
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    }) as typeof db.send;
    const store = new DynamoDbUsageStore(db, config.tables.usage);

    for (let i = 0; i < 3; i++) await store.consume('cached', 10, new Date('2026-11-22T10:21:00Z'));
    expect(sent).toEqual(['QueryCommand', 'UpdateCommand', 'UpdateCommand', 'UpdateCommand']);
    sent.length = 0;
    await store.consume('cached', 10, new Date('2026-11-22T10:24:59Z'));
    await store.consume('cached', 10, new Date('2026-11-22T10:25:00Z'));
    expect(sent).toEqual(['UpdateCommand', 'QueryCommand', 'UpdateCommand']);
    // The query saw the 4 requests of the bucket before: this bucket holds 6, and 1 is taken.
    const decisions = await Promise.all(
      Array.from({ length: 8 }, () => store.consume('cached', 10, new Date('2026-11-22T10:26:00Z'))),
    );
    expect(decisions.filter((d) => d.allowed)).toHaveLength(5);
  });

  it('reads the earlier buckets once for concurrent requests, and again past the settle point', async () => {
    // Prepare: a client whose first two queries each wait for their own gate, counting what is sent
    const db = createDocumentClient(config);
    const sent: string[] = [];
    const gates: (() => void)[] = [];
    const send = db.send.bind(db);
    db.send = (async (command: { constructor: { name: string } }, ...rest: unknown[]) => {
      sent.push(command.constructor.name);
      if (command.constructor.name === 'QueryCommand' && gates.length < 2)
        await new Promise<void>((open) => gates.push(open));
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    }) as typeof db.send;
    const store = new DynamoDbUsageStore(db, config.tables.usage);
    const at = (time: string) =>
      Array.from({ length: 6 }, () => store.consume('together', 100, new Date(time)));
    const tick = () => new Promise((resolve) => setTimeout(resolve, 50));

    // Act: six first requests in a bucket's first seconds, six past its settle point while those read;
    // the later reading comes back first
    const early = at('2026-11-22T10:30:01Z');
    const settled = at('2026-11-22T10:30:11Z');
    await tick();
    const inFlight = gates.length;
    gates[1]!();
    await Promise.all(settled);
    gates[0]!();
    await Promise.all(early);
    await Promise.all(at('2026-11-22T10:30:12Z'));

    // Assess: one query each (the later ones do not take the early reading, nor does it replace theirs)
    expect(inFlight).toBe(2);
    expect(sent.filter((name) => name === 'QueryCommand')).toHaveLength(2);
    expect(sent.filter((name) => name === 'UpdateCommand')).toHaveLength(18);
  });

  it("keeps a later bucket's reading when an earlier bucket's comes back after it", async () => {
    // Prepare: a client whose first query waits for a gate
    const db = createDocumentClient(config);
    let queries = 0;
    let open = () => {};
    const gate = new Promise<void>((resolve) => (open = resolve));
    const send = db.send.bind(db);
    db.send = (async (command: { constructor: { name: string } }, ...rest: unknown[]) => {
      if (command.constructor.name === 'QueryCommand' && (queries += 1) === 1) await gate;
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    }) as typeof db.send;
    const store = new DynamoDbUsageStore(db, config.tables.usage);
    // Act: a request of the 10:30 bucket reading, one of 10:35 read meanwhile, then the first comes back
    const early = store.consume('late-reading', 100, new Date('2026-11-22T10:34:59Z'));
    await store.consume('late-reading', 100, new Date('2026-11-22T10:35:01Z'));
    open();
    await early;
    await store.consume('late-reading', 100, new Date('2026-11-22T10:35:02Z'));
    // Assess: the 10:35 reading still cached (no third query)
    expect(queries).toBe(2);
  });

  it('reads the previous bucket again once it has settled, when it was read at its very end', async () => {
    // Process A moves to the 10:05 bucket first (its query sees 10:00 empty); process B, its clock 50 ms
    // behind (or its writes landing late), then admits the whole limit in the 10:00 bucket.
    const db = createDocumentClient(config);
    const a = new DynamoDbUsageStore(db, config.tables.usage);
    const b = new DynamoDbUsageStore(db, config.tables.usage);
    const edge = Date.parse('2026-11-22T10:05:00Z');
    expect((await a.consume('skew', 10, new Date(edge))).allowed).toBe(true);
    let late = 0;
    for (let i = 0; i < 10; i++) if ((await b.consume('skew', 10, new Date(edge - 50))).allowed) late++;
    expect(late).toBe(10);
    // Once the previous bucket has settled (10 s), A counts B's requests: it refuses, as a new process does.
    // (Before, A kept its first reading for the whole bucket and admitted 9 more.)
    const after = await a.consume('skew', 10, new Date(edge + 10_000));
    expect(after).toMatchObject({ allowed: false });
    expect(after.retryAfterSeconds).toBeGreaterThan(3000);
  });

  it("counts a day's contexts past the 200th together, the first 200 each on its own", async () => {
    const at = new Date('2026-11-22T12:00:00Z');
    const record = (type: string) =>
      usage.record({
        feedId: 'many-contexts',
        feedCreatedAt: 'c',
        searchId: 'vps_x',
        endpoint: 'related',
        outcome: 'ok',
        at,
        context: { type, domain: '' },
      });
    for (let i = 0; i < MAX_DAILY_CONTEXTS + 5; i++) await record(`t${i}`);
    // A context the day counted already is counted on its own still.
    await record('t0');
    const rows = await usage.listContexts('many-contexts', '2026-11-22', '2026-11-22');
    expect(rows).toHaveLength(MAX_DAILY_CONTEXTS + 1);
    expect(rows.find((row) => row.type === 't0')?.requests).toBe(2);
    expect(rows.find((row) => row.type === OTHER_CONTEXTS)?.requests).toBe(5);
    // A feed created again under the id (the old one's late requests filled the day) has its own places.
    await usage.record({
      feedId: 'many-contexts',
      feedCreatedAt: 'c2',
      searchId: 'vps_y',
      endpoint: 'related',
      outcome: 'ok',
      at,
      context: { type: 'new-feed', domain: '' },
    });
    const again = await usage.listContexts('many-contexts', '2026-11-22', '2026-11-22');
    expect(again.find((row) => row.type === 'new-feed')).toMatchObject({ feedCreatedAt: 'c2', requests: 1 });
    // The next day starts again.
    await usage.record({
      feedId: 'many-contexts',
      feedCreatedAt: 'c',
      searchId: 'vps_x',
      endpoint: 'related',
      outcome: 'ok',
      at: new Date('2026-11-23T00:00:01Z'),
      context: { type: 'fresh', domain: '' },
    });
    expect(await usage.listContexts('many-contexts', '2026-11-23', '2026-11-23')).toEqual([
      expect.objectContaining({ type: 'fresh', requests: 1 }),
    ]);
  });

  it("deletes a feed's usage page by page, stopping when the deletion's signal aborts", async () => {
    await usage.record({
      feedId: 'stop-usage',
      feedCreatedAt: 'c',
      searchId: 'vps_x',
      endpoint: 'related',
      outcome: 'ok',
      at: new Date('2026-11-22T12:00:00Z'),
      context: { type: 'pdp', domain: '' },
    });
    const stopped = new AbortController();
    stopped.abort(new Error('out of time'));
    await expect(usage.deleteFeed('stop-usage', { signal: stopped.signal })).rejects.toThrow('out of time');
    expect(await usage.list('stop-usage', '2026-11-22', '2026-11-22')).toHaveLength(1);
    await usage.deleteFeed('stop-usage');
    expect(await usage.list('stop-usage', '2026-11-22', '2026-11-22')).toEqual([]);
    expect(await usage.listContexts('stop-usage', '2026-11-22', '2026-11-22')).toEqual([]);
  });

  it('ignores the hourly windows of the previous version', async () => {
    // Items of the clock-hour counter (sort key: the bare hour start), as left behind by a deploy.
    for (const hour of ['2026-11-22T09:00:00Z', '2026-11-22T10:00:00Z'])
      await createDocumentClient(config).send(
        new PutCommand({
          TableName: config.tables.usage,
          Item: { pk: 'rate#legacy', sk: String(Date.parse(hour)).padStart(15, '0'), count: 100 },
        }),
      );
    const decision = await usage.consume('legacy', 100, new Date('2026-11-22T10:30:00Z'));
    expect(decision).toMatchObject({ allowed: true, remaining: 99 });
  });

  it('reports remaining requests and when the whole allowance is back', async () => {
    const decision = await usage.consume('fresh', 100, new Date('2026-11-22T13:31:00Z'));
    // The request's bucket (13:30–13:35) counts until 14:35: 64 minutes.
    expect(decision).toEqual({
      allowed: true,
      limit: 100,
      remaining: 99,
      resetSeconds: 64 * 60,
      retryAfterSeconds: 0,
    });
  });

  it('never resets a refused client before it may retry', async () => {
    // One request an hour: a second one 23 minutes before the hour ends is refused.
    const at = new Date('2026-11-22T14:37:00Z');
    expect((await usage.consume('single', 1, at)).allowed).toBe(true);
    const refused = await usage.consume('single', 1, at);
    expect(refused.allowed).toBe(false);
    expect(refused.resetSeconds).toBeGreaterThanOrEqual(refused.retryAfterSeconds);
    // And the retry then succeeds.
    const retry = new Date(at.getTime() + refused.retryAfterSeconds * 1000);
    expect((await usage.consume('single', 1, retry)).allowed).toBe(true);
  });

  it('counts this bucket when a lowered limit refuses before counting', async () => {
    // 10 admitted 40 minutes earlier and 5 in this bucket under a limit of 20; then the limit drops to 5.
    const previous = new Date('2026-11-22T15:30:00Z');
    for (let i = 0; i < 10; i++) await usage.consume('lowered', 20, previous);
    const now = new Date('2026-11-22T16:10:00Z');
    for (let i = 0; i < 5; i++) expect((await usage.consume('lowered', 20, now)).allowed).toBe(true);

    const refused = await usage.consume('lowered', 5, now);

    // The 10 leave at 16:35 but this bucket's 5 are still more than 4: one more request fits only once
    // they leave too, at 17:15, which is also when the whole allowance is back.
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBe(65 * 60);
    expect(refused.resetSeconds).toBe(65 * 60);
    const early = new Date(now.getTime() + (refused.retryAfterSeconds - 1) * 1000);
    expect((await usage.consume('lowered', 5, early)).allowed).toBe(false);
    const retry = new Date(now.getTime() + refused.retryAfterSeconds * 1000);
    expect((await usage.consume('lowered', 5, retry)).allowed).toBe(true);
  });

  it('counts this bucket when a lowered limit refuses by the count', async () => {
    // 500 admitted in this bucket under 1000, then the limit drops to 100 (the earlier buckets are
    // empty, so the capacity stays above 0 and the write is what refuses).
    const at = new Date('2026-11-22T17:10:00Z');
    for (let i = 0; i < 500; i++) await usage.consume('lowered-count', 1000, at);

    const refused = await usage.consume('lowered-count', 100, at);

    expect(refused.allowed).toBe(false);
    // This bucket's 500 count until 18:15.
    expect(refused.retryAfterSeconds).toBe(65 * 60);
    expect(refused.resetSeconds).toBeGreaterThanOrEqual(refused.retryAfterSeconds);
    const retry = new Date(at.getTime() + refused.retryAfterSeconds * 1000);
    expect((await usage.consume('lowered-count', 100, retry)).allowed).toBe(true);
  });

  it("deletes a feed's usage rows and no other feed's", async () => {
    const at = new Date('2026-11-20T01:00:00Z');
    for (const feedId of ['gone', 'kept', 'gone'])
      await usage.record({
        feedId,
        feedCreatedAt: 'c',
        searchId: 's',
        endpoint: 'detect',
        outcome: 'ok',
        at,
      });
    await usage.record({
      feedId: 'gone',
      feedCreatedAt: 'c',
      searchId: 's',
      endpoint: 'related',
      outcome: 'ok',
      at,
    });

    await usage.deleteFeed('gone');

    expect(await usage.list('gone', '2026-11-01', '2026-11-30')).toEqual([]);
    expect((await usage.list('kept', '2026-11-01', '2026-11-30')).map((row) => row.requests)).toEqual([1]);
  });

  it('adds usage per day, endpoint and search id, and lists a day range', async () => {
    const base = { feedId: 'fu', feedCreatedAt: 'c1', searchId: 's1', endpoint: 'detect' as const };
    await usage.record({ ...base, outcome: 'ok', at: new Date('2026-11-20T01:00:00Z') });
    await usage.record({ ...base, outcome: 'rate_limited', at: new Date('2026-11-20T02:00:00Z') });
    await usage.record({ ...base, outcome: 'client_error', at: new Date('2026-11-21T02:00:00Z') });
    await usage.record({ ...base, outcome: 'ok', at: new Date('2026-11-23T02:00:00Z') });

    const rows = await usage.list('fu', '2026-11-20', '2026-11-21');

    expect(rows).toEqual([
      {
        day: '2026-11-20',
        endpoint: 'detect',
        searchId: 's1',
        feedCreatedAt: 'c1',
        requests: 2,
        ok: 1,
        clientErrors: 0,
        serverErrors: 0,
        rateLimited: 1,
      },
      {
        day: '2026-11-21',
        endpoint: 'detect',
        searchId: 's1',
        feedCreatedAt: 'c1',
        requests: 1,
        ok: 0,
        clientErrors: 1,
        serverErrors: 0,
        rateLimited: 0,
      },
    ]);
  });
});

describe('DynamoDbIdempotencyStore', () => {
  const at = (iso: string) => new Date(`2026-11-27T${iso}Z`);
  const claim = (fingerprint: string, owner: string, now: Date) => ({
    fingerprint,
    owner,
    now,
    lockMs: 60_000,
    ttlMs: 24 * 3600_000,
  });
  const answer = { statusCode: 201, headers: { 'Content-Type': 'application/json' }, body: '{"feedId":"f"}' };

  it('gives one of 20 racing claims the key, then the kept answer to the same request', async () => {
    const now = at('10:00:00');
    const claims = await Promise.all(
      Array.from({ length: 20 }, (_, i) => idempotency.begin('race', claim('fp', `o${i}`, now))),
    );
    expect(claims.filter((c) => c.kind === 'started')).toHaveLength(1);
    expect(claims.filter((c) => c.kind === 'in_progress')).toHaveLength(19);

    const winner = claims.findIndex((c) => c.kind === 'started');
    await idempotency.finish('race', `o${winner}`, answer);
    expect(await idempotency.begin('race', claim('fp', 'later', at('10:00:05')))).toEqual({
      kind: 'replay',
      response: answer,
    });
    expect(await idempotency.begin('race', claim('other body', 'later', at('10:00:05')))).toEqual({
      kind: 'mismatch',
    });
  });

  it('keeps no answer for an attempt that lost the key, and lets a given-back key be claimed again', async () => {
    const now = at('11:00:00');
    expect(await idempotency.begin('back', claim('fp', 'first', now))).toEqual({ kind: 'started' });
    // A stranger's finish or abandon changes nothing.
    await idempotency.finish('back', 'stranger', answer);
    await idempotency.abandon('back', 'stranger');
    expect(await idempotency.begin('back', claim('fp', 'second', now))).toEqual({ kind: 'in_progress' });

    await idempotency.abandon('back', 'first');
    // Given back: any request may use the key now, another body included.
    expect(await idempotency.begin('back', claim('other', 'third', now))).toEqual({ kind: 'started' });
  });

  it("counts an attempt's own claim as its own when its put is sent again (the SDK's retry after a lost answer)", async () => {
    const now = at('13:00:00');
    expect(await idempotency.begin('own', claim('fp', 'me', now))).toEqual({ kind: 'started' });
    expect(await idempotency.begin('own', claim('fp', 'me', now))).toEqual({ kind: 'started' });
    expect(await idempotency.begin('own', claim('fp', 'someone else', now))).toEqual({ kind: 'in_progress' });
  });

  it('hands a stopped request over once its lock has passed, and forgets answers after the day', async () => {
    expect(await idempotency.begin('lock', claim('fp', 'crashed', at('12:00:00')))).toEqual({
      kind: 'started',
    });
    expect(await idempotency.begin('lock', claim('fp', 'retry', at('12:00:59')))).toEqual({
      kind: 'in_progress',
    });
    // Another body does not take a stopped request's key over: that is a reuse.
    expect(await idempotency.begin('lock', claim('other', 'retry', at('12:01:01')))).toEqual({
      kind: 'mismatch',
    });
    expect(await idempotency.begin('lock', claim('fp', 'retry', at('12:01:01')))).toEqual({
      kind: 'started',
    });
    // The crashed attempt coming back late cannot overwrite the retry's claim.
    await idempotency.finish('lock', 'crashed', { ...answer, body: 'stale' });
    await idempotency.finish('lock', 'retry', answer);
    expect(await idempotency.begin('lock', claim('fp', 'x', at('12:02:00')))).toEqual({
      kind: 'replay',
      response: answer,
    });

    // The local server keeps expired items (no TTL sweeper): a day later the key is free again.
    const nextDay = new Date(at('12:01:01').getTime() + 24 * 3600_000 + 1000);
    expect(await idempotency.begin('lock', claim('other', 'tomorrow', nextDay))).toEqual({ kind: 'started' });
  });
});
