import { feedStillLive, requireFeed } from '#lib/domain/admin/feeds.ts';
import type { CreateKeyRequest } from '#lib/domain/admin/schemas.ts';
import { NotFoundError } from '#lib/domain/errors.ts';
import { keyBelongsTo, keyView, newSearchId, type SearchKey } from '#lib/domain/keys.ts';
import type { ApiKeyRegistry, Clock, FeedStore, KeyStore } from '#lib/ports.ts';

export interface KeyAdminDeps {
  feeds: FeedStore;
  keys: KeyStore;
  apiKeys: ApiKeyRegistry;
  clock: Clock;
}

/**
 * Creates a search id for a feed. Steps: check the feed, mint the id, store it, mirror it to the gateway,
 * then check the feed again: a deletion that started meanwhile may have listed the feed's keys before
 * this one was stored, so the key removes itself and the answer is 404, as if the feed had been gone.
 */
export async function createKey(
  deps: KeyAdminDeps,
  feedId: string,
  input: CreateKeyRequest,
): Promise<ReturnType<typeof keyView>> {
  const feed = await requireFeed(deps.feeds, feedId);
  const key: SearchKey = {
    searchId: newSearchId(),
    feedId,
    name: input.name,
    createdAt: deps.clock.now().toISOString(),
    feedCreatedAt: feed.createdAt,
  };
  await deps.keys.create(key);
  let live: boolean;
  try {
    await deps.apiKeys.register(key, feed.plan);
    live = await feedStillLive(deps.feeds, feed);
  } catch (error) {
    // Not half made: a stored id the gateway does not know would be listed, and a retry (the same
    // Idempotency-Key runs again after an error) would add a second one.
    await Promise.allSettled([deps.apiKeys.unregister(key.searchId), deps.keys.delete(key.searchId)]);
    throw error;
  }
  if (!live) {
    await deps.apiKeys.unregister(key.searchId);
    await deps.keys.delete(key.searchId);
    throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
  }
  return keyView(key);
}

/**
 * The feed's search ids, newest first, revoked ones included (marked by revokedAt). Keys left by an
 * earlier feed of the same id (keyBelongsTo) are not this feed's and are not listed.
 */
export async function listKeys(
  deps: Pick<KeyAdminDeps, 'feeds' | 'keys'>,
  feedId: string,
): Promise<ReturnType<typeof keyView>[]> {
  const feed = await requireFeed(deps.feeds, feedId);
  const keys = (await deps.keys.listByFeed(feedId)).filter((key) => keyBelongsTo(key, feed));
  return keys.sort((a, b) => b.createdAt.localeCompare(a.createdAt)).map(keyView);
}

/** Revokes a search id: later requests with it get 403. Steps: mark revoked, remove it from the gateway. */
export async function revokeKey(deps: KeyAdminDeps, searchId: string): Promise<ReturnType<typeof keyView>> {
  const key = await deps.keys.get(searchId);
  if (!key) throw new NotFoundError('not_found', 'Search id not found.');
  const at = deps.clock.now();
  await deps.keys.revoke(searchId, at);
  await deps.apiKeys.unregister(searchId);
  return keyView({ ...key, revokedAt: key.revokedAt ?? at.toISOString() });
}
