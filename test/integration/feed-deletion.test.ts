import type { S3Event } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { CachingFeedStore } from '#lib/adapters/caching-stores.ts';
import type { DynamoDbImportStore } from '#lib/adapters/dynamodb-import-store.ts';
import type { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import { featuresKey } from '#lib/adapters/object-store-feature-store.ts';
import {
  createFeed,
  deleteFeed,
  type FeedAdminDeps,
  finishFeedDeletion,
  getFeed,
  listFeeds,
  updateFeed,
} from '#lib/domain/admin/feeds.ts';
import { createKey, revokeKey } from '#lib/domain/admin/keys.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import type { IngestDeps } from '#lib/ingest/run-import.ts';
import { runFeedJob } from '#lib/ingest/feed-jobs.ts';
import { createLogger } from '#lib/log.ts';
import { runImportEvent } from '#functions/import-worker.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { ApiKeyRegistry } from '#lib/ports.ts';
import { feedStoresOf, startTestStores } from '#test/support/embedded-stores.ts';
import { MemoryVectorIndex } from '../unit/catalogue/fakes.ts';

/**
 * The feed deletion against the real-protocol stores of local mode, with the races the deletion must
 * win: a key created while the feed is deleted, an update racing the mark, a deletion stopped half way.
 */
let stop: () => Promise<void>;
let deps: FeedAdminDeps;
let usage: DynamoDbUsageStore;
/** Search ids mirrored to the (recording) gateway registry. */
const registered = new Set<string>();
/** Deletions handed over to the import runner, as `feedId/jobId`. */
const handedOver: string[] = [];

beforeAll(async () => {
  const stores = await startTestStores();
  stop = stores.stop;
  const vectors = new MemoryVectorIndex();
  const apiKeys: ApiKeyRegistry = {
    register: async (key: SearchKey) => void registered.add(key.searchId),
    unregister: async (searchId: string) => void registered.delete(searchId),
  };
  let tick = Date.parse('2026-11-22T00:00:00Z');
  const feedStores = feedStoresOf(stores.config);
  usage = feedStores.usage;
  deps = {
    ...feedStores,
    feedVectors: async () => vectors,
    apiKeys,
    dispatcher: { dispatch: async (feedId, jobId) => void handedOver.push(`${feedId}/${jobId}`) },
    clock: { now: () => new Date((tick += 1000)) },
    planLimits: { free: 100, pro: 1000, enterprise: 10_000 },
  };
});

beforeEach(() => {
  handedOver.length = 0;
});

afterAll(async () => {
  await stop?.();
});

const input = (feedId: string) => ({
  feedId,
  name: feedId,
  plan: 'free' as const,
  domains: [],
  requireOrigin: false,
});

describe('deleteFeed', () => {
  it('removes the feed, its keys and their usage, so a feed re-created with the id starts empty', async () => {
    await createFeed(deps, input('usage-feed'));
    const key = await createKey(deps, 'usage-feed', { name: 'web' });
    await usage.record({
      feedId: 'usage-feed',
      feedCreatedAt: 'c',
      searchId: key.searchId,
      endpoint: 'detect',
      outcome: 'ok',
      at: new Date('2026-11-22T01:00:00Z'),
    });
    await usage.record({
      feedId: 'usage-feed',
      feedCreatedAt: 'c',
      searchId: key.searchId,
      endpoint: 'related',
      outcome: 'ok',
      at: new Date('2026-11-22T01:00:00Z'),
      context: { type: 'pdp', domain: 'shop.example' },
    });
    expect(await usage.listContexts('usage-feed', '2026-01-01', '2026-12-31')).toEqual([
      { day: '2026-11-22', type: 'pdp', domain: 'shop.example', feedCreatedAt: 'c', requests: 1 },
    ]);

    await deleteFeed(deps, 'usage-feed');
    await createFeed(deps, input('usage-feed'));

    expect(await deps.keys.listByFeed('usage-feed')).toEqual([]);
    expect(registered.has(key.searchId)).toBe(false);
    expect(await usage.list('usage-feed', '2026-01-01', '2026-12-31')).toEqual([]);
    expect(await usage.listContexts('usage-feed', '2026-01-01', '2026-12-31')).toEqual([]);
  });

  it('leaves a feed stopped half way hidden and unchangeable, handed to the runner, and a repeated delete finishes it', async () => {
    await createFeed(deps, input('half'));
    await createKey(deps, 'half', { name: 'web' });
    const productsDelete = deps.products.deleteFeed.bind(deps.products);
    deps.products.deleteFeed = async () => {
      throw new Error('store unavailable');
    };
    try {
      await expect(deleteFeed(deps, 'half')).rejects.toThrow('store unavailable');
    } finally {
      deps.products.deleteFeed = productsDelete;
    }
    expect(handedOver).toEqual(['half/deletion']);

    await expect(getFeed(deps, 'half')).rejects.toMatchObject({ code: 'feed_not_found' });
    expect((await listFeeds(deps)).map((feed) => feed.feedId)).not.toContain('half');
    await expect(updateFeed(deps, 'half', { name: 'x' })).rejects.toMatchObject({ code: 'feed_not_found' });
    await expect(createKey(deps, 'half', { name: 'late' })).rejects.toMatchObject({ code: 'feed_not_found' });
    await expect(createFeed(deps, input('half'))).rejects.toMatchObject({
      code: 'conflict',
      message: expect.stringContaining('being deleted'),
    });

    await deleteFeed(deps, 'half');
    await createFeed(deps, input('half'));
    expect((await getFeed(deps, 'half')).deletingAt).toBeUndefined();
  });

  it('does not let an update that read the feed before the deletion write it back', async () => {
    await createFeed(deps, input('racing-update'));
    const get = deps.feeds.get.bind(deps.feeds);
    // The update reads the feed, then the deletion marks it before the update writes.
    deps.feeds.get = async (feedId, options) => {
      const feed = await get(feedId, options);
      await deps.feeds.markDeleting(feedId, new Date());
      return feed;
    };
    try {
      await expect(updateFeed(deps, 'racing-update', { name: 'late' })).rejects.toMatchObject({
        code: 'feed_not_found',
      });
    } finally {
      deps.feeds.get = get;
    }
    expect((await deps.feeds.get('racing-update', { fresh: true }))?.deletingAt).toEqual(expect.any(String));
  });
});

describe('deleteFeed and the feed’s lease', () => {
  it('waits while an import runner holds the feed, and deletes once it has let go', async () => {
    await createFeed(deps, input('busy'));
    await deps.imports.takeLease('busy', 'import runner', new Date(Date.now() + 60_000), new Date());
    const deletion = deleteFeed(deps, 'busy');
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Marked at once (hidden), data kept while the runner holds the lease
    await expect(getFeed(deps, 'busy')).rejects.toMatchObject({ code: 'feed_not_found' });
    expect(await deps.feeds.get('busy', { fresh: true })).toBeDefined();

    await deps.imports.releaseLease('busy', 'import runner');
    await deletion;

    expect(await deps.feeds.get('busy', { fresh: true })).toBeUndefined();
    expect(await deps.imports.takeLease('busy', 'next', new Date(Date.now() + 60_000), new Date())).toBe(
      true,
    );
    await deps.imports.releaseLease('busy');
  });

  it('hands the deletion over when the lease stays held, and the runner finishes it once let go', async () => {
    await createFeed(deps, input('stuck'));
    await deps.imports.takeLease('stuck', 'stalled runner', new Date(Date.now() + 60_000), new Date());

    expect(await deleteFeed({ ...deps, leaseWaitMs: 300 }, 'stuck')).toBe('continuing');
    expect(handedOver).toEqual(['stuck/deletion']);
    await expect(finishFeedDeletion({ ...deps, leaseWaitMs: 300 }, 'stuck')).rejects.toMatchObject({
      code: 'conflict',
    });
    await deps.imports.releaseLease('stuck');
    expect(await finishFeedDeletion(deps, 'stuck')).toBe(true);

    expect(await deps.feeds.get('stuck', { fresh: true })).toBeUndefined();
  });

  it('hands over when its time is up while it still waits for the lease', async () => {
    await createFeed(deps, input('waiting'));
    await deps.imports.takeLease('waiting', 'slow import', new Date(Date.now() + 60_000), new Date());

    expect(await deleteFeed({ ...deps, deletionBudgetMs: 100 }, 'waiting')).toBe('continuing');

    expect(handedOver).toEqual(['waiting/deletion']);
    await deps.imports.releaseLease('waiting');
    expect(await finishFeedDeletion(deps, 'waiting')).toBe(true);
  });

  it('answers a failure after its time is up as a failure, not as a deletion that continues', async () => {
    await createFeed(deps, input('refused'));
    const failing = {
      ...deps,
      // (A budget the steps before the products' take well within on a loaded machine: with 100 ms, they
      // once used it up, and the deletion was handed over before this step ran.)
      deletionBudgetMs: 1000,
      products: {
        deleteFeed: async () => {
          await new Promise((resolve) => setTimeout(resolve, 1300));
          throw new Error('AccessDenied');
        },
      },
    };

    await expect(deleteFeed(failing, 'refused')).rejects.toThrow('AccessDenied');
    // ...and the runner tries again meanwhile
    expect(handedOver).toEqual(['refused/deletion']);
    expect(await finishFeedDeletion(deps, 'refused')).toBe(true);
  });

  it('renews its lease while a long step runs, so that no other deletion takes the feed meanwhile', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      await createFeed(deps, input('long-step'));
      const renewals: string[] = [];
      let inStep = false;
      let throttled = 0;
      const imports = Object.assign(Object.create(deps.imports) as FeedAdminDeps['imports'], {
        renewLease: async (...args: Parameters<FeedAdminDeps['imports']['renewLease']>) => {
          renewals.push(args[1]);
          // The first renewal during the step fails like a throttled call: tried again at the next tick
          if (inStep && (throttled += 1) === 1) throw new Error('ThrottlingException');
          return deps.imports.renewLease(...args);
        },
      });
      const productsDelete = deps.products.deleteFeed.bind(deps.products);
      const long = {
        ...deps,
        imports,
        products: {
          // A step of a large feed: several lease periods long
          deleteFeed: async (feedId: string, options?: { signal?: AbortSignal }) => {
            inStep = true;
            await vi.advanceTimersByTimeAsync(70_000);
            inStep = false;
            return productsDelete(feedId, options);
          },
        },
      };

      expect(await deleteFeed(long, 'long-step')).toBe('deleted');

      // Three renewals during the step (every 20 s), then one after each step
      expect(renewals.length).toBeGreaterThanOrEqual(3 + 6);
    } finally {
      vi.useRealTimers();
    }
  });

  it('does not let a second DELETE of a feed touch the feed created again after the first finished', async () => {
    await createFeed(deps, input('twice'));
    // The second deletion reads and marks the feed while the first holds the lease
    await deps.imports.takeLease('twice', 'first deletion', new Date(Date.now() + 60_000), new Date());
    await deps.feeds.markDeleting('twice', new Date());
    const second = deleteFeed(deps, 'twice');
    await new Promise((resolve) => setTimeout(resolve, 300));
    // The first deletion finishes; the feed is created again, with a key
    await deps.feeds.delete('twice');
    await deps.imports.releaseLease('twice', 'first deletion');
    await createFeed(deps, input('twice'));
    const key = await createKey(deps, 'twice', { name: 'new' });

    await second;

    expect((await getFeed(deps, 'twice')).name).toBe('twice');
    expect((await deps.keys.get(key.searchId))?.feedId).toBe('twice');
  });

  it('does not let an update that read a feed deleted and created again since write the old one back', async () => {
    await createFeed(deps, input('reborn'));
    const old = await getFeed(deps, 'reborn');
    await deleteFeed(deps, 'reborn');
    await createFeed(deps, { ...input('reborn'), name: 'the new one' });

    await expect(deps.feeds.put({ ...old, name: 'stale write' })).rejects.toMatchObject({
      code: 'feed_not_found',
    });
    expect((await getFeed(deps, 'reborn')).name).toBe('the new one');
  });
});

