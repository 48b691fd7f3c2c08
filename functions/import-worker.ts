import type { S3Event, SQSEvent } from 'aws-lambda';
import { type Container, feedAdminDeps, getContainer } from '#lib/container.ts';
import type { FeedAdminDeps } from '#lib/domain/admin/feeds.ts';
import {
  FEED_DELETION_JOB,
  type ImportRecord,
  importObjectKeys,
  importOfRequestKey,
} from '#lib/domain/catalogue/imports.ts';
import { runFeedJob } from '#lib/ingest/feed-jobs.ts';
import { ImportDeferred } from '#lib/ingest/run-import.ts';

type WorkerEvent = S3Event | SQSEvent;

/**
 * Jobs named by the event: S3 notifications for `imports/{feedId}/{importId}/request.json`, direct or via
 * SQS; the import id is FEED_DELETION_JOB for a feed deletion its DELETE request handed over.
 */
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
export async function handler(
  event: WorkerEvent,
  context?: { getRemainingTimeInMillis(): number },
): Promise<void> {
  const c = getContainer();
  await runImportEvent({ ...c, admin: feedAdminDeps(c) }, event, context?.getRemainingTimeInMillis());
}

/** Time kept back from the function's timeout: a chunk in flight finishes and the import pauses. */
export const PAUSE_MARGIN_MS = 120_000;

/**
 * Runs the event's imports within `remainingMs`: once only `marginMs` are left, the running import pauses
 * at its next checkpoint and its request marker is written again, whose S3 event starts a new invocation
 * that resumes it. (Running into the timeout instead would leave it to the queue's redelivery, 90 minutes
 * later, and an import needing more than three invocations would end in the dead-letter queue.)
 */
export async function runImportEvent(
  c: Pick<Container, 'ingest' | 'objects' | 'logger'> & { admin?: FeedAdminDeps },
  event: WorkerEvent,
  remainingMs = Number.POSITIVE_INFINITY,
  marginMs = PAUSE_MARGIN_MS,
): Promise<void> {
  const pause = new AbortController();
  const timer = Number.isFinite(remainingMs)
    ? setTimeout(() => pause.abort(), Math.max(0, remainingMs - marginMs))
    : undefined;
  try {
    for (const { feedId, importId } of importsOf(event)) {
      let record: ImportRecord | undefined;
      try {
        record = await runFeedJob(c, feedId, importId, pause.signal);
      } catch (error) {
        if (pause.signal.aborted) {
          // Only when something is left to run (the pause may come as the last import finishes; a paused
          // deletion has always something left).
          const left =
            importId === FEED_DELETION_JOB || (await c.ingest.imports.listUnfinished(feedId)).length > 0;
          if (left) {
            const { request } = importObjectKeys(feedId, importId);
            await c.objects.put(request, JSON.stringify({ feedId, importId }), 'application/json');
            c.logger.info('paused: continues in a new invocation', { feedId, importId });
          }
          continue;
        }
        // Another runner (or the feed's deletion) holds the feed: the event is delivered again later,
        // and finds the import run by then, or the holder's lease expired.
        if (error instanceof ImportDeferred)
          c.logger.info('import deferred: feed busy', { feedId, importId });
        throw error;
      }
      if (importId === FEED_DELETION_JOB) {
        c.logger.info('feed deletion finished', { feedId });
        continue;
      }
      c.logger.info(record ? 'import finished' : 'import trigger dropped: no such import', {
        feedId,
        importId,
        status: record?.status,
        processed: record?.processed,
      });
    }
  } finally {
    clearTimeout(timer);
  }
}
