import { describe, expect, it } from 'vitest';
import { Gate } from '#lib/gate.ts';
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

describe('Gate', () => {
  it('runs at most `limit` tasks at once, the others in the order they came', async () => {
    // Prepare
    const gate = new Gate(2);
    const started: number[] = [];
    let inFlight = 0;
    let most = 0;
    const task = (n: number) =>
      gate.run(async () => {
        started.push(n);
        most = Math.max(most, ++inFlight);
        await new Promise((resolve) => setTimeout(resolve, 5));
        inFlight -= 1;
        return n;
      });
    // Act
    const results = await Promise.all([1, 2, 3, 4, 5].map(task));
    // Assess
    expect(results).toEqual([1, 2, 3, 4, 5]);
    expect(started).toEqual([1, 2, 3, 4, 5]);
    expect(most).toBe(2);
    expect([gate.running, gate.waiting]).toEqual([0, 0]);
  });

  it('frees the slot of a task that fails, and passes the failure on', async () => {
    // Prepare
    const gate = new Gate(1);
    // Act
    const failed = gate.run(() => Promise.reject(new Error('decode failed')));
    const next = gate.run(async () => 'next');
    // Assess
    await expect(failed).rejects.toThrow('decode failed');
    await expect(next).resolves.toBe('next');
    expect(gate.running).toBe(0);
  });
});