describe('deleteFeed racing a re-creation and an import start', () => {
  it('does not mark a feed created again after the feed it read was deleted by another DELETE', async () => {
    await createFeed(deps, input('late-mark'));
    // This deletion has read the feed; before it marks it, another deletion finishes and the feed is
    // created again
    const late: FeedAdminDeps = {
      ...deps,
      feeds: Object.assign(Object.create(deps.feeds) as FeedAdminDeps['feeds'], {
        markDeleting: async (feedId: string, at: Date, createdAt?: string) => {
          await deleteFeed(deps, feedId);
          await createFeed(deps, input(feedId));
          return deps.feeds.markDeleting(feedId, at, createdAt);
        },
      }),
    };

    await deleteFeed(late, 'late-mark');

    expect((await deps.feeds.get('late-mark', { fresh: true }))?.deletingAt).toBeUndefined();
    expect((await getFeed(deps, 'late-mark')).feedId).toBe('late-mark');
  });

  it('holds the feed at most a minute when it is killed part way (its function timed out)', async () => {
    await createFeed(deps, input('killed'));
    let killed!: () => void;
    const dead = new Promise<void>((resolve) => (killed = resolve));
    const dying: FeedAdminDeps = {
      ...deps,
      features: {
        deleteFeed: () => {
          killed();
          return new Promise<void>(() => undefined);
        },
      },
    };
    void deleteFeed(dying, 'killed');
    await dead;
    const at = (seconds: number) => {
      const base = deps.clock.now().getTime();
      return { ...deps, leaseWaitMs: 300, clock: { now: () => new Date(base + seconds * 1000) } };
    };

    // Still held: handed over to the runner (which would wait for it); a minute later it has lapsed
    expect(await deleteFeed(at(0), 'killed')).toBe('continuing');
    expect(await deleteFeed(at(61), 'killed')).toBe('deleted');

    expect(await deps.feeds.get('killed', { fresh: true })).toBeUndefined();
  });

  it('removes an import started while the feed is deleted, and answers 404', async () => {
    await createFeed(deps, input('importing'));
    let deletion!: Promise<unknown>;
    let dispatched = false;
    const start = {
      feeds: deps.feeds,
      imports: deps.imports as DynamoDbImportStore,
      clock: deps.clock,
      dispatcher: { dispatch: async () => void (dispatched = true) },
      // The deletion runs (through its end) while the import's feed file is being stored
      objects: Object.assign(Object.create(deps.objects) as FeedAdminDeps['objects'], {
        put: async (key: string, body: Buffer | string, type?: string) => {
          deletion = deleteFeed(deps, 'importing');
          await deletion;
          return deps.objects.put(key, body, type);
        },
      }),
    };

    await expect(
      startImport(start, 'importing', { content: '{"id":"a"}', format: 'jsonl', mode: 'full' }),
    ).rejects.toMatchObject({ code: 'feed_not_found' });

    expect(dispatched).toBe(false);
    expect(await (deps.imports as DynamoDbImportStore).list('importing', 10)).toEqual([]);
    expect(await deps.objects.list('imports/importing/')).toEqual([]);
  });
});

