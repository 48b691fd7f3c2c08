import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import type { Plan } from '#lib/config.ts';
import { DomainError, NotFoundError, ValidationError } from '#lib/domain/errors.ts';
import { type Feed, hourlyLimitOf } from '#lib/domain/feeds.ts';
import { FEED_DELETION_JOB, importObjectKeys } from '#lib/domain/catalogue/imports.ts';
import { keyBelongsTo } from '#lib/domain/keys.ts';
import type { CreateFeedRequest, UpdateFeedRequest } from '#lib/domain/admin/schemas.ts';
import type {
  ApiKeyRegistry,
  Clock,
  FeatureStore,
  FeedStore,
  ImportDispatcher,
  ImportStore,
  KeyStore,
  ObjectStore,
  ProductStore,
  UsageStore,
  VectorIndex,
  VisualWordIndex,
} from '#lib/ports.ts';

export interface FeedAdminDeps {
  feeds: FeedStore;
  keys: KeyStore;
  products: Pick<ProductStore, 'deleteFeed'>;
  imports: Pick<ImportStore, 'deleteFeed' | 'takeLease' | 'renewLease' | 'releaseLease'>;
  /** How long a deletion waits for the feed's lease (a running import stopping); default 10 s. */
  leaseWaitMs?: number;
  objects: ObjectStore;
  /** Local features of the feed's product images (written by imports). */
  features: Pick<FeatureStore, 'deleteFeed'>;
  usage: Pick<UsageStore, 'deleteFeed'>;
  /** The feed's vectors of every embedding model version (opened without loading a model). */
  feedVectors(): Promise<Pick<VectorIndex, 'deleteFeed' | 'flush'>>;
  /** The visual-word index, when search uses one. */
  visualWords?: Pick<VisualWordIndex, 'deleteFeed'> | undefined;
  apiKeys: ApiKeyRegistry;
  /** Hands a feed's deletion that outlasts its request to the import runner (deleteFeed). */
  dispatcher: ImportDispatcher;
  /** How long a DELETE request deletes before it hands the rest over; default 20 s. */
  deletionBudgetMs?: number;
  clock: Clock;
  planLimits: Record<Plan, number>;
}

/**
 * A feed as the admin API shows it: with the hourly limit that is in force, and whether that is the
 * feed's own (an enterprise feed's custom limit) rather than its plan's default, which follows the
 * configured plan limits (a client could not tell a pinned 10,000 from the default).
 */
export type FeedView = Feed & { hourlyLimit: number; customHourlyLimit: boolean };

/**
 * The version of a feed as an HTTP entity tag (quoted): which feed (a feed created again under the id is
 * another) at which change (every change moves updatedAt). The admin API sends it as `ETag`, and a PATCH
 * with `If-Match` applies only to that version.
 */
export function feedVersion(
  feed: Pick<FeedView, 'feedId' | 'createdAt' | 'hourlyLimit'> & { updatedAt?: string },
): string {
  // The limit in force too: it follows the configured plan limits, which change without a write.
  const digest = createHash('sha256')
    .update(`${feed.feedId}\n${feed.createdAt}\n${feed.updatedAt ?? ''}\n${feed.hourlyLimit}`)
    .digest('base64url');
  return `"${digest.slice(0, 27)}"`;
}

export function feedView(feed: Feed, planLimits: Record<Plan, number>): FeedView {
  return {
    ...feed,
    hourlyLimit: hourlyLimitOf(feed, planLimits),
    customHourlyLimit: feed.plan === 'enterprise' && feed.hourlyLimit !== undefined,
  };
}

/** Creates a feed. Steps: pick or check the id, store it (conflict if the id is taken). */
export async function createFeed(deps: FeedAdminDeps, input: CreateFeedRequest): Promise<FeedView> {
  const now = deps.clock.now().toISOString();
  const feed: Feed = {
    feedId: input.feedId ?? `feed_${randomBytes(8).toString('hex')}`,
    name: input.name,
    plan: input.plan,
    ...(input.hourlyLimit !== undefined ? { hourlyLimit: input.hourlyLimit } : {}),
    domains: [...new Set(input.domains)],
    requireOrigin: input.requireOrigin,
    createdAt: now,
    updatedAt: now,
  };
  try {
    await deps.feeds.create(feed);
  } catch (error) {
    if (error instanceof DomainError && error.code === 'conflict') {
      const existing = await deps.feeds.get(feed.feedId, { fresh: true });
      if (existing?.deletingAt)
        throw new DomainError(
          'conflict',
          `Feed ${feed.feedId} is being deleted; repeat its DELETE to finish, then create it again.`,
        );
    }
    throw error;
  }
  return feedView(feed, deps.planLimits);
}

