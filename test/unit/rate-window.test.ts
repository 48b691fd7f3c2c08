import { describe, expect, it } from 'vitest';
import {
  BUCKET_MS,
  bucketStart,
  currentBucketCapacity,
  retryAfterSeconds,
  secondsToFullAllowance,
} from '#lib/domain/rate-window.ts';

const HOUR = 3_600_000;
const at = (iso: string) => Date.parse(`2026-11-22T${iso}Z`);
/** 12 previous counts, newest first, from a sparse map of "buckets back" → count. */
const previousOf = (counts: Record<number, number>) =>
  Array.from({ length: 12 }, (_, i) => counts[i + 1] ?? 0);

/**
 * The store's decision with the pure rules: a ledger of bucket counts, each arrival admitted when its
 * bucket holds fewer than the capacity left by the 12 before it.
 */
function ledger(limit: () => number) {
  const counts = new Map<number, number>();
  const previous = (start: number) =>
    Array.from({ length: 12 }, (_, i) => counts.get(start - (i + 1) * BUCKET_MS) ?? 0);
  return {
    consume(t: number) {
      const now = new Date(t);
      const start = bucketStart(now);
      const current = counts.get(start) ?? 0;
      const prev = previous(start);
      if (current < currentBucketCapacity(limit(), prev)) {
        counts.set(start, current + 1);
        return { allowed: true, retryAfter: 0, reset: secondsToFullAllowance(prev, current + 1, now) };
      }
      return {
        allowed: false,
        retryAfter: retryAfterSeconds(limit(), prev, current, now),
        reset: secondsToFullAllowance(prev, current, now),
      };
    },
  };
}

/** The most admissions in any 60-minute span [a, a + 60 min). */
function mostInAnHour(admitted: number[]): number {
  let most = 0;
  for (let i = 0, j = 0; i < admitted.length; i++) {
    while (admitted[i]! - admitted[j]! >= HOUR) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

/** Deterministic pseudo-random numbers in [0, 1). */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2_147_483_648;
    return s / 2_147_483_648;
  };
}

