import { describe, expect, it } from 'vitest';
import { settleHeap } from '#lib/local/heap-growth.ts';

describe('settleHeap', () => {
  it('collects what the loads before it left behind', () => {
    // Prepare: ~60 MB of objects that survive a while (as a parse's intermediate rows do), then dropped
    let garbage: { i: number; name: string }[] | undefined = Array.from({ length: 1_000_000 }, (_, i) => ({
      i,
      name: `row ${i}`,
    }));
    expect(garbage).toHaveLength(1_000_000);
    garbage = undefined;
    const before = process.memoryUsage().heapUsed;
    // Act
    settleHeap();
    // Assess
    expect(before - process.memoryUsage().heapUsed).toBeGreaterThan(30 * 2 ** 20);
  });
});