export async function getFeed(
  deps: Pick<FeedAdminDeps, 'feeds' | 'planLimits'>,
  feedId: string,
): Promise<FeedView> {
  return feedView(await requireFeed(deps.feeds, feedId), deps.planLimits);
}

export async function listFeeds(deps: Pick<FeedAdminDeps, 'feeds' | 'planLimits'>): Promise<FeedView[]> {
  const feeds = (await deps.feeds.list()).filter((feed) => !feed.deletingAt);
  return feeds.map((feed) => feedView(feed, deps.planLimits));
}

/**
 * Changes a feed. Steps: load, apply the patch, check the enterprise-only custom limit, store only if the
 * feed is still as loaded (its updatedAt unchanged: optimistic concurrency); when another change came
 * first, load it again and apply the patch to that, up to UPDATE_ATTEMPTS times in all (then 409
 * conflict). So concurrent changes of different fields all stay. When the stored change moved the plan,
 * move the feed's live keys to the matching gateway usage plan: once, after the write that changed it.
 *
 * `ifMatch` (the versions of If-Match, feedVersion): the patch applies only to a feed at one of these
 * versions, once; any other version, or a change that comes first, is 412 `precondition_failed`. A
 * client that sends a whole list it edited (the domains) so never overwrites a change it did not see.
 */
export async function updateFeed(
  deps: FeedAdminDeps,
  feedId: string,
  patch: UpdateFeedRequest,
  options: { ifMatch?: readonly string[] } = {},
): Promise<FeedView> {
  let createdAt: string | undefined;
  const changedMeanwhile = () => notAtVersion(feedId);
  for (let attempt = 1; ; attempt++) {
    const current = await requireFeed(deps.feeds, feedId);
    if (options.ifMatch && !options.ifMatch.includes(feedVersion(feedView(current, deps.planLimits))))
      throw changedMeanwhile();
    // A feed deleted and created again under the id since the first attempt read it is another feed.
    if (createdAt !== undefined && current.createdAt !== createdAt)
      throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
    createdAt = current.createdAt;
    const next = patched(current, patch, deps.clock.now());
    // A patch of the values the feed has is no change: no write, the same updatedAt and version (a client
    // saving an unchanged form must not make another's If-Match fail).
    if (isDeepStrictEqual({ ...next, updatedAt: current.updatedAt }, current))
      return feedView(current, deps.planLimits);
    try {
      // (null: a feed stored before updatedAt was kept, which the check must still cover)
      await deps.feeds.put(next, current.updatedAt ?? null);
    } catch (error) {
      if (!(error instanceof DomainError && error.code === 'conflict')) throw error;
      if (options.ifMatch) throw changedMeanwhile();
      if (attempt >= UPDATE_ATTEMPTS)
        throw new DomainError(
          'conflict',
          `Feed ${feedId} kept being changed by other requests meanwhile; nothing was changed, try again.`,
        );
      // Short and random, so that updates racing each other do not collide again in step.
      await sleep(Math.random() * 20 * attempt);
      continue;
    }
    // `current` is the feed this write replaced (unchanged since read): the plan moved iff it differs.
    if (next.plan !== current.plan) await moveKeys(deps, next);
    return feedView(next, deps.planLimits);
  }
}

/** A request with If-Match for a feed at another version (feedVersion) than the stored one. */
function notAtVersion(feedId: string): DomainError {
  return new DomainError(
    'precondition_failed',
    `Feed ${feedId} is not at the version in If-Match (it changed since it was read); nothing was changed. Read it again and apply the change to that.`,
  );
}

/** Attempts of updateFeed to store its patch over a feed that other requests keep changing. */
const UPDATE_ATTEMPTS = 10;

/** `current` with the patch applied and a later updatedAt (or the enterprise-only check failing). */
function patched(current: Feed, patch: UpdateFeedRequest, now: Date): Feed {
  const next: Feed = {
    ...current,
    ...(patch.name !== undefined ? { name: patch.name } : {}),
    ...(patch.plan !== undefined ? { plan: patch.plan } : {}),
    ...(patch.domains !== undefined ? { domains: [...new Set(patch.domains)] } : {}),
    ...(patch.requireOrigin !== undefined ? { requireOrigin: patch.requireOrigin } : {}),
    updatedAt: laterThan(current.updatedAt, now),
  };
  if (patch.hourlyLimit === null || (patch.plan !== undefined && patch.plan !== 'enterprise'))
    delete next.hourlyLimit;
  if (patch.hourlyLimit !== undefined && patch.hourlyLimit !== null) {
    if (next.plan !== 'enterprise') {
      throw new ValidationError('hourlyLimit applies to the enterprise plan only.', [
        { path: 'hourlyLimit', message: 'applies to the enterprise plan only' },
      ]);
    }
    next.hourlyLimit = patch.hourlyLimit;
  }
  return next;
}

