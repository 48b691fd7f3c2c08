import type { S3Event, SQSEvent } from 'aws-lambda';
import { getContainer } from '#lib/container.ts';
import { importOfRequestKey } from '#lib/domain/catalogue/imports.ts';
import { ImportDeferred, runTriggeredImport } from '#lib/ingest/run-import.ts';

type WorkerEvent = S3Event | SQSEvent;

/** Imports named by the event: S3 notifications for `imports/{feedId}/{importId}/request.json`, direct or via SQS. */
export function importsOf(event: WorkerEvent): { feedId: string; importId: string }[] {
  const found: { feedId: string; importId: string }[] = [];
  for (const record of event.Records as (S3Event['Records'][number] | SQSEvent['Records'][number])[]) {
    if ('s3' in record) {
      const ref = importOfRequestKey(record.s3.object.key);
      if (ref) found.push(ref);
    } else if ('body' in record) {
      const body = JSON.parse(record.body) as Partial<S3Event> & { feedId?: string; importId?: string };
      if (body.feedId && body.importId) found.push({ feedId: body.feedId, importId: body.importId });
      else if (body.Records) found.push(...importsOf(body as S3Event));
    }
  }
  return found;
}

/**
 * The import worker (AWS): runs or resumes each import the event names. A crash or timeout leaves the
 * import's checkpoint behind; the redelivered event resumes after it without duplicating products.
 */
export async function handler(event: WorkerEvent): Promise<void> {
  const c = getContainer();
  for (const { feedId, importId } of importsOf(event)) {
    const record = await runTriggeredImport(c.ingest, feedId, importId).catch((error: unknown) => {
      // Another runner (or the feed's deletion) holds the feed: the event is delivered again later, and
      // finds the import run by then, or the holder's lease expired.
      if (error instanceof ImportDeferred) c.logger.info('import deferred: feed busy', { feedId, importId });
      throw error;
    });
    c.logger.info(record ? 'import finished' : 'import trigger dropped: no such import', {
      feedId,
      importId,
      status: record?.status,
      processed: record?.processed,
    });
  }
}
