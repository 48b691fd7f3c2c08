import { randomBytes } from 'node:crypto';

/** A search id (API key): an opaque secret bound to exactly one feed. */
export interface SearchKey {
  searchId: string;
  feedId: string;
  /** Free label chosen in the dashboard ("storefront", "staging"). */
  name: string;
  createdAt: string;
  /**
   * The createdAt of the feed the key was minted for. A feed deleted and created again under the same id
   * is another feed: a key of the first one that a deletion's sweep missed (its listing index is
   * eventually consistent in AWS) must not open the second. Absent on keys minted before it was recorded.
   */
  feedCreatedAt?: string;
  lastUsedAt?: string;
  revokedAt?: string;
}

/**
 * Whether the key was minted for this feed, not for an earlier feed that had its id. A key minted before
 * feedCreatedAt was recorded belongs to the feed of its id that existed when it was created: one created
 * before this feed was is an earlier feed's.
 */
export function keyBelongsTo(key: SearchKey, feed: { feedId: string; createdAt: string }): boolean {
  if (key.feedId !== feed.feedId) return false;
  return key.feedCreatedAt === undefined
    ? key.createdAt >= feed.createdAt
    : key.feedCreatedAt === feed.createdAt;
}

/** The key as the admin API shows it: the feed's creation time is bookkeeping, not part of the resource. */
export function keyView(key: SearchKey): Omit<SearchKey, 'feedCreatedAt'> {
  const { feedCreatedAt: _feedCreatedAt, ...view } = key;
  return view;
}

/** 192 random bits, base64url: unguessable and safe in headers and JSON. */
export function newSearchId(): string {
  return `vps_${randomBytes(24).toString('base64url')}`;
}
