import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createFeed,
  deleteFeed,
  type FeedAdminDeps,
  feedVersion,
  getFeed,
  updateFeed,
} from '#lib/domain/admin/feeds.ts';
import type { UpdateFeedRequest } from '#lib/domain/admin/schemas.ts';
import { createKey } from '#lib/domain/admin/keys.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { FeedStore } from '#lib/ports.ts';
import { feedStoresOf, startTestStores } from '#test/support/embedded-stores.ts';
import { MemoryVectorIndex } from '../unit/catalogue/fakes.ts';

/**
 * updateFeed against the real-protocol DynamoDB server of local mode, with other changes landing between
 * its read of the feed and its write: none of them may be lost (optimistic concurrency, re-applied patch).
 */
let stop: () => Promise<void>;
let deps: FeedAdminDeps;
/** Gateway registrations of keys, in order, as `searchId→plan`. */
const registrations: string[] = [];

beforeAll(async () => {
  const stores = await startTestStores();
  stop = stores.stop;
  const vectors = new MemoryVectorIndex();
  deps = {
    ...feedStoresOf(stores.config),
    feedVectors: async () => vectors,
    apiKeys: {
      register: async (key, plan) => void registrations.push(`${key.searchId}→${plan}`),
      unregister: async () => undefined,
    },
    dispatcher: { dispatch: async () => undefined },
    // A clock that stands still: every change in the same millisecond, as on a fast server.
    clock: { now: () => new Date('2026-11-22T10:00:00.000Z') },
    planLimits: { free: 100, pro: 1000, enterprise: 10_000 },
  };
});

afterAll(async () => {
  await stop?.();
});

const input = (feedId: string) => ({
  feedId,
  name: feedId,
  plan: 'free' as const,
  domains: ['a.example.com'],
  requireOrigin: false,
});

/**
 * The feed store of `deps` with `between` run after each of the first `times` fresh reads of the feed
 * (after an update read it, before it writes), through the unwrapped deps.
 */
function racing(between: () => Promise<unknown>, times = 1): FeedAdminDeps {
  const inner = deps.feeds;
  let left = times;
  const feeds: FeedStore = {
    create: (feed) => inner.create(feed),
    list: () => inner.list(),
    put: (feed, expectedUpdatedAt) => inner.put(feed, expectedUpdatedAt),
    markDeleting: (feedId, at, createdAt, updatedAt) => inner.markDeleting(feedId, at, createdAt, updatedAt),
    delete: (feedId, createdAt) => inner.delete(feedId, createdAt),
    async get(feedId, options) {
      const feed = await inner.get(feedId, options);
      if (options?.fresh && left > 0) {
        left -= 1;
        await between();
      }
      return feed;
    },
  };
  return { ...deps, feeds };
}

