import { describe, expect, it } from 'vitest';
import {
  currentWindowCapacity,
  retryAfterSeconds,
  secondsToFullAllowance,
  secondsToWindowEnd,
  windowAt,
} from '#lib/domain/rate-window.ts';

describe('rolling-hour window arithmetic', () => {
  it('places a time in its fixed hour', () => {
    const position = windowAt(new Date('2026-11-22T10:45:00Z'));
    expect(new Date(position.start).toISOString()).toBe('2026-11-22T10:00:00.000Z');
    expect(position.elapsed).toBe(0.75);
  });

  it('gives the whole limit when the previous hour was idle', () => {
    expect(currentWindowCapacity(100, 0, 0.1)).toBe(100);
  });

  it('subtracts the weighted previous hour', () => {
    expect(currentWindowCapacity(100, 80, 0.25)).toBe(40);
    expect(currentWindowCapacity(100, 200, 0)).toBe(-100);
  });

  it('counts seconds to the end of the window', () => {
    const now = new Date('2026-11-22T10:59:30Z');
    expect(secondsToWindowEnd(windowAt(now), now)).toBe(30);
  });

  it('gives the whole allowance back when every counted window has stopped weighing', () => {
    const now = new Date('2026-11-22T10:59:30Z');
    // This hour's requests weigh until the end of the next hour; the previous hour's until this one ends.
    expect(secondsToFullAllowance(5, 1, windowAt(now), now)).toBe(30 + 3600);
    expect(secondsToFullAllowance(5, 0, windowAt(now), now)).toBe(30);
    expect(secondsToFullAllowance(0, 0, windowAt(now), now)).toBe(0);
    // Never before a refused client may retry.
    for (const [previous, current] of [
      [0, 1],
      [100, 0],
      [0, 100],
      [40, 80],
      [100, 100],
    ] as const) {
      expect(secondsToFullAllowance(previous, current, windowAt(now), now)).toBeGreaterThanOrEqual(
        retryAfterSeconds(100, previous, current, windowAt(now), now),
      );
    }
  });

  it('waits within the window while the previous hour decays', () => {
    const now = new Date('2026-11-22T10:00:00Z');
    // previous 100, current 0, limit 100: one request fits once 1 % of the previous hour has decayed (36 s).
    expect(retryAfterSeconds(100, 100, 0, windowAt(now), now)).toBe(36);
  });

  it('waits into the next window when the current hour alone is full', () => {
    const now = new Date('2026-11-22T10:59:00Z');
    // 60 s to the end of the hour, then 1 % of the full hour (36 s) must decay.
    expect(retryAfterSeconds(100, 0, 100, windowAt(now), now)).toBe(60 + 36);
    expect(retryAfterSeconds(100, 0, 200, windowAt(now), now)).toBe(60 + 1818);
  });
});