/**
 * `now`, or 1 ms past `previous` when the clock has not passed it (the same millisecond, another
 * function's clock behind): every change gives the feed a new updatedAt, which the next change's
 * optimistic check compares.
 */
function laterThan(previous: string, now: Date): string {
  const after = Date.parse(previous) + 1;
  return Number.isNaN(after) || now.getTime() >= after ? now.toISOString() : new Date(after).toISOString();
}

/**
 * Moves the live keys of `feed` (as just stored with a new plan) to the gateway usage plan of its plan,
 * then of the plan stored by then: two opposite plan changes at once each move the keys after their own
 * write, and the one whose moves end last must not leave the gateway on the plan the store no longer has.
 */
async function moveKeys(deps: FeedAdminDeps, feed: Feed): Promise<void> {
  let plan = feed.plan;
  for (let round = 1; ; round += 1) {
    // Not an earlier feed's keys a deletion missed: they stay out of the gateway's plans.
    const moved = (await deps.keys.listByFeed(feed.feedId)).filter(
      (key) => !key.revokedAt && keyBelongsTo(key, feed),
    );
    for (const key of moved) await deps.apiKeys.register(key, plan);
    const now = await liveFeed(deps.feeds, feed);
    // A deletion that started meanwhile may have unregistered these keys already: they go again.
    if (!now) {
      for (const key of moved) await deps.apiKeys.unregister(key.searchId);
      throw new NotFoundError('feed_not_found', `Feed ${feed.feedId} not found.`);
    }
    // (Bounded: a plan that keeps changing is moved by the requests changing it.)
    if (now.plan === plan || round >= MOVE_ROUNDS) return;
    plan = now.plan;
  }
}

/** Rounds of moveKeys following the stored plan. */
const MOVE_ROUNDS = 3;

/**
 * Deletes a feed and everything stored for it. Steps:
 * 1. mark the feed as being deleted: from then on it is not found, cannot be updated or re-created, a key
 *    created for it removes itself again (createKey), and a running import stops at its next progress
 *    save, removing what it wrote after the mark (runImport);
 * 2. take the feed's lease, which a running import holds until it has stopped (waiting up to
 *    `leaseWaitMs`, 10 s; then the deletion is handed over, below), so nothing writes to the feed while
 *    its data is deleted; check it is still the feed marked in 1 (a concurrent deletion may have finished it,
 *    and a new feed of the same id been created since: that one is not touched);
 * 3. unregister and delete keys (so the feed stops answering first); delete vectors, words, products,
 *    import records, stored feed files, local features and usage; sweep the keys once more (a key
 *    created just before the mark may reach the listing index late);
 * 4. delete the feed itself (only the feed read in 1), then give the lease up. A failure part-way leaves
 *    the feed marked, hidden, rather than orphaned data: it is thrown, and the import runner (or a
 *    repeated DELETE) finishes the deletion.
 * A large feed's steps can outlast the request (API Gateway gives it 29 s): once `deletionBudgetMs`
 * (20 s) have passed since the request began, step 3 stops between batches, the lease is given up and
 * the import runner finishes the deletion (finishFeedDeletion): the answer is then 'continuing'. So it
 * is when the lease stays held in step 2 (the runner waits for it).
 */
