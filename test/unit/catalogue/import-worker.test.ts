import type { SQSClient } from '@aws-sdk/client-sqs';
import type { S3Event, SQSEvent, SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  createTriggerQueue,
  DEFERRED_RETRY_SECONDS,
  importsOf,
  retryDelaySeconds,
  runImportEvent,
} from '#functions/import-worker.ts';
import { SqsTriggerQueue } from '#lib/adapters/sqs-trigger-queue.ts';
import { type ImportRecord, importObjectKeys } from '#lib/domain/catalogue/imports.ts';
import { importSourceFields, logImportEnd } from '#lib/ingest/feed-jobs.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { createLogger } from '#lib/log.ts';
import { FakeSqs } from '../../support/fake-sqs.ts';
import { recordingLogger } from '../../support/recording-logger.ts';
import { world } from './fakes.ts';

const s3Record = (key: string) => ({ s3: { object: { key } } }) as unknown as S3Event['Records'][number];

describe('import worker events', () => {
  it('takes imports from S3 notifications of request markers only', () => {
    // Prepare: the feed file itself also lands under imports/ and must not start a second run.
    const event = {
      Records: [s3Record('imports/shop/imp_1/request.json'), s3Record('imports/shop/imp_1/feed')],
    } as S3Event;
    // Act / Assess
    expect(importsOf(event)).toEqual([{ feedId: 'shop', importId: 'imp_1' }]);
  });

  it('unwraps S3 notifications delivered through SQS and accepts direct messages', () => {
    const viaSqs = {
      Records: [{ body: JSON.stringify({ Records: [s3Record('imports/a%2Db/imp_2/request.json')] }) }],
    } as SQSEvent;
    const direct = { Records: [{ body: JSON.stringify({ feedId: 'f', importId: 'imp_3' }) }] } as SQSEvent;
    const testEvent = { Records: [{ body: JSON.stringify({ Event: 's3:TestEvent' }) }] } as SQSEvent;
    expect(importsOf(viaSqs)).toEqual([{ feedId: 'a-b', importId: 'imp_2' }]);
    expect(importsOf(direct)).toEqual([{ feedId: 'f', importId: 'imp_3' }]);
    expect(importsOf(testEvent)).toEqual([]);
  });
});

const img = (id: string) => `https://cdn.example/${id}.jpg`;

/** Queues an import of `names` (JSON lines, one image each) for feed "shop" of `w`, dispatching nothing. */
function queueImport(w: ReturnType<typeof world>, names: string[], mode: 'full' | 'incremental') {
  const content = names
    .map((id) => JSON.stringify({ id, title: id, image_link: img(id), price: '1.00 USD' }))
    .join('\n');
  return startImport(
    {
      feeds: w.feeds,
      imports: w.imports,
      objects: w.objects,
      dispatcher: { dispatch: async () => undefined },
      clock: w.deps.clock,
    },
    'shop',
    { content, format: 'jsonl', mode },
  );
}

/** A world whose feed "shop" has a queued full import of `names`, its request marker not yet written. */
async function queuedImport(names: string[]) {
  const w = world(new Map(names.map((n) => [img(n), Buffer.from(`image ${n}`)])));
  const queued = await queueImport(w, names, 'full');
  const { request } = importObjectKeys('shop', queued.importId);
  await w.objects.delete(request);
  const container = { ingest: w.deps, objects: w.objects, logger: createLogger('silent') };
  const event = { Records: [s3Record(request)] } as S3Event;
  return { w, importId: queued.importId, request, container, event };
}

