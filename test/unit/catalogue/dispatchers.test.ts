import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { InProcessImportDispatcher } from '#lib/ingest/dispatchers.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';
import { createLogger } from '#lib/log.ts';
import { recordingLogger } from '#test/support/recording-logger.ts';

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

  it('runs a crashed job again after a pause, three runs in all, as SQS redelivers a failed trigger', async () => {
    vi.useFakeTimers();
    const runs: string[] = [];
    let failures = 5;
    const dispatcher = new InProcessImportDispatcher(async (feedId, importId) => {
      runs.push(importId);
      if (failures > 0) {
        failures -= 1;
        throw new Error('store down');
      }
      return { feedId, importId, status: 'succeeded', processed: 0 } as ImportRecord;
    }, createLogger('silent'));

    // A job that keeps failing: three runs, then it is left alone.
    await dispatcher.dispatch('f', 'imp_3');
    const idled = dispatcher.idle();
    await vi.advanceTimersByTimeAsync(4000);
    expect(runs).toEqual(['imp_3']);
    await vi.advanceTimersByTimeAsync(20_000);
    await idled;
    expect(runs).toEqual(['imp_3', 'imp_3', 'imp_3']);
    // A job whose second run succeeds: two runs; the count starts afresh after a success.
    failures = 1;
    await dispatcher.dispatch('f', 'imp_4');
    await vi.advanceTimersByTimeAsync(20_000);
    await dispatcher.idle();
    expect(runs.slice(3)).toEqual(['imp_4', 'imp_4']);
    // Something thrown that is not an Error counts the same: three runs, not a loop.
    const thrown: string[] = [];
    const odd = new InProcessImportDispatcher(async (_feedId, importId) => {
      thrown.push(importId);
      throw 'not an error';
    }, createLogger('silent'));
    await odd.dispatch('f', 'imp_5');
    await vi.advanceTimersByTimeAsync(60_000);
    await odd.idle();
    expect(thrown).toEqual(['imp_5', 'imp_5', 'imp_5']);
  });

  it('logs a crash with its ids and stack, and leaves "import finished" to the run that ended the import', async () => {
    vi.useFakeTimers();
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    const failedRecord = { feedId: 'f', importId: 'imp_6', status: 'failed' } as ImportRecord;
    let crash = true;
    const dispatcher = new InProcessImportDispatcher(
      async () => {
        await vi.advanceTimersByTimeAsync(25);
        if (crash) throw new Error('store down');
        return failedRecord;
      },
      recordingLogger(lines, { fields: true }),
    );
    await dispatcher.dispatch('f', 'imp_6');
    const idled = dispatcher.idle();
    crash = true;
    await vi.advanceTimersByTimeAsync(100);
    crash = false;
    await vi.advanceTimersByTimeAsync(10_000);
    await idled;

    expect(lines.find((line) => line.message === 'import crashed')).toMatchObject({
      level: 'error',
      fields: {
        feedId: 'f',
        importId: 'imp_6',
        error: 'Error: store down',
        stack: expect.stringContaining('store down'),
      },
    });
    // The runner's hook logs it (runFeedJob), once per import: a record handed back is no end of a run.
    expect(lines.map((line) => line.message)).not.toContain('import finished');
  });
});