describe('a deletion that outlasts its request', () => {
  /** A feed with a key and a stored feature record (deleted by the feature store's own listing). */
  async function stockedFeed(feedId: string): Promise<SearchKey> {
    await createFeed(deps, input(feedId));
    await deps.objects.put(featuresKey({ feedId, productId: 'p1', imageIndex: 0 }), 'features');
    return createKey(deps, feedId, { name: 'web' }) as Promise<SearchKey>;
  }

  it('is handed over to the import runner, the feed hidden meanwhile, and the runner finishes it', async () => {
    const key = await stockedFeed('large');

    const outcome = await deleteFeed({ ...deps, deletionBudgetMs: 0 }, 'large');

    // Out of time from the start: no step ran (the feed's mark already hides it and its keys)
    expect(outcome).toBe('continuing');
    expect(registered.has(key.searchId)).toBe(true);
    expect(handedOver).toEqual(['large/deletion']);
    expect(await deps.objects.list('imports/large/')).toEqual(['imports/large/deletion/request.json']);
    await expect(getFeed(deps, 'large')).rejects.toMatchObject({ code: 'feed_not_found' });
    await expect(createFeed(deps, input('large'))).rejects.toMatchObject({ code: 'conflict' });
    expect(await deps.imports.takeLease('large', 'importer', new Date(Date.now() + 60_000), new Date())).toBe(
      true,
    );
    await deps.imports.releaseLease('large', 'importer');

    expect(await finishFeedDeletion(deps, 'large')).toBe(true);

    expect(await deps.feeds.get('large', { fresh: true })).toBeUndefined();
    expect(await deps.objects.list('features/large/')).toEqual([]);
    expect(await deps.objects.list('imports/large/')).toEqual([]);
    expect(await deps.keys.listByFeed('large')).toEqual([]);
    expect(registered.has(key.searchId)).toBe(false);
  });

  it('stops a step that is still running when the time is up, between its batches', async () => {
    await stockedFeed('slow-step');
    const productsDelete = deps.products.deleteFeed.bind(deps.products);
    const slow = {
      ...deps,
      deletionBudgetMs: 200,
      products: {
        // The store looks at the signal between its pages; this one's first page takes 400 ms.
        deleteFeed: async (feedId: string, options: { signal?: AbortSignal } = {}) => {
          await new Promise((resolve) => setTimeout(resolve, 400));
          return productsDelete(feedId, options);
        },
      },
    };

    expect(await deleteFeed(slow, 'slow-step')).toBe('continuing');
    expect(await deps.objects.list('features/slow-step/')).toHaveLength(1);
    expect(await finishFeedDeletion(deps, 'slow-step')).toBe(true);
    expect(await deps.objects.list('features/slow-step/')).toEqual([]);
  });

  it("stops the usage step too when the time is up (it is the last step, and a feed's usage may be large)", async () => {
    await stockedFeed('slow-usage');
    const usageDelete = deps.usage.deleteFeed.bind(deps.usage);
    let signalled: AbortSignal | undefined;
    // The usage step outlasts the budget: it waits for the budget's signal. (The budget leaves the steps
    // before it time to end on a loaded machine: 200 ms did not always.)
    const slow = {
      ...deps,
      deletionBudgetMs: 2000,
      usage: {
        ...deps.usage,
        deleteFeed: async (feedId: string, options: { signal?: AbortSignal } = {}) => {
          signalled = options.signal;
          await new Promise((resolve) => {
            // (Already aborted when the steps before it took the whole budget: no abort event comes.)
            if (options.signal?.aborted) resolve(undefined);
            options.signal?.addEventListener('abort', resolve, { once: true });
            setTimeout(resolve, 4000);
          });
          return usageDelete(feedId, options);
        },
      },
    };

    expect(await deleteFeed(slow, 'slow-usage')).toBe('continuing');
    expect(signalled?.aborted).toBe(true);
    expect(await finishFeedDeletion(deps, 'slow-usage')).toBe(true);
    expect(await deps.feeds.get('slow-usage', { fresh: true })).toBeUndefined();
  });

  it('leaves the feed marked for the next run when the runner is paused', async () => {
    await stockedFeed('paused-deletion');
    expect(await deleteFeed({ ...deps, deletionBudgetMs: 0 }, 'paused-deletion')).toBe('continuing');

    expect(await finishFeedDeletion(deps, 'paused-deletion', AbortSignal.abort())).toBe(false);

    expect((await deps.feeds.get('paused-deletion', { fresh: true }))?.deletingAt).toEqual(
      expect.any(String),
    );
    expect(await finishFeedDeletion(deps, 'paused-deletion')).toBe(true);
    expect(await deps.feeds.get('paused-deletion', { fresh: true })).toBeUndefined();
  });

  it("is finished by the import worker from its trigger's S3 event, and paused there it triggers itself again", async () => {
    await stockedFeed('worker-deletion');
    await deleteFeed({ ...deps, deletionBudgetMs: 0 }, 'worker-deletion');
    const trigger = 'imports/worker-deletion/deletion/request.json';
    const event = { Records: [{ s3: { object: { key: trigger } } }] } as unknown as S3Event;
    // The worker runs imports through `ingest`; a deletion job needs only the admin dependencies.
    const worker = {
      ingest: { imports: deps.imports } as unknown as IngestDeps,
      objects: deps.objects,
      logger: createLogger('silent'),
      admin: deps,
    };
    await deps.objects.delete(trigger);

    // Paused at once (no time left): the feed stays marked and the trigger is written again
    await runImportEvent(worker, event, 0, 0);
    expect((await deps.feeds.get('worker-deletion', { fresh: true }))?.deletingAt).toEqual(
      expect.any(String),
    );
    expect(await deps.objects.list('imports/worker-deletion/')).toEqual([trigger]);

    await runImportEvent(worker, event);
    expect(await deps.feeds.get('worker-deletion', { fresh: true })).toBeUndefined();
    expect(await deps.objects.list('features/worker-deletion/')).toEqual([]);
    expect(await deps.objects.list('imports/worker-deletion/')).toEqual([]);
  });

  it("removes its trigger when done, also one a repeated DELETE wrote after the deletion's own sweep", async () => {
    const trigger = 'imports/swept/deletion/request.json';
    await deps.objects.put(trigger, '{}');
    const job = { ingest: {} as IngestDeps, admin: deps };

    expect(await runFeedJob(job, 'swept', 'deletion')).toBeUndefined();

    expect(await deps.objects.list('imports/swept/')).toEqual([]);
  });

  it('waits for the lease in the runner until it is paused, rather than giving up after 10 s', async () => {
    await stockedFeed('held');
    await deleteFeed({ ...deps, deletionBudgetMs: 0 }, 'held');
    await deps.imports.takeLease('held', 'slow import', new Date(Date.now() + 3_600_000), new Date());
    const pause = new AbortController();
    setTimeout(() => pause.abort(new Error('paused')), 400);

    expect(await finishFeedDeletion(deps, 'held', pause.signal)).toBe(false);

    expect((await deps.feeds.get('held', { fresh: true }))?.deletingAt).toEqual(expect.any(String));
    await deps.imports.releaseLease('held');
    expect(await finishFeedDeletion(deps, 'held')).toBe(true);
  });

  it('does not touch a feed created again when its trigger comes once more', async () => {
    await stockedFeed('again');
    await deleteFeed({ ...deps, deletionBudgetMs: 0 }, 'again');
    await finishFeedDeletion(deps, 'again');
    await stockedFeed('again');

    expect(await finishFeedDeletion(deps, 'again')).toBe(true);

    expect((await getFeed(deps, 'again')).feedId).toBe('again');
    expect(await deps.objects.list('features/again/')).toHaveLength(1);
  });
});

