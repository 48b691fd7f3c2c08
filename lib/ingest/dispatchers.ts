import { FEED_DELETION_JOB, type ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { errorFields, type Logger } from '#lib/log.ts';
import type { ImportDispatcher } from '#lib/ports.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';

/** How soon a deferred import is dispatched again. */
const DEFERRED_RETRY_MS = 2000;

/**
 * A job whose run failed (crashed) is dispatched again after CRASH_RETRY_MS, up to CRASH_RUNS runs in all,
 * as SQS redelivers a failed trigger to the worker in AWS (maxReceiveCount 3): a transient failure is
 * retried, and an import failing part way the third time in a row ends `failed` (the runner counts),
 * instead of staying `running`, with the feed's next imports queued behind it, until something else
 * dispatched the feed.
 */
const CRASH_RETRY_MS = 5000;
const CRASH_RUNS = 3;

/**
 * Local mode: runs imports in this process, in the background, one at a time (runTriggeredImport runs a
 * feed's imports in creation order whatever the order of the triggers). `stop()` pauses the running
 * import at its next checkpoint and leaves queued ones queued; the next start resumes both.
 */
export class InProcessImportDispatcher implements ImportDispatcher {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;
  private readonly stopping = new AbortController();
  /**
   * Deferred imports waiting to be dispatched again, by timer: `waited` settles once dispatched (or
   * cancelled by stop()); idle() waits for them.
   */
  private readonly retries = new Map<NodeJS.Timeout, { waited: Promise<void>; done: () => void }>();
  /** Consecutive failed runs of a job, by feed and job id. */
  private readonly crashes = new Map<string, number>();

  constructor(
    private readonly run: (
      feedId: string,
      importId: string,
      signal: AbortSignal,
    ) => Promise<ImportRecord | undefined>,
    private readonly logger: Logger,
  ) {}

  async dispatch(feedId: string, importId: string): Promise<void> {
    if (this.stopping.signal.aborted) return;
    this.pending += 1;
    this.tail = this.tail
      .then(() =>
        this.stopping.signal.aborted ? undefined : this.run(feedId, importId, this.stopping.signal),
      )
      .then(
        () => {
          this.crashes.delete(`${feedId}\n${importId}`);
          // "import finished" comes from the run that ended the import (runFeedJob's hook).
          if (importId === FEED_DELETION_JOB) this.logger.info('feed deletion finished', { feedId });
        },
        (error: unknown) => {
          const key = `${feedId}\n${importId}`;
          // Only failures in a row count: a pause or a deferral ends the run of them.
          if (error instanceof ImportDeferred || this.stopping.signal.aborted) this.crashes.delete(key);
          if (this.stopping.signal.aborted)
            this.logger.info(importId === FEED_DELETION_JOB ? 'feed deletion paused' : 'import paused', {
              feedId,
              importId,
            });
          else if (error instanceof ImportDeferred) {
            // The feed's lease is held (its deletion runs, which then drops the import): try again soon.
            this.logger.info('import deferred: feed busy', { feedId, importId });
            this.retryLater(feedId, importId, DEFERRED_RETRY_MS);
          } else {
            const runs = (this.crashes.get(key) ?? 0) + 1;
            const again = runs < CRASH_RUNS;
            if (again) this.crashes.set(key, runs);
            else this.crashes.delete(key);
            this.logger.error(importId === FEED_DELETION_JOB ? 'feed deletion crashed' : 'import crashed', {
              feedId,
              importId,
              ...errorFields(error),
              run: runs,
              ...(again ? { retryInMs: CRASH_RETRY_MS } : { givenUp: true }),
            });
            if (again) this.retryLater(feedId, importId, CRASH_RETRY_MS);
          }
        },
      )
      .finally(() => {
        this.pending -= 1;
      });
  }

  private retryLater(feedId: string, importId: string, delayMs: number): void {
    let done!: () => void;
    const waited = new Promise<void>((resolve) => (done = resolve));
    const timer = setTimeout(() => {
      this.retries.delete(timer);
      // dispatch() counts the import as pending before it returns, so idle() keeps waiting.
      void this.dispatch(feedId, importId).finally(done);
    }, delayMs);
    timer.unref();
    this.retries.set(timer, { waited, done });
  }

  /** Resolves when every dispatched import has finished (or paused), deferred ones included. */
  async idle(): Promise<void> {
    while (this.pending > 0 || this.retries.size > 0)
      await Promise.all([this.tail, ...[...this.retries.values()].map((retry) => retry.waited)]);
  }

  /** Pauses the running import at its next checkpoint, starts no more, and waits for that. */
  async stop(): Promise<void> {
    this.stopping.abort();
    for (const [timer, { done }] of this.retries) {
      clearTimeout(timer);
      done();
    }
    this.retries.clear();
    await this.idle();
  }
}

/**
 * AWS: nothing to do here. startImport writes the import's request marker to S3 and the bucket's event
 * notification (directly or through SQS) invokes functions/import-worker.ts.
 */
export class ObjectEventImportDispatcher implements ImportDispatcher {
  async dispatch(): Promise<void> {}
}