export async function deleteFeed(
  deps: FeedAdminDeps,
  feedId: string,
  options: { ifMatch?: readonly string[] } = {},
): Promise<'deleted' | 'continuing'> {
  const budget = AbortSignal.timeout(deps.deletionBudgetMs ?? DELETION_BUDGET_MS);
  const feed = await deps.feeds.get(feedId, { fresh: true });
  if (!feed) throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
  const versioned = options.ifMatch !== undefined && !feed.deletingAt;
  if (versioned && !options.ifMatch!.includes(feedVersion(feedView(feed, deps.planLimits))))
    throw notAtVersion(feedId);
  try {
    // Only the feed read above: one created again since (after a concurrent deletion) is not marked, nor,
    // with If-Match, one changed since.
    await deps.feeds.markDeleting(
      feedId,
      deps.clock.now(),
      feed.createdAt,
      versioned ? (feed.updatedAt ?? null) : undefined,
    );
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
    if (versioned) {
      const now = await deps.feeds.get(feedId, { fresh: true });
      if (now && now.createdAt === feed.createdAt && !now.deletingAt) throw notAtVersion(feedId);
    }
    return 'deleted';
  }
  let done: boolean;
  try {
    done = await deleteMarkedFeed(deps, feed, budget);
  } catch (error) {
    // The feed's lease stayed held (an import stopping slowly, a runner finishing this deletion, one
    // that died holding it): the runner waits for it instead of the client repeating the DELETE.
    if (!(error instanceof DomainError && error.code === 'conflict')) {
      // A failure (a store error) is the client's to see, and the runner tries again meanwhile, so the
      // feed does not stay hidden until someone repeats the DELETE. Best effort: the failure stands.
      await handOver(deps, feedId).catch(() => undefined);
      throw error;
    }
    done = false;
  }
  if (done) return 'deleted';
  await handOver(deps, feedId);
  return 'continuing';
}

/**
 * Hands a feed's deletion to the import runner like an import: its trigger object under imports/ (the
 * worker's S3 event in AWS), then the dispatcher (the in-process runner locally). The deletion's last
 * sweep of imports/ (or the finished job) removes the trigger.
 */
async function handOver(deps: FeedAdminDeps, feedId: string): Promise<void> {
  const { request } = importObjectKeys(feedId, FEED_DELETION_JOB);
  await deps.objects.put(request, JSON.stringify({ feedId, deletion: true }), 'application/json');
  await deps.dispatcher.dispatch(feedId, FEED_DELETION_JOB);
}

/**
 * Finishes the deletion of a feed marked as being deleted (the import runner, for a DELETE out of its
 * time; `npm start`, for a run killed part way). Nothing to do when the feed is gone or not marked (a
 * feed created again since). `stop` (a paused runner) stops it between batches: it returns false and the
 * feed stays marked for the next run.
 */
export async function finishFeedDeletion(
  deps: FeedAdminDeps,
  feedId: string,
  stop?: AbortSignal,
): Promise<boolean> {
  const feed = await deps.feeds.get(feedId, { fresh: true });
  if (!feed?.deletingAt) return true;
  // The runner waits out whoever holds the lease (a lapsed one within 10 minutes) rather than deferring,
  // which would bring its trigger back every minute (functions/import-worker.ts) until then.
  return deleteMarkedFeed({ ...deps, leaseWaitMs: deps.leaseWaitMs ?? RUNNER_LEASE_WAIT_MS }, feed, stop);
}

/** How long the import runner waits for the lease of a feed it deletes: past an import runner's lease. */
const RUNNER_LEASE_WAIT_MS = 11 * 60_000;

/** How long a DELETE request deletes before it hands the rest over (inside API Gateway's 29 s). */
const DELETION_BUDGET_MS = 20_000;

/**
 * Steps 2–4 of deleteFeed; false when `stop` aborted them part way (the lease is then given up). The
 * lease is also renewed every DELETION_LEASE_MS / 3 while a step runs (a large feed's step takes minutes
 * in the runner); lost to another deletion, the steps stop and the answer is a conflict.
 */