describe('import log lines', () => {
  it("name a URL source by its host alone: the URL's user, path and query may carry credentials", () => {
    expect(
      importSourceFields({ kind: 'url', url: 'https://user:secret@feeds.example:8443/f.xml?token=abc' }),
    ).toEqual({ source: 'url', sourceHost: 'feeds.example:8443' });
    expect(importSourceFields({ kind: 'url', url: 'not a url' })).toEqual({ source: 'url' });
    expect(importSourceFields({ kind: 'inline' })).toEqual({ source: 'inline' });
  });

  it('"import started": one per import the runner takes on, read from no extra store call', async () => {
    // Prepare: a second import queued behind the first; the trigger names the second, so the runner runs
    // both in order
    const { w, importId: first, container } = await queuedImport(['a']);
    const second = await queueImport(w, ['b'], 'incremental');
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    const reads = vi.spyOn(w.imports, 'get');
    // Hooks of the ingest dependencies' own are called beside the log lines, which they cannot cost by
    // throwing
    const hooked: string[] = [];
    w.deps.onStart = (record) => {
      hooked.push(`start ${record.importId}`);
      throw new Error('hook failed');
    };
    w.deps.onFinish = (record) => {
      hooked.push(`finish ${record.importId}`);
      throw new Error('hook failed');
    };
    const event = { Records: [s3Record(importObjectKeys('shop', second.importId).request)] } as S3Event;
    // Act
    await runImportEvent({ ...container, logger: recordingLogger(lines, { fields: true }) }, event);
    // Assess: both logged as they started, in the order they ran; the trigger's import read twice (whether
    // it exists, its record after the run) and each run's own load
    const starts = lines.filter((line) => line.message === 'import started').map((line) => line.fields);
    expect(starts).toEqual([
      { feedId: 'shop', importId: first, attempt: 1, mode: 'full', source: 'inline' },
      { feedId: 'shop', importId: second.importId, attempt: 1, mode: 'incremental', source: 'inline' },
    ]);
    expect(reads).toHaveBeenCalledTimes(4);
    expect(hooked).toEqual([
      `start ${first}`,
      `finish ${first}`,
      `start ${second.importId}`,
      `finish ${second.importId}`,
    ]);
    // ...and each one's end, once: the first's own trigger, and a repeated one, log none again
    const ends = () =>
      lines.filter((line) => line.message === 'import finished').map((line) => line.fields?.importId);
    expect(ends()).toEqual([first, second.importId]);
    const firstTrigger = { Records: [s3Record(importObjectKeys('shop', first).request)] } as S3Event;
    await runImportEvent({ ...container, logger: recordingLogger(lines, { fields: true }) }, firstTrigger);
    await runImportEvent({ ...container, logger: recordingLogger(lines, { fields: true }) }, event);
    expect(ends()).toEqual([first, second.importId]);
  });

  it('"import finished" names the import, its status, why it failed (reason), its counts and the run\'s ms', () => {
    // Prepare
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    const counts = { total: 3, processed: 3, embedded: 1, updated: 0, skipped: 1, failed: 1, removed: 0 };
    const record = { feedId: 'shop', importId: 'imp_1', status: 'failed', message: 'HTTP 403.', ...counts };
    // Act
    logImportEnd(recordingLogger(lines, { fields: true }), record as unknown as ImportRecord, 25);
    logImportEnd(
      recordingLogger(lines, { fields: true }),
      { ...record, status: 'succeeded', message: undefined } as unknown as ImportRecord,
      30,
    );
    // Assess
    expect(lines).toEqual([
      {
        level: 'warn',
        message: 'import finished',
        fields: {
          feedId: 'shop',
          importId: 'imp_1',
          status: 'failed',
          reason: 'HTTP 403.',
          ...counts,
          ms: 25,
        },
      },
      {
        level: 'info',
        message: 'import finished',
        fields: { feedId: 'shop', importId: 'imp_1', status: 'succeeded', ...counts, ms: 30 },
      },
    ]);
  });

  it('never fail the import: a logger that throws at "import started" or "finished" leaves it be', async () => {
    // Prepare
    const { w, importId, container, event } = await queuedImport(['a']);
    const lines: { level: string; message: string }[] = [];
    const logger = recordingLogger(lines);
    const info = logger.info;
    logger.info = (message, fields) => {
      if (message === 'import started' || message === 'import finished') throw new Error('stdout closed');
      info(message, fields);
    };
    // Act
    await runImportEvent({ ...container, logger }, event);
    // Assess
    expect((await w.imports.get('shop', importId))?.status).toBe('succeeded');
  });

  it('"import started" is not logged for a trigger deferred by a busy feed', async () => {
    // Prepare: another runner holds the feed's lease
    const { w, container, event } = await queuedImport(['a']);
    await w.imports.takeLease('shop', 'elsewhere', new Date(Date.now() + 60_000), new Date());
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    // Act
    await runImportEvent({ ...container, logger: recordingLogger(lines, { fields: true }) }, event).catch(
      () => undefined,
    );
    // Assess
    expect(lines.map((line) => line.message)).toContain('import deferred: feed busy');
    expect(lines.map((line) => line.message)).not.toContain('import started');
  });
});

