import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbIdempotencyStore } from '#lib/adapters/dynamodb-idempotency-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
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
  it('admits exactly the limit when 50 consumers race on one window', async () => {
    const now = new Date('2026-11-22T10:30:00Z');
    const decisions = await Promise.all(Array.from({ length: 50 }, () => usage.consume('race', 17, now)));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(17);
    expect(
      decisions.filter((d) => !d.allowed).every((d) => d.retryAfterSeconds > 0 && d.remaining === 0),
    ).toBe(true);
  });

  it('weights the previous hour by the part still inside the rolling hour', async () => {
    const previousHour = new Date('2026-11-22T11:10:00Z');
    for (let i = 0; i < 10; i++) await usage.consume('rolling', 10, previousHour);
    expect((await usage.consume('rolling', 10, previousHour)).allowed).toBe(false);

    // A quarter into the next hour, 75 % of the previous 10 still count: 2 more fit (7.5 → capacity 2).
    const quarterPast = new Date('2026-11-22T12:15:00Z');
    const admitted = [];
    for (let i = 0; i < 4; i++) admitted.push((await usage.consume('rolling', 10, quarterPast)).allowed);
    expect(admitted).toEqual([true, true, false, false]);
  });

  it('reports remaining requests and when the whole allowance is back', async () => {
    const decision = await usage.consume('fresh', 100, new Date('2026-11-22T13:59:00Z'));
    // The request weighs on the rolling hour until the end of the next window: 60 s + 1 h.
    expect(decision).toEqual({
      allowed: true,
      limit: 100,
      remaining: 99,
      resetSeconds: 60 + 3600,
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

  it('counts this window when a lowered limit refuses before counting', async () => {
    // 10 admitted in the previous hour and 5 in this one under a limit of 20; then the limit drops to 5.
    const previous = new Date('2026-11-22T15:30:00Z');
    for (let i = 0; i < 10; i++) await usage.consume('lowered', 20, previous);
    const now = new Date('2026-11-22T16:10:00Z');
    for (let i = 0; i < 5; i++) expect((await usage.consume('lowered', 20, now)).allowed).toBe(true);

    const refused = await usage.consume('lowered', 5, now);

    // This hour's 5 requests weigh until the end of the next hour (50 min + 1 h), and one more request
    // fits only once they have decayed below the limit, in the next hour.
    expect(refused.allowed).toBe(false);
    expect(refused.resetSeconds).toBe(50 * 60 + 3600);
    expect(refused.retryAfterSeconds).toBeGreaterThan(50 * 60);
    expect(refused.resetSeconds).toBeGreaterThanOrEqual(refused.retryAfterSeconds);
  });

  it('counts this window when a lowered limit refuses by the count', async () => {
    // 500 admitted this hour under 1000, then the limit drops to 100 (the previous hour was idle, so the
    // capacity stays above 0 and the write is what refuses).
    const at = new Date('2026-11-22T17:10:00Z');
    for (let i = 0; i < 500; i++) await usage.consume('lowered-count', 1000, at);

    const refused = await usage.consume('lowered-count', 100, at);

    expect(refused.allowed).toBe(false);
    // This hour's 500 must decay under 99 in the next hour: 50 min, then 3600 · (1 − 99/500) s.
    expect(refused.retryAfterSeconds).toBe(50 * 60 + Math.ceil(3600 * (1 - 99 / 500)));
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
