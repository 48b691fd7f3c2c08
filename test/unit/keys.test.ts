import { describe, expect, it } from 'vitest';
import { keyBelongsTo, type SearchKey } from '#lib/domain/keys.ts';

const feed = { feedId: 'shop', createdAt: '2026-11-26T10:00:00.000Z' };
const key: SearchKey = {
  searchId: 'vps_x',
  feedId: 'shop',
  name: 'web',
  createdAt: '2026-11-26T10:01:00.000Z',
};

describe('keyBelongsTo', () => {
  it('binds a key to the feed it was minted for, not to a later feed with the same id', () => {
    expect(keyBelongsTo({ ...key, feedCreatedAt: feed.createdAt }, feed)).toBe(true);
    expect(keyBelongsTo({ ...key, feedCreatedAt: '2026-11-25T09:00:00.000Z' }, feed)).toBe(false);
    expect(keyBelongsTo({ ...key, feedId: 'other', feedCreatedAt: feed.createdAt }, feed)).toBe(false);
  });

  it('binds a key minted before the binding was recorded to the feed of its id that existed then', () => {
    expect(keyBelongsTo(key, feed)).toBe(true);
    expect(keyBelongsTo(key, { ...feed, feedId: 'other' })).toBe(false);
    // Created before this feed was: an earlier feed's key
    expect(keyBelongsTo({ ...key, createdAt: '2026-11-26T09:59:59.000Z' }, feed)).toBe(false);
    // Created in the feed's own millisecond (a key minted with the feed): this feed's
    expect(keyBelongsTo({ ...key, createdAt: feed.createdAt }, feed)).toBe(true);
  });
});
