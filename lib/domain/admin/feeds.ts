import { randomBytes } from 'node:crypto';
import type { Plan } from '#lib/config.ts';
import { NotFoundError, ValidationError } from '#lib/domain/errors.ts';
import { type Feed, hourlyLimitOf } from '#lib/domain/feeds.ts';
import type { CreateFeedRequest, UpdateFeedRequest } from '#lib/domain/admin/schemas.ts';
import type {
  ApiKeyRegistry,
  Clock,
  FeedStore,
  KeyStore,
  ObjectStore,
  VectorIndex,
  VisualWordIndex,
} from '#lib/ports.ts';

export interface FeedAdminDeps {
  feeds: FeedStore;
  keys: KeyStore;
  products: { deleteFeed(feedId: string): Promise<void> };
  imports: { deleteFeed(feedId: string): Promise<void> };
  objects: ObjectStore;
  vectors(): Promise<Pick<VectorIndex, 'deleteFeed' | 'flush'>>;
  /** The visual-word index, when search uses one. */
  visualWords?: Pick<VisualWordIndex, 'deleteFeed'> | undefined;
  apiKeys: ApiKeyRegistry;
  clock: Clock;
  planLimits: Record<Plan, number>;
}

/** A feed as the admin API shows it: with the hourly limit that is in force. */
export type FeedView = Feed & { hourlyLimit: number };

export function feedView(feed: Feed, planLimits: Record<Plan, number>): FeedView {
  return { ...feed, hourlyLimit: hourlyLimitOf(feed, planLimits) };
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
  await deps.feeds.create(feed);
  return feedView(feed, deps.planLimits);
}

export async function getFeed(
  deps: Pick<FeedAdminDeps, 'feeds' | 'planLimits'>,
  feedId: string,
): Promise<FeedView> {
  return feedView(await requireFeed(deps.feeds, feedId), deps.planLimits);
}

export async function listFeeds(deps: Pick<FeedAdminDeps, 'feeds' | 'planLimits'>): Promise<FeedView[]> {
  return (await deps.feeds.list()).map((feed) => feedView(feed, deps.planLimits));
}

/**
 * Changes a feed. Steps: load, apply the patch, check the enterprise-only custom limit, store; when the
 * plan changed, move the feed's live keys to the matching gateway usage plan.
 */
export async function updateFeed(
  deps: FeedAdminDeps,
  feedId: string,
  patch: UpdateFeedRequest,
): Promise<FeedView> {
  const current = await requireFeed(deps.feeds, feedId);
  const next: Feed = {
    ...current,
    ...(patch.name !== undefined ? { name: patch.name } : {}),
    ...(patch.plan !== undefined ? { plan: patch.plan } : {}),
    ...(patch.domains !== undefined ? { domains: [...new Set(patch.domains)] } : {}),
    ...(patch.requireOrigin !== undefined ? { requireOrigin: patch.requireOrigin } : {}),
    updatedAt: deps.clock.now().toISOString(),
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
  await deps.feeds.put(next);
  if (next.plan !== current.plan) {
    for (const key of await deps.keys.listByFeed(feedId)) {
      if (!key.revokedAt) await deps.apiKeys.register(key, next.plan);
    }
  }
  return feedView(next, deps.planLimits);
}

/**
 * Deletes a feed and everything stored for it. Steps: unregister and delete keys (so the feed stops
 * answering first), delete vectors, products, import records and stored feed files, then the feed itself
 * last, so a failure part-way leaves a feed that can be deleted again rather than orphaned data.
 */
export async function deleteFeed(deps: FeedAdminDeps, feedId: string): Promise<void> {
  await requireFeed(deps.feeds, feedId);
  for (const key of await deps.keys.listByFeed(feedId)) await deps.apiKeys.unregister(key.searchId);
  await deps.keys.deleteByFeed(feedId);
  const vectors = await deps.vectors();
  await vectors.deleteFeed(feedId);
  await vectors.flush();
  await deps.visualWords?.deleteFeed(feedId);
  await deps.products.deleteFeed(feedId);
  await deps.imports.deleteFeed(feedId);
  for (const key of await deps.objects.list(`imports/${feedId}/`)) await deps.objects.delete(key);
  // Local features of the feed's product images (written by imports, see ObjectStoreFeatureStore).
  const features = await deps.objects.list(`features/${encodeURIComponent(feedId)}/`);
  for (const key of features) await deps.objects.delete(key);
  await deps.feeds.delete(feedId);
}

export async function requireFeed(feeds: FeedStore, feedId: string): Promise<Feed> {
  const feed = await feeds.get(feedId);
  if (!feed) throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
  return feed;
}