describe('updateFeed racing deleteFeed', () => {
  it("does not register an earlier feed's key a deletion missed when the new feed's plan changes", async () => {
    await createFeed(deps, input('replan-stale'));
    const old = await createKey(deps, 'replan-stale', { name: 'web' });
    const stored = (await deps.keys.get(old.searchId))!;
    await deleteFeed(deps, 'replan-stale');
    await createFeed(deps, input('replan-stale'));
    await deps.keys.create(stored);
    const fresh = await createKey(deps, 'replan-stale', { name: 'web' });

    await updateFeed(deps, 'replan-stale', { plan: 'pro' });

    expect(registered.has(fresh.searchId)).toBe(true);
    expect(registered.has(old.searchId)).toBe(false);
  });

  it('takes back the gateway keys a plan change registered after the deletion removed them', async () => {
    await createFeed(deps, input('replanned'));
    const key = await createKey(deps, 'replanned', { name: 'web' });
    const register = deps.apiKeys.register.bind(deps.apiKeys);
    // The plan change has stored the feed; the whole deletion runs before it moves the keys
    deps.apiKeys.register = async (moved, plan) => {
      await deleteFeed(deps, 'replanned');
      await register(moved, plan);
    };
    try {
      await expect(updateFeed(deps, 'replanned', { plan: 'pro' })).rejects.toMatchObject({
        code: 'feed_not_found',
      });
    } finally {
      deps.apiKeys.register = register;
    }
    expect(registered.has(key.searchId)).toBe(false);
  });
});