describe('rolling-hour bucket arithmetic', () => {
  it('places a time in its 5-minute bucket', () => {
    expect(new Date(bucketStart(new Date('2026-11-22T10:47:59.999Z'))).toISOString()).toBe(
      '2026-11-22T10:45:00.000Z',
    );
    expect(new Date(bucketStart(new Date('2026-11-22T10:50:00.000Z'))).toISOString()).toBe(
      '2026-11-22T10:50:00.000Z',
    );
  });

  it('gives the whole limit when the 12 previous buckets are empty', () => {
    expect(currentBucketCapacity(100, previousOf({}))).toBe(100);
  });

  it('subtracts the 12 previous buckets in full, the oldest too', () => {
    expect(currentBucketCapacity(100, previousOf({ 1: 10, 6: 20, 12: 30 }))).toBe(40);
    expect(currentBucketCapacity(100, previousOf({ 12: 200 }))).toBe(-100);
  });

  it('admits at most the limit in any 60-minute span after a burst just before a clock hour ends', () => {
    // The review's first scenario: 100 at 10:59:30, then a request every 5 s (or every second) for 2 hours.
    for (const every of [5_000, 1_000]) {
      const limit = 100;
      const store = ledger(() => limit);
      const arrivals = [
        ...Array.from({ length: 101 }, () => at('10:59:30')),
        ...Array.from({ length: (2 * HOUR) / every }, (_, i) => at('11:00:00') + i * every),
      ];
      const admitted = arrivals.filter((t) => store.consume(t).allowed);
      expect(mostInAnHour(admitted)).toBeLessThanOrEqual(limit);
      expect(admitted.filter((t) => t >= at('10:59:30') && t < at('11:59:30'))).toHaveLength(limit);
      // Not over-strict either: the whole limit again from 12:00, when the burst's bucket has left.
      expect(admitted.filter((t) => t >= at('12:00:00') && t < at('13:00:00'))).toHaveLength(limit);
    }
  });

  it('admits the whole limit when the last hour holds nothing, up to one bucket', () => {
    // The review's second scenario: 100 at 10:00:05, then nothing.
    const store = ledger(() => 100);
    for (let i = 0; i < 100; i++) store.consume(at('10:00:05'));
    // The bucket 10:00–10:05 counts until 11:05; from then on the whole limit is back.
    expect(store.consume(at('11:04:59')).allowed).toBe(false);
    const admitted = Array.from({ length: 101 }, () => store.consume(at('11:30:00')).allowed);
    expect(admitted.filter(Boolean)).toHaveLength(100);
  });

  it('gives Retry-After and RateLimit-Reset at bucket edges', () => {
    const full = previousOf({});
    // 100 counted in this bucket: it leaves 65 minutes after its start.
    expect(retryAfterSeconds(100, full, 100, new Date(at('11:00:00')))).toBe(3900);
    expect(secondsToFullAllowance(full, 100, new Date(at('11:00:00')))).toBe(3900);
    expect(retryAfterSeconds(100, full, 100, new Date(at('11:04:59.999')))).toBe(3601);
    expect(secondsToFullAllowance(full, 100, new Date(at('11:04:59.999')))).toBe(3601);
    expect(retryAfterSeconds(100, full, 100, new Date(at('10:59:30')))).toBe(3630);
    // The oldest counted bucket holds 5, this one 5 of a limit of 10: one more fits when the oldest
    // leaves at the end of this bucket; everything is back when this one leaves.
    const oldest = previousOf({ 12: 5 });
    expect(retryAfterSeconds(10, oldest, 5, new Date(at('10:02:00')))).toBe(180);
    expect(secondsToFullAllowance(oldest, 5, new Date(at('10:02:00')))).toBe(3900 - 120);
    expect(secondsToFullAllowance(oldest, 0, new Date(at('10:02:00')))).toBe(180);
    expect(secondsToFullAllowance(full, 0, new Date(at('10:02:00')))).toBe(0);
    // Several buckets must leave: 4 each in the buckets 12, 8 and 3 back, limit 8 (7 must be reached).
    const spread = previousOf({ 12: 4, 8: 4, 3: 4 });
    expect(retryAfterSeconds(8, spread, 0, new Date(at('10:00:00')))).toBe(5 * 60 * 5);
    expect(secondsToFullAllowance(spread, 0, new Date(at('10:00:00')))).toBe(10 * 5 * 60);
  });

  it('waits for this bucket and the earlier ones after a limit lowered mid-hour', () => {
    // 10 in each of the 6 previous buckets and 5 in this one under a limit of 100; the limit drops to 25.
    const previous = previousOf({ 1: 10, 2: 10, 3: 10, 4: 10, 5: 10, 6: 10 });
    const now = new Date(at('10:32:00'));
    expect(currentBucketCapacity(25, previous)).toBe(-35);
    // 24 is first reached when only this bucket and the one before it still count (15), 11 buckets on.
    expect(retryAfterSeconds(25, previous, 5, now)).toBe(11 * 300 - 120);
    expect(secondsToFullAllowance(previous, 5, now)).toBe(13 * 300 - 120);

    // The same through the ledger: the limit drops while requests are counted.
    let limit = 100;
    const store = ledger(() => limit);
    for (let m = 0; m < 30; m += 5) for (let i = 0; i < 10; i++) store.consume(at('10:00:00') + m * 60_000);
    for (let i = 0; i < 5; i++) store.consume(at('10:30:00'));
    limit = 25;
    const refused = store.consume(now.getTime());
    expect(refused).toMatchObject({ allowed: false, retryAfter: 11 * 300 - 120 });
    expect(store.consume(now.getTime() + (refused.retryAfter - 1) * 1000).allowed).toBe(false);
    expect(store.consume(now.getTime() + refused.retryAfter * 1000).allowed).toBe(true);
  });

  it('lets a refused client in exactly at Retry-After, never resets before it, on random traffic', () => {
    const next = random(7);
    for (let round = 0; round < 200; round++) {
      const limit = 1 + Math.floor(next() * 30);
      const store = ledger(() => limit);
      let t = at('10:00:00');
      for (let i = 0; i < 100; i++) {
        t += Math.floor(next() * 120_000);
        store.consume(t);
      }
      const refused = store.consume(t);
      if (refused.allowed) continue;
      expect(refused.reset).toBeGreaterThanOrEqual(refused.retryAfter);
      expect(refused.reset).toBeLessThanOrEqual(65 * 60);
      // Probing changes nothing when refused; the retry at Retry-After is admitted.
      expect(store.consume(t + (refused.retryAfter - 1) * 1000).allowed).toBe(false);
      expect(store.consume(t + refused.retryAfter * 1000).allowed).toBe(true);
    }
  });
});
