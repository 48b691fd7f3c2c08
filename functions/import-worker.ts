import type { S3Event, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import type { Config } from '#lib/config.ts';
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
import { errorFields } from '#lib/log.ts';
import type { TriggerQueue } from '#lib/ports.ts';

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
): Promise<SQSBatchResponse> {
  const c = getContainer();
  let triggers = triggerQueues.get(c);
  if (!triggers) {
    triggers = createTriggerQueue(c.config).catch((error: unknown) => {
      triggerQueues.delete(c);
      throw error;
    });
    triggerQueues.set(c, triggers);
  }
  return runImportEvent(
    { ...c, admin: feedAdminDeps(c), triggers: await triggers },
    event,
    context?.getRemainingTimeInMillis(),
  );
}

/** The trigger queue of each container, built once (a failed build is tried again). */
const triggerQueues = new WeakMap<Container, Promise<TriggerQueue | undefined>>();

/**
 * The worker's queue (IMPORT_QUEUE_URL), none without it. The SQS client loads only here: no other
 * function bundles it.
 */
export async function createTriggerQueue(
  config: Pick<Config, 'region' | 'imports'>,
): Promise<TriggerQueue | undefined> {
  const url = config.imports.queueUrl;
  if (!url) return undefined;
  const [{ SQSClient }, { SqsTriggerQueue }] = await Promise.all([
    import('@aws-sdk/client-sqs'),
    import('#lib/adapters/sqs-trigger-queue.ts'),
  ]);
  return new SqsTriggerQueue(new SQSClient({ region: config.region }), url);
}

/** Time kept back from the function's timeout: a chunk in flight finishes and the import pauses. */
export const PAUSE_MARGIN_MS = 120_000;

/** How soon a trigger deferred by a busy feed is delivered again (as a new message). */
export const DEFERRED_RETRY_SECONDS = 60;

/**
 * How long a trigger whose run failed stays invisible, by the number of times it was received: 2 minutes,
 * then 30 (and an hour before the queue moves it to the dead-letter queue, at its fourth receive: its
 * maxReceiveCount is 3). The runner ends an import `failed` at its third failed run in a row, so an import
 * lives through about half an hour of store outage, each retry coming soon after the cause may be gone
 * (with the queue's 90-minute visibility timeout alone, retries came 90 minutes apart).
 */
export function retryDelaySeconds(receiveCount: number): number {
  return [120, 1800][receiveCount - 1] ?? 3600;
}

type WorkerDeps = Pick<Container, 'ingest' | 'objects' | 'logger'> & {
  admin?: FeedAdminDeps;
  /** The trigger queue; without it a failed or deferred SQS message waits out its visibility timeout. */
  triggers?: TriggerQueue | undefined;
};

/**
 * Runs the event's imports within `remainingMs`: once only `marginMs` are left, the running import pauses
 * at its next checkpoint and its request marker is written again, whose S3 event starts a new invocation
 * that resumes it. (Running into the timeout instead would leave it to the queue's redelivery, 90 minutes
 * later, and an import needing more than three invocations would end in the dead-letter queue.)
 *
 * An SQS message whose run failed is reported in `batchItemFailures` (the event source keeps it) and
 * shown again after retryDelaySeconds; one whose feed was busy is sent again as a new message and
 * reported done. Without a trigger queue, and for S3 events delivered directly, a failure is thrown.
 */
export async function runImportEvent(
  c: WorkerDeps,
  event: WorkerEvent,
  remainingMs = Number.POSITIVE_INFINITY,
  marginMs = PAUSE_MARGIN_MS,
): Promise<SQSBatchResponse> {
  const pause = new AbortController();
  const timer = Number.isFinite(remainingMs)
    ? setTimeout(() => pause.abort(), Math.max(0, remainingMs - marginMs))
    : undefined;
  const batchItemFailures: SQSBatchResponse['batchItemFailures'] = [];
  try {
    for (const record of event.Records as WorkerRecord[]) {
      const message = 'receiptHandle' in record && c.triggers ? record : undefined;
      let job: { feedId: string; importId: string } | undefined;
      try {
        for (job of importsOf({ Records: [record] } as WorkerEvent))
          await runJob(c, job, pause.signal, message && c.triggers);
      } catch (error) {
        if (!message || !c.triggers) throw error;
        await retryLater(c, c.triggers, message, error, job);
        batchItemFailures.push({ itemIdentifier: message.messageId });
      }
    }
  } finally {
    clearTimeout(timer);
  }
  return { batchItemFailures };
}

type WorkerRecord = S3Event['Records'][number] | SQSRecord;

/** One job of a trigger; a deferral is sent again through `requeue` when there is one, else thrown. */
async function runJob(
  c: WorkerDeps,
  { feedId, importId }: { feedId: string; importId: string },
  signal: AbortSignal,
  requeue: TriggerQueue | undefined,
): Promise<void> {
  let record: ImportRecord | undefined;
  try {
    record = await runFeedJob(c, feedId, importId, signal);
  } catch (error) {
    if (signal.aborted) {
      // Only when something is left to run (the pause may come as the last import finishes; a paused
      // deletion has always something left).
      const left =
        importId === FEED_DELETION_JOB || (await c.ingest.imports.listUnfinished(feedId)).length > 0;
      if (left) {
        const { request } = importObjectKeys(feedId, importId);
        await c.objects.put(request, JSON.stringify({ feedId, importId }), 'application/json');
        c.logger.info('paused: continues in a new invocation', { feedId, importId });
      }
      return;
    }
    // Another runner (or the feed's deletion) holds the feed: the trigger comes back later and finds the
    // import run by then, or the holder's lease expired.
    if (!(error instanceof ImportDeferred)) throw error;
    if (!requeue) {
      c.logger.info('import deferred: feed busy', { feedId, importId });
      throw error;
    }
    await requeue.sendIn(JSON.stringify({ feedId, importId }), DEFERRED_RETRY_SECONDS);
    c.logger.info('import deferred: feed busy', { feedId, importId, retryInSeconds: DEFERRED_RETRY_SECONDS });
    return;
  }
  if (importId === FEED_DELETION_JOB) {
    c.logger.info('feed deletion finished', { feedId });
    return;
  }
  // "import finished" came from the run that ended it (runFeedJob's hook), once per import.
  if (!record) c.logger.info('import trigger dropped: no such import', { feedId, importId });
}

/**
 * Logs a failed SQS message and shows it again after retryDelaySeconds. Best effort: when the back-off
 * cannot be set, the message comes back after the visibility timeout as before.
 */
async function retryLater(
  c: WorkerDeps,
  triggers: TriggerQueue,
  message: SQSRecord,
  error: unknown,
  job: { feedId: string; importId: string } | undefined,
): Promise<void> {
  const receiveCount = Number(message.attributes?.ApproximateReceiveCount) || 1;
  const seconds = retryDelaySeconds(receiveCount);
  c.logger.error('import run failed', {
    ...job,
    messageId: message.messageId,
    receiveCount,
    ...errorFields(error),
    retryInSeconds: seconds,
  });
  try {
    await triggers.retryIn(message.receiptHandle, seconds);
  } catch (backoffError) {
    c.logger.warn('import retry back-off not set: the message returns after the visibility timeout', {
      ...job,
      messageId: message.messageId,
      ...errorFields(backoffError),
    });
  }
}