describe('updateFeed racing another update', () => {
  it('keeps both changes on a feed stored without updatedAt (before it was kept)', async () => {
    // Prepare: the item as an early version wrote it
    await createFeed(deps, input('legacy'));
    const stored = (await deps.feeds.get('legacy', { fresh: true }))!;
    const { updatedAt: _dropped, ...legacy } = stored;
    await deps.feeds.put(legacy as Feed);
    // Act
    await updateFeed(
      racing(() => updateFeed(deps, 'legacy', { domains: ['shop.example.com'] })),
      'legacy',
      { name: 'renamed' },
    );
    // Assess
    expect(await getFeed(deps, 'legacy')).toMatchObject({ name: 'renamed', domains: ['shop.example.com'] });
  });

  it('keeps both changes when another update lands between its read and its write', async () => {
    await createFeed(deps, input('both'));

    const renamed = await updateFeed(
      racing(() => updateFeed(deps, 'both', { domains: ['shop.example.com'] })),
      'both',
      { name: 'renamed' },
    );

    expect(renamed).toMatchObject({ name: 'renamed', domains: ['shop.example.com'] });
    expect(await getFeed(deps, 'both')).toMatchObject({ name: 'renamed', domains: ['shop.example.com'] });
  });

  it('keeps every change of many concurrent updates of different fields', async () => {
    await createFeed(deps, input('many'));

    for (let round = 0; round < 5; round++) {
      const expected = {
        name: `round ${round}`,
        domains: [`r${round}.example.com`],
        requireOrigin: round % 2 === 0,
        plan: round % 2 === 0 ? 'pro' : 'free',
      } satisfies UpdateFeedRequest;
      // One update per field, twice over, all at once
      const patches: UpdateFeedRequest[] = Object.entries(expected).map(([field, value]) => ({
        [field]: value,
      }));
      patches.push(...patches.map((patch) => ({ ...patch })));
      const answers = await Promise.allSettled(patches.map((patch) => updateFeed(deps, 'many', patch)));

      expect(answers.map((answer) => answer.status)).toEqual(patches.map(() => 'fulfilled'));
      expect(await getFeed(deps, 'many')).toMatchObject(expected);
    }
  });

  it('gives every change a later updatedAt, also within one millisecond', async () => {
    const created = await createFeed(deps, input('ticks'));
    const first = await updateFeed(deps, 'ticks', { name: 'one' });
    const second = await updateFeed(deps, 'ticks', { name: 'two' });

    expect(created.updatedAt < first.updatedAt && first.updatedAt < second.updatedAt).toBe(true);
  });

  it('writes nothing for a patch of the values the feed has: its updatedAt and version stay', async () => {
    // Prepare
    await createFeed(deps, input('same'));
    const before = await updateFeed(deps, 'same', { plan: 'enterprise', hourlyLimit: 50 });
    // Act
    const unchanged = await updateFeed(deps, 'same', {
      name: 'same',
      plan: 'enterprise',
      domains: ['a.example.com', 'a.example.com'],
      requireOrigin: false,
      hourlyLimit: 50,
    });
    const changed = await updateFeed(deps, 'same', { hourlyLimit: 60 }, { ifMatch: [feedVersion(before)] });
    // Assess
    expect(unchanged).toEqual(before);
    expect(changed.updatedAt > before.updatedAt).toBe(true);
  });

  it('answers 409 conflict, changing nothing, when other changes keep landing between read and write', async () => {
    await createFeed(deps, input('busy'));
    let n = 0;
    const busy = racing(() => updateFeed(deps, 'busy', { domains: [`d${++n}.example.com`] }), 1000);

    await expect(updateFeed(busy, 'busy', { name: 'never' })).rejects.toMatchObject({
      code: 'conflict',
      message: expect.stringContaining('changed by other requests'),
    });
    const feed = await getFeed(deps, 'busy');
    expect(feed.name).toBe('busy');
    expect(feed.domains).toEqual([`d${n}.example.com`]);
  });

  it('does not update a feed deleted and created again between its read and its write', async () => {
    await createFeed(deps, input('reborn'));
    const reborn = racing(async () => {
      await deleteFeed(deps, 'reborn');
      // Later: a feed is told from one created again under its id by its creation time
      const later = { now: () => new Date('2026-11-23T00:00:00.000Z') };
      await createFeed({ ...deps, clock: later }, { ...input('reborn'), name: 'the new one' });
    });

    await expect(updateFeed(reborn, 'reborn', { name: 'stale' })).rejects.toMatchObject({
      code: 'feed_not_found',
    });
    expect((await getFeed(deps, 'reborn')).name).toBe('the new one');
  });

  it('does not update a feed whose deletion starts between its read and its write', async () => {
    await createFeed(deps, input('going'));
    const going = racing(() => deps.feeds.markDeleting('going', new Date()));

    await expect(updateFeed(going, 'going', { name: 'late' })).rejects.toMatchObject({
      code: 'feed_not_found',
    });
    expect(await deps.feeds.get('going', { fresh: true })).toMatchObject({
      name: 'going',
      deletingAt: expect.any(String),
    });
  });
});

