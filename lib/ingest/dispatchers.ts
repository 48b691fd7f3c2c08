import { FEED_DELETION_JOB, type ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { Logger } from '#lib/log.ts';
import type { ImportDispatcher } from '#lib/ports.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';

/** How soon a deferred import is dispatched again. */
const DEFERRED_RETRY_MS = 2000;

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
        (record) => {
          if (importId === FEED_DELETION_JOB) this.logger.info('feed deletion finished', { feedId });
          else if (record)
            this.logger.info('import finished', {
              feedId,
              importId,
              status: record.status,
              processed: record.processed,
            });
        },
        (error: unknown) => {
          if (this.stopping.signal.aborted)
            this.logger.info(importId === FEED_DELETION_JOB ? 'feed deletion paused' : 'import paused', {
              feedId,
              importId,
            });
          else if (error instanceof ImportDeferred) {
            // The feed's lease is held (its deletion runs, which then drops the import): try again soon.
            this.logger.info('import deferred: feed busy', { feedId, importId });
            this.retryLater(feedId, importId);
          } else
            this.logger.error('import crashed', {
              feedId,
              importId,
              error: error instanceof Error ? error.message : String(error),
            });
        },
      )
      .finally(() => {
        this.pending -= 1;
      });
  }

  private retryLater(feedId: string, importId: string): void {
    let done!: () => void;
    const waited = new Promise<void>((resolve) => (done = resolve));
    const timer = setTimeout(() => {
      this.retries.delete(timer);
      // dispatch() counts the import as pending before it returns, so idle() keeps waiting.
      void this.dispatch(feedId, importId).finally(done);
    }, DEFERRED_RETRY_MS);
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
