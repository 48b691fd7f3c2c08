import { readFileSync } from 'node:fs';
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

describe('the runtime settings of npm start', () => {
  it('are the ones the benches measure with', () => {
    // (bench:search once measured without them: its CPU per search was ~40 ms under what npm start served.)
    const { scripts } = JSON.parse(readFileSync('package.json', 'utf8')) as {
      scripts: Record<string, string>;
    };
    const start = scripts.start!;
    const nodeFlags = start.match(/--initial-old-space-size=\d+/g) ?? [];
    expect(nodeFlags).toHaveLength(1);
    expect(start).toContain('MALLOC_ARENA_MAX=2');
    for (const bench of ['bench:search', 'bench:memory']) {
      for (const flag of nodeFlags) expect(scripts[bench], bench).toContain(`node ${flag} --import tsx`);
    }
    // bench:memory's serving child gets MALLOC_ARENA_MAX from the bench itself (bench/memory.ts).
    expect(scripts['bench:search']).toContain('MALLOC_ARENA_MAX=2');
  });
});