describe('import worker time budget', () => {
  it('pauses an import before the function times out and writes its request marker again', async () => {
    // Prepare: 9 products in chunks of 3, each image 60 ms to fetch; the function has 300 ms left over
    // its margin
    const { w, importId, request, container, event } = await queuedImport(
      Array.from({ length: 9 }, (_, i) => `p${i}`),
    );
    w.deps.limits = { ...w.deps.limits, imageConcurrency: 1 };
    w.fetcher.before = () => new Promise((resolve) => setTimeout(resolve, 60));
    // Act
    const pausedLines: { level: string; message: string }[] = [];
    await runImportEvent({ ...container, logger: recordingLogger(pausedLines) }, event, 1300, 1000);
    // Assess: paused at a checkpoint (no end logged), and the marker that starts the next invocation is
    // there again
    expect(pausedLines.map((line) => line.message)).toContain('import started');
    expect(pausedLines.map((line) => line.message)).not.toContain('import finished');
    const paused = await w.imports.get('shop', importId);
    expect(paused?.status).toBe('running');
    expect(paused?.checkpointRow).toBeGreaterThan(0);
    expect(paused?.checkpointRow).toBeLessThan(9);
    expect(await w.objects.get(request)).toBeDefined();
    expect(w.imports.leases.size).toBe(0);
    // The next invocation finishes it
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    await runImportEvent({ ...container, logger: recordingLogger(lines, { fields: true }) }, event);
    expect((await w.imports.get('shop', importId))?.status).toBe('succeeded');
    expect(w.products.rows.size).toBe(9);
    // Logged: where it resumed, and its end at info with its counts
    expect(lines.find((line) => line.message === 'import started')?.fields).toMatchObject({
      importId,
      resumedAfterRow: paused?.checkpointRow,
    });
    expect(lines.find((line) => line.message === 'import finished')).toMatchObject({
      level: 'info',
      fields: { feedId: 'shop', importId, status: 'succeeded', total: 9, embedded: 9, failed: 0 },
    });
    expect(lines.find((line) => line.message === 'import finished')?.fields).not.toHaveProperty('reason');
  });

  it('pauses a long removal of unlisted products between batches', async () => {
    // Prepare: 2,000 products of an earlier import, which a full import of 3 removes 500 at a time,
    // 150 ms per batch; the pause is asked for 300 ms in
    const { w, importId, request, container, event } = await queuedImport(['a', 'b', 'c']);
    const earlier = Array.from({ length: 2000 }, (_, i) => ({
      feed_id: 'shop',
      product_id: `old${i}`,
      seen_import: 'imp_earlier',
      update_hash: 'x',
      group: `old${i}`,
    }));
    await w.products.putMany(earlier as never);
    const deleteMany = w.products.deleteMany.bind(w.products);
    w.products.deleteMany = async (feedId, ids) => {
      await new Promise((resolve) => setTimeout(resolve, 150));
      return deleteMany(feedId, ids);
    };
    // Act
    await runImportEvent(container, event, 1300, 1000);
    // Assess: paused part way through the removal, to be resumed by the marker's new invocation
    const paused = await w.imports.get('shop', importId);
    expect(paused?.status).toBe('running');
    expect(paused?.removed).toBeGreaterThan(0);
    expect(paused?.removed).toBeLessThan(2000);
    expect(await w.objects.get(request)).toBeDefined();
    await runImportEvent(container, event);
    expect(await w.imports.get('shop', importId)).toMatchObject({
      status: 'succeeded',
      removed: 2000,
    });
    // A pause that comes when nothing is left to run writes no marker
    await w.objects.delete(request);
    const takeLease = w.imports.takeLease.bind(w.imports);
    w.imports.takeLease = async (...args) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return takeLease(...args);
    };
    await runImportEvent(container, event, 0, 0);
    expect(await w.objects.get(request)).toBeUndefined();
  });
});