describe('createKey racing deleteFeed', () => {
  it('removes a key stored after the deletion listed the keys, and answers 404', async () => {
    await createFeed(deps, input('racing-key'));
    const create = deps.keys.create.bind(deps.keys);
    let late: string | undefined;
    // The key is stored only after the whole deletion ran (and the feed was created again).
    deps.keys.create = async (key) => {
      await deleteFeed(deps, 'racing-key');
      await createFeed(deps, input('racing-key'));
      late = key.searchId;
      await create(key);
    };
    try {
      await expect(createKey(deps, 'racing-key', { name: 'late' })).rejects.toMatchObject({
        code: 'feed_not_found',
      });
    } finally {
      deps.keys.create = create;
    }

    expect(await deps.keys.listByFeed('racing-key')).toEqual([]);
    expect(late).toBeDefined();
    expect(registered.has(late!)).toBe(false);
  });
});

describe('revokeKey', () => {
  it("takes the key out of the gateway, and a second revocation answers the first one's time", async () => {
    // Prepare
    await createFeed(deps, input('revoked-key'));
    const key = await createKey(deps, 'revoked-key', { name: 'web' });
    expect(registered.has(key.searchId)).toBe(true);
    // Act
    const first = await revokeKey(deps, key.searchId);
    const again = await revokeKey(deps, key.searchId);
    // Assess
    expect(registered.has(key.searchId)).toBe(false);
    expect(again.revokedAt).toBe(first.revokedAt);
    expect((await deps.keys.get(key.searchId))?.revokedAt).toBe(first.revokedAt);
  });
});

describe('admin reads', () => {
  it('see a change another process made, past the cache of the public request path', async () => {
    await createFeed(deps, input('elsewhere'));
    const cached = { ...deps, feeds: new CachingFeedStore(deps.feeds, 60_000) };
    await cached.feeds.get('elsewhere');

    await updateFeed(deps, 'elsewhere', { name: 'renamed elsewhere' });

    expect((await getFeed(cached, 'elsewhere')).name).toBe('renamed elsewhere');
    await deleteFeed(deps, 'elsewhere');
    await expect(getFeed(cached, 'elsewhere')).rejects.toMatchObject({ code: 'feed_not_found' });
  });
});
