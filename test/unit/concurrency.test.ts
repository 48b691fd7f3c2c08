import { describe, expect, it } from 'vitest';
import { mapLimit } from '#lib/ingest/concurrency.ts';

describe('mapLimit', () => {
  it('keeps the order of the items with at most `limit` calls in flight', async () => {
    let inFlight = 0;
    let most = 0;
    const results = await mapLimit([5, 1, 4, 2, 3], 2, async (n) => {
      most = Math.max(most, ++inFlight);
      await new Promise((resolve) => setTimeout(resolve, n));
      inFlight -= 1;
      return n * 10;
    });
    expect(results).toEqual([50, 10, 40, 20, 30]);
    expect(most).toBe(2);
  });

  it('starts nothing after a call fails, and throws once the calls in flight have settled', async () => {
    const started: number[] = [];
    const settled: number[] = [];
    const run = mapLimit(
      Array.from({ length: 40 }, (_, i) => i),
      4,
      async (i) => {
        started.push(i);
        if (i === 0) throw new Error('batch refused');
        await new Promise((resolve) => setTimeout(resolve, 20));
        settled.push(i);
      },
    );

    await expect(run).rejects.toThrow('batch refused');

    expect(started).toEqual([0, 1, 2, 3]);
    expect(settled.sort()).toEqual([1, 2, 3]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(started).toHaveLength(4);
  });
});