async function deleteMarkedFeed(deps: FeedAdminDeps, feed: Feed, stop?: AbortSignal): Promise<boolean> {
  const { feedId } = feed;
  let lease: Awaited<ReturnType<typeof takeFeedLease>>;
  try {
    lease = await takeFeedLease(deps, feedId, stop);
  } catch (error) {
    // Stopped while waiting for the lease (out of time, paused): nothing done yet, nothing held.
    if (stop?.aborted && error === stop.reason) return false;
    throw error;
  }
  const lost = new AbortController();
  const renewal = setInterval(() => {
    lease.renew().catch((error: unknown) => {
      // Lost (taken over) stops the deletion; a failed call (throttling, network) is tried at the next tick.
      if (error instanceof DomainError && error.code === 'conflict') lost.abort(error);
    });
  }, DELETION_LEASE_MS / 3);
  renewal.unref();
  const halt = stop ? AbortSignal.any([stop, lost.signal]) : lost.signal;
  const signal = { signal: halt };
  const steps: (() => Promise<unknown>)[] = [
    () => deleteKeys(deps, feedId),
    async () => {
      const vectors = await deps.feedVectors();
      await vectors.deleteFeed(feedId, signal);
      await vectors.flush();
      await deps.visualWords?.deleteFeed(feedId, signal);
    },
    () => deps.products.deleteFeed(feedId, signal),
    async () => {
      await deps.imports.deleteFeed(feedId);
      await deps.objects.deleteMany(await deps.objects.list(`imports/${feedId}/`));
    },
    () => deps.features.deleteFeed(feedId, signal),
    async () => {
      await deps.usage.deleteFeed(feedId, signal);
      await deleteKeys(deps, feedId);
    },
  ];
  try {
    const now = await deps.feeds.get(feedId, { fresh: true });
    if (!now || now.createdAt !== feed.createdAt) return true;
    for (const step of steps) {
      if (stop?.aborted) return false;
      halt.throwIfAborted();
      await step();
      await lease.renew();
    }
    await deps.feeds.delete(feedId, feed.createdAt);
    return true;
  } catch (error) {
    if (lost.signal.aborted) throw lost.signal.reason;
    // Only the stop itself (its reason, thrown by a step between batches) hands over; any other
    // failure is the caller's to see, not to be hidden behind a deletion said to continue.
    if (stop?.aborted && error === stop.reason) return false;
    throw error;
  } finally {
    clearInterval(renewal);
    await lease.release();
  }
}

const DELETION_LEASE_MS = 60_000;

/** The feed's lease for a deletion, waited for while an import holds it (see deleteFeed, step 2). */
async function takeFeedLease(
  deps: Pick<FeedAdminDeps, 'imports' | 'clock' | 'leaseWaitMs'>,
  feedId: string,
  /** Stops the wait (a paused runner): its reason is thrown. */
  stop?: AbortSignal,
): Promise<{ renew(): Promise<void>; release(): Promise<void> }> {
  const owner = `deletion:${randomUUID()}`;
  // Short, and renewed after every step: a deletion killed part way (by its function's timeout) holds
  // the feed for a minute at most, not for an import runner's 10 minutes.
  const until = () => new Date(deps.clock.now().getTime() + DELETION_LEASE_MS);
  // By default well inside the 29 s of an API Gateway request, with the deletion itself after it.
  const deadline = Date.now() + (deps.leaseWaitMs ?? 10_000);
  while (!(await deps.imports.takeLease(feedId, owner, until(), deps.clock.now()))) {
    stop?.throwIfAborted();
    if (Date.now() >= deadline)
      throw new DomainError(
        'conflict',
        `Feed ${feedId} is busy: an import is stopping or another deletion runs.`,
      );
    await sleep(200);
  }
  return {
    async renew() {
      if (!(await deps.imports.renewLease(feedId, owner, until())))
        throw new DomainError(
          'conflict',
          `Feed ${feedId} was taken over during its deletion (by another deletion).`,
        );
    },
    release: () => deps.imports.releaseLease(feedId, owner),
  };
}

async function deleteKeys(deps: Pick<FeedAdminDeps, 'keys' | 'apiKeys'>, feedId: string): Promise<void> {
  for (const key of await deps.keys.listByFeed(feedId)) await deps.apiKeys.unregister(key.searchId);
  await deps.keys.deleteByFeed(feedId);
}

/**
 * The feed, unless it does not exist or is being deleted (NotFoundError). Read fresh: admin calls run in
 * other functions than the one that last changed the feed, and must not see it as it was up to a cache
 * lifetime ago (the public request path reads through the cache).
 */
export async function requireFeed(feeds: Pick<FeedStore, 'get'>, feedId: string): Promise<Feed> {
  const feed = await feeds.get(feedId, { fresh: true });
  if (!feed || feed.deletingAt) throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
  return feed;
}

/**
 * True while `feed` (as read earlier) is still the stored, live feed: not deleted, not being deleted, and
 * not replaced by a new feed created under the same id since.
 */
export async function feedStillLive(feeds: Pick<FeedStore, 'get'>, feed: Feed): Promise<boolean> {
  return (await liveFeed(feeds, feed)) !== undefined;
}

/** `feed` as stored now (strongly consistent read), or undefined once it is gone (feedStillLive). */
async function liveFeed(feeds: Pick<FeedStore, 'get'>, feed: Feed): Promise<Feed | undefined> {
  const now = await feeds.get(feed.feedId, { fresh: true });
  return now !== undefined && !now.deletingAt && now.createdAt === feed.createdAt ? now : undefined;
}