describe('import worker on SQS', () => {
  const sqs = new FakeSqs();
  let client: SQSClient;
  let time = 5_000_000;

  beforeAll(async () => {
    await sqs.start();
    sqs.now = () => time;
    client = sqs.client();
  });
  afterAll(async () => {
    client.destroy();
    await sqs.stop();
  });
  beforeEach(() => {
    sqs.messages.length = 0;
    sqs.calls.length = 0;
  });

  /** Lambda's SQS event source: the next visible message to the worker; deleted unless reported failed. */
  async function deliver(
    container: Parameters<typeof runImportEvent>[0],
  ): Promise<{ record: SQSRecord; failed: boolean }> {
    const record = sqs.receive();
    if (!record) throw new Error('No message is visible.');
    const { batchItemFailures } = await runImportEvent(container, { Records: [record] } as SQSEvent);
    const failed = batchItemFailures.some((failure) => failure.itemIdentifier === record.messageId);
    if (!failed) sqs.delete(record.receiptHandle);
    return { record, failed };
  }

  /** The S3 notification of a request marker, as the bucket sends it to the queue. */
  const notification = (key: string) => JSON.stringify({ Records: [s3Record(key)] });

  it('shows a failed trigger again after a back-off, until the runner ends the import failed', async () => {
    // Prepare: every product write fails (a store outage)
    const { w, importId, request, container } = await queuedImport(['a', 'b']);
    w.products.putMany = () => Promise.reject(new Error('DynamoDB is unavailable'));
    const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
    const triggers = new SqsTriggerQueue(client, sqs.queueUrl);
    const deps = { ...container, triggers, logger: recordingLogger(lines, { fields: true }) };
    sqs.send(notification(request));
    // Act / Assess: the first failure comes back after 2 minutes, not after the 90-minute visibility
    // timeout
    expect((await deliver(deps)).failed).toBe(true);
    time += 119_000;
    expect(sqs.receive()).toBeUndefined();
    time += 1_000;
    // ...the second after 30 minutes
    expect((await deliver(deps)).failed).toBe(true);
    time += retryDelaySeconds(2) * 1000 - 1;
    expect(sqs.receive()).toBeUndefined();
    time += 1;
    // The third run ends the import failed (the runner's count): the trigger is done
    const third = await deliver(deps);
    expect(third.record.attributes.ApproximateReceiveCount).toBe('3');
    expect(third.failed).toBe(false);
    expect(sqs.messages).toEqual([]);
    expect((await w.imports.get('shop', importId))?.status).toBe('failed');
    // Logged: each run's start (its attempt), each failed run with the import's ids and the error's
    // stack, and the end at warn with why and the counts
    const failedRuns = lines.filter((line) => line.message === 'import run failed');
    expect(failedRuns).toHaveLength(2);
    for (const line of failedRuns)
      expect(line.fields).toMatchObject({
        feedId: 'shop',
        importId,
        error: 'Error: DynamoDB is unavailable',
        stack: expect.stringContaining('DynamoDB is unavailable'),
      });
    const starts = lines.filter((line) => line.message === 'import started');
    expect(starts.map((line) => line.fields)).toEqual(
      [1, 2, 3].map((attempt) => ({ feedId: 'shop', importId, attempt, mode: 'full', source: 'inline' })),
    );
    const end = lines.find((line) => line.message === 'import finished');
    expect(end).toMatchObject({
      level: 'warn',
      fields: {
        feedId: 'shop',
        importId,
        status: 'failed',
        reason: expect.stringContaining('DynamoDB is unavailable'),
        total: expect.any(Number),
        failed: expect.any(Number),
        embedded: 0,
        ms: expect.any(Number),
      },
    });
    expect(sqs.calls.map((call) => [call.action, call.input.VisibilityTimeout, call.status])).toEqual([
      ['ChangeMessageVisibility', 120, 200],
      ['ChangeMessageVisibility', 1800, 200],
    ]);
  });

  it('sends a trigger whose feed is busy again as a new message, not as a failed receive', async () => {
    // Prepare: another runner holds the feed's lease
    const { w, importId, request, container } = await queuedImport(['a']);
    const until = new Date(w.deps.clock.now().getTime() + 600_000);
    w.imports.leases.set('shop', { owner: 'another runner', until });
    const deps = { ...container, triggers: new SqsTriggerQueue(client, sqs.queueUrl) };
    sqs.send(notification(request));
    // Act
    const deferred = await deliver(deps);
    // Assess: done as far as the queue is concerned; a new message comes in a minute, a first receive
    expect(deferred.failed).toBe(false);
    expect(sqs.messages).toHaveLength(1);
    expect(sqs.messages[0]!.messageId).not.toBe(deferred.record.messageId);
    time += DEFERRED_RETRY_SECONDS * 1000 - 1;
    expect(sqs.receive()).toBeUndefined();
    time += 1;
    w.imports.leases.delete('shop');
    const again = await deliver(deps);
    expect(again.record.attributes.ApproximateReceiveCount).toBe('1');
    expect(again.failed).toBe(false);
    expect((await w.imports.get('shop', importId))?.status).toBe('succeeded');
    expect(sqs.calls.map((call) => [call.action, call.input.DelaySeconds])).toEqual([
      ['SendMessage', DEFERRED_RETRY_SECONDS],
    ]);
  });

  it('still reports a failed trigger when its back-off cannot be set', async () => {
    const { w, request, container } = await queuedImport(['a']);
    w.products.putMany = () => Promise.reject(new Error('DynamoDB is unavailable'));
    const lines: { level: string; message: string }[] = [];
    // A queue that refuses the call: the message comes back after its visibility timeout instead
    const triggers = new SqsTriggerQueue(client, `${sqs.queueUrl}-gone`);
    sqs.send(notification(request));
    const { failed, record } = await deliver({ ...container, triggers, logger: recordingLogger(lines) });
    expect(failed).toBe(true);
    expect(lines.map((line) => line.message)).toContain(
      'import retry back-off not set: the message returns after the visibility timeout',
    );
    sqs.delete(record.receiptHandle);
  });

  it('keeps a busy trigger as a failed receive when it cannot be sent again', async () => {
    // Prepare: the feed is busy and the queue refuses the new message (a delay over its 15 minutes)
    const { w, request, container } = await queuedImport(['a']);
    w.imports.leases.set('shop', { owner: 'another runner', until: new Date(Date.now() + 600_000) });
    const triggers = new SqsTriggerQueue(client, sqs.queueUrl);
    triggers.sendIn = (body) => SqsTriggerQueue.prototype.sendIn.call(triggers, body, 901);
    sqs.send(notification(request));
    // Act / Assess: not lost, shown again after the back-off
    const { failed } = await deliver({ ...container, triggers });
    expect(failed).toBe(true);
    expect(sqs.messages).toHaveLength(1);
    expect(sqs.calls.map((call) => [call.action, call.status])).toEqual([
      ['SendMessage', 400],
      ['ChangeMessageVisibility', 200],
    ]);
  });

  it('retries a message it cannot read, as the dead-letter queue then keeps it', async () => {
    const { container } = await queuedImport(['a']);
    sqs.send('not json');
    const triggers = new SqsTriggerQueue(client, sqs.queueUrl);
    expect((await deliver({ ...container, triggers })).failed).toBe(true);
    expect(sqs.calls.map((call) => call.action)).toEqual(['ChangeMessageVisibility']);
  });

  it('builds its queue from IMPORT_QUEUE_URL alone, the SDK calling the queue URL', async () => {
    // The handler's queue, as in AWS: no endpoint, credentials from the environment
    vi.stubEnv('AWS_ACCESS_KEY_ID', 'test');
    vi.stubEnv('AWS_SECRET_ACCESS_KEY', 'test');
    try {
      const imports = { queueUrl: sqs.queueUrl } as Parameters<typeof createTriggerQueue>[0]['imports'];
      const triggers = (await createTriggerQueue({ region: 'eu-west-1', imports }))!;
      await triggers.sendIn('{"feedId":"shop","importId":"imp_9"}', 0);
      expect(sqs.messages.map((message) => message.body)).toEqual(['{"feedId":"shop","importId":"imp_9"}']);
      const none = { queueUrl: undefined } as Parameters<typeof createTriggerQueue>[0]['imports'];
      expect(await createTriggerQueue({ region: 'eu-west-1', imports: none })).toBeUndefined();
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('throws without a trigger queue (and for S3 events), leaving the retry to Lambda', async () => {
    const { w, container, event, request } = await queuedImport(['a']);
    w.imports.leases.set('shop', { owner: 'another runner', until: new Date(Date.now() + 600_000) });
    await expect(runImportEvent(container, event)).rejects.toThrow(/run elsewhere/);
    // An S3 event delivered directly has no message to retry, queue or not
    const triggers = new SqsTriggerQueue(client, sqs.queueUrl);
    await expect(runImportEvent({ ...container, triggers }, event)).rejects.toThrow(/run elsewhere/);
    const viaSqs = { Records: [{ messageId: 'm', receiptHandle: 'r', body: notification(request) }] };
    await expect(runImportEvent(container, viaSqs as SQSEvent)).rejects.toThrow(/run elsewhere/);
  });
});
