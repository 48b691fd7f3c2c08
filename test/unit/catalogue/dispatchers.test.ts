import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { InProcessImportDispatcher } from '#lib/ingest/dispatchers.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';
import { createLogger } from '#lib/log.ts';

describe('InProcessImportDispatcher', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('dispatches a deferred import again (its feed was busy), and not after stop', async () => {
    vi.useFakeTimers();
    const runs: string[] = [];
    let busy = true;
    const dispatcher = new InProcessImportDispatcher(async (feedId, importId) => {
      runs.push(importId);
      if (busy) throw new ImportDeferred('busy');
      return { feedId, importId, status: 'succeeded', processed: 0 } as ImportRecord;
    }, createLogger('silent'));

    await dispatcher.dispatch('f', 'imp_1');
    await dispatcher.idle();
    busy = false;
    await vi.advanceTimersByTimeAsync(2000);
    await dispatcher.idle();
    expect(runs).toEqual(['imp_1', 'imp_1']);

    busy = true;
    await dispatcher.dispatch('f', 'imp_2');
    await dispatcher.idle();
    await dispatcher.stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect(runs).toEqual(['imp_1', 'imp_1', 'imp_2']);
  });
});
