import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { Logger } from '#lib/log.ts';
import type { ImportDispatcher } from '#lib/ports.ts';

/**
 * Local mode: runs imports in this process, in the background, one at a time (two imports of one feed
 * must not interleave their removal of unseen products). `idle()` resolves once the queue is empty.
 */
export class InProcessImportDispatcher implements ImportDispatcher {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;

  constructor(
    private readonly run: (feedId: string, importId: string) => Promise<ImportRecord>,
    private readonly logger: Logger,
  ) {}

  async dispatch(feedId: string, importId: string): Promise<void> {
    this.pending += 1;
    this.tail = this.tail
      .then(() => this.run(feedId, importId))
      .then(
        (record) =>
          this.logger.info('import finished', {
            feedId,
            importId,
            status: record.status,
            processed: record.processed,
          }),
        (error: unknown) =>
          this.logger.error('import crashed', {
            feedId,
            importId,
            error: error instanceof Error ? error.message : String(error),
          }),
      )
      .finally(() => {
        this.pending -= 1;
      });
  }

  /** Resolves when every dispatched import has finished. */
  async idle(): Promise<void> {
    while (this.pending > 0) await this.tail;
  }
}

/**
 * AWS: nothing to do here. startImport writes the import's request marker to S3 and the bucket's event
 * notification (directly or through SQS) invokes functions/import-worker.ts.
 */
export class ObjectEventImportDispatcher implements ImportDispatcher {
  async dispatch(): Promise<void> {}
}