describe('updateFeed moving keys between usage plans', () => {
  async function feedWithKey(feedId: string): Promise<string> {
    await createFeed(deps, input(feedId));
    const key = await createKey(deps, feedId, { name: 'web' });
    registrations.length = 0;
    return key.searchId;
  }

  // Another update lands between this update's read and its write; the keys' moves are counted.
  const planMoves: {
    name: string;
    feedId: string;
    other: UpdateFeedRequest;
    own: UpdateFeedRequest;
    moves: string[];
    stored: Record<string, unknown>;
  }[] = [
    {
      name: 'moves the keys once when its plan change is retried after another change',
      feedId: 'replan-retry',
      other: { name: 'renamed' },
      own: { plan: 'pro' },
      moves: ['pro'],
      stored: { name: 'renamed', plan: 'pro' },
    },
    {
      name: 'does not move the keys again when the retry finds the plan already changed',
      feedId: 'replan-same',
      other: { plan: 'pro' },
      own: { plan: 'pro', name: 'renamed' },
      moves: ['pro'],
      stored: { name: 'renamed', plan: 'pro' },
    },
    {
      name: 'moves the keys from the plan the retry found to its own',
      feedId: 'replan-twice',
      other: { plan: 'enterprise' },
      // (with a change besides the plan: the plan alone is the feed's already when read, so no write)
      own: { plan: 'free', name: 'back' },
      moves: ['enterprise', 'free'],
      stored: { plan: 'free', name: 'back' },
    },
    {
      name: 'does not move the keys when only the other change moved the plan',
      feedId: 'replan-other',
      other: { plan: 'pro' },
      own: { requireOrigin: true },
      moves: ['pro'],
      stored: { plan: 'pro', requireOrigin: true },
    },
  ];
  it.each(planMoves.map((move) => [move.name, move] as const))('%s', async (_name, move) => {
    const { feedId, other, own, moves, stored } = move;
    const key = await feedWithKey(feedId);

    await updateFeed(
      racing(() => updateFeed(deps, feedId, other)),
      feedId,
      own,
    );

    expect(registrations).toEqual(moves.map((plan) => `${key}→${plan}`));
    expect(await getFeed(deps, feedId)).toMatchObject(stored);
  });

  it('leaves the gateway on the stored plan when opposite plan changes move the keys at once', async () => {
    const key = await feedWithKey('replan-opposite');
    // The move of the change to pro is slow: the change back to free is stored and moves the keys first.
    let overtaken = false;
    const slowMove: FeedAdminDeps = {
      ...deps,
      apiKeys: {
        register: async (registered, plan) => {
          if (!overtaken) {
            overtaken = true;
            await updateFeed(deps, 'replan-opposite', { plan: 'free' });
          }
          return deps.apiKeys.register(registered, plan);
        },
        unregister: deps.apiKeys.unregister,
      },
    };

    await updateFeed(slowMove, 'replan-opposite', { plan: 'pro' });

    expect((await getFeed(deps, 'replan-opposite')).plan).toBe('free');
    // The late move to pro is followed by one to the plan stored by then.
    expect(registrations).toEqual([`${key}→free`, `${key}→pro`, `${key}→free`]);
  });
});

describe('DynamoDbFeedStore.put with the updatedAt read', () => {
  const feed = (feedId: string): Feed => ({
    feedId,
    name: feedId,
    plan: 'free',
    domains: [],
    requireOrigin: false,
    createdAt: '2026-11-01T00:00:00.000Z',
    updatedAt: '2026-11-01T00:00:00.000Z',
  });

  it('writes only over the feed as read: conflict when changed since, not found when deleted', async () => {
    await deps.feeds.create(feed('cas'));
    await deps.feeds.put(
      { ...feed('cas'), name: 'first', updatedAt: '2026-11-01T00:00:00.001Z' },
      '2026-11-01T00:00:00.000Z',
    );

    await expect(
      deps.feeds.put(
        { ...feed('cas'), name: 'stale', updatedAt: '2026-11-01T00:00:00.001Z' },
        '2026-11-01T00:00:00.000Z',
      ),
    ).rejects.toMatchObject({ code: 'conflict' });
    expect((await deps.feeds.get('cas', { fresh: true }))?.name).toBe('first');

    await deps.feeds.markDeleting('cas', new Date());
    await expect(
      deps.feeds.put({ ...feed('cas'), updatedAt: '2026-11-01T00:00:00.002Z' }, '2026-11-01T00:00:00.001Z'),
    ).rejects.toMatchObject({ code: 'feed_not_found' });
    await expect(deps.feeds.put(feed('missing'), feed('missing').updatedAt)).rejects.toMatchObject({
      code: 'feed_not_found',
    });
  });
});
