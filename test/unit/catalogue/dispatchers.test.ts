import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { InProcessImportDispatcher } from '#lib/ingest/dispatchers.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';
import { createLogger } from '#lib/log.ts';

describe('InProcessImportDispatcher', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function dispatcherWith(busy: () => boolean, runs: string[]) {
    return new InProcessImportDispatcher(async (feedId, importId) => {
      runs.push(importId);
      if (busy()) throw new ImportDeferred('busy');
      return { feedId, importId, status: 'succeeded', processed: 0 } as ImportRecord;
    }, createLogger('silent'));
  }

  it('dispatches a deferred import again (its feed was busy), and is idle only after that', async () => {
    vi.useFakeTimers();
    const runs: string[] = [];
    let busy = true;
    const dispatcher = dispatcherWith(() => busy, runs);

    await dispatcher.dispatch('f', 'imp_1');
    let idle = false;
    const idled = dispatcher.idle().then(() => (idle = true));
    await vi.advanceTimersByTimeAsync(1000);
    expect(idle).toBe(false);
    busy = false;
    await vi.advanceTimersByTimeAsync(1000);
    await idled;

    expect(runs).toEqual(['imp_1', 'imp_1']);
  });

  it('does not dispatch a deferred import again once stopped', async () => {
    vi.useFakeTimers();
    const runs: string[] = [];
    const dispatcher = dispatcherWith(() => true, runs);

    await dispatcher.dispatch('f', 'imp_2');
    await vi.advanceTimersByTimeAsync(10);
    await dispatcher.stop();
    await vi.advanceTimersByTimeAsync(5000);

    expect(runs).toEqual(['imp_2']);
  });
});
