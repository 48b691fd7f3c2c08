import { mkdtemp, readdir, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateMultipartUploadCommand, UploadPartCommand } from '@aws-sdk/client-s3';
import { GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDocumentClient, writeBatches } from '#lib/adapters/dynamodb-client.ts';
import type { Config } from '#lib/config.ts';
import { createLogger } from '#lib/log.ts';
import { startLocalStack } from '#lib/local/stack.ts';
import { createS3Client } from '#lib/adapters/s3-object-store.ts';
import { sweepBucketLifecycle } from '#lib/local/bucket-lifecycle.ts';
import { startTtlSweeper, sweepExpired } from '#lib/local/ttl-sweeper.ts';
import { feedStoresOf, startTestStores } from '#test/support/embedded-stores.ts';

/** DynamoDB's TTL in local mode: the embedded server keeps every item, so local mode removes expired ones. */
let config: Config;
let stop: () => Promise<void>;

beforeAll(async () => {
  ({ config, stop } = await startTestStores());
});

afterAll(async () => {
  await stop?.();
});

const NOW = 1_800_000_000;
const DAY_MS = 86_400_000;

describe('sweepExpired', () => {
  it('removes the items whose expiry has passed from every TTL table, and keeps the others', async () => {
    // Prepare: usage items expired, expiring later, with no expiry or a text one; an expired idempotency
    // answer; a feed (a table without TTL) with an expiresAt-named attribute
    const db = createDocumentClient(config);
    const put = (table: string, item: Record<string, unknown>) =>
      db.send(new PutCommand({ TableName: table, Item: item }));
    await put(config.tables.usage, { pk: 'rate#a', sk: '5m#1', count: 3, expiresAt: NOW - 1 });
    await put(config.tables.usage, { pk: 'rate#a', sk: '5m#2', count: 3, expiresAt: NOW + 1 });
    await put(config.tables.usage, { pk: 'rate#a', sk: '5m#3', count: 3, expiresAt: NOW });
    await put(config.tables.usage, { pk: 'feed#f', sk: 'day', requests: 1 });
    await put(config.tables.usage, { pk: 'feed#f', sk: 'text', requests: 1, expiresAt: '1' });
    await put(config.tables.idempotency, { idempotencyKey: 'k', expiresAt: NOW - 86_400 });
    await put(config.tables.feeds, { feedId: 'f', expiresAt: NOW - 1 });
    const has = async (table: string, key: Record<string, string>) =>
      (await db.send(new GetCommand({ TableName: table, Key: key, ConsistentRead: true }))).Item !==
      undefined;

    // Act
    const removed = await sweepExpired(db, config, NOW);

    // Assess: as DynamoDB's TTL, only numbers of epoch seconds before now
    expect(removed).toBe(2);
    expect(await has(config.tables.usage, { pk: 'rate#a', sk: '5m#1' })).toBe(false);
    expect(await has(config.tables.idempotency, { idempotencyKey: 'k' })).toBe(false);
    for (const sk of ['5m#2', '5m#3'])
      expect(await has(config.tables.usage, { pk: 'rate#a', sk })).toBe(true);
    for (const sk of ['day', 'text']) expect(await has(config.tables.usage, { pk: 'feed#f', sk })).toBe(true);
    expect(await has(config.tables.feeds, { feedId: 'f' })).toBe(true);
  });

  it('keeps an item renewed between its scan and its deletion', async () => {
    // Prepare: an expired usage row, renewed (counted again) just before the sweep deletes it
    const db = createDocumentClient(config);
    await db.send(
      new PutCommand({
        TableName: config.tables.usage,
        Item: { pk: 'feed#r', sk: 'row', requests: 1, expiresAt: NOW - 5 },
      }),
    );
    const send = db.send.bind(db);
    db.send = (async (command: { constructor: { name: string } }, ...rest: unknown[]) => {
      if (command.constructor.name === 'DeleteCommand')
        await send(
          new UpdateCommand({
            TableName: config.tables.usage,
            Key: { pk: 'feed#r', sk: 'row' },
            UpdateExpression: 'ADD requests :one SET expiresAt = :later',
            ExpressionAttributeValues: { ':one': 1, ':later': NOW + 86_400 },
          }),
        );
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    }) as typeof db.send;

    // Act
    const removed = await sweepExpired(db, config, NOW);

    // Assess
    expect(removed).toBe(0);
    const row = await send(
      new GetCommand({
        TableName: config.tables.usage,
        Key: { pk: 'feed#r', sk: 'row' },
        ConsistentRead: true,
      }),
    );
    expect(row.Item).toMatchObject({ requests: 2 });
  });
});

describe('sweepBucketLifecycle', () => {
  it("applies the bucket's lifecycle rules: uploads a day after their last part, imports/ after 30 days", async () => {
    // Prepare: two feed files and a request marker, one import's a month old; a features object as old;
    // two multipart uploads s3rver keeps (it refuses to abort them), one left two days ago
    const { objects } = feedStoresOf(config);
    const bucketDir = join(config.local.dataDir, 's3', config.assetsBucket);
    const keys = [
      'imports/f/imp_old/feed.csv',
      'imports/f/imp_old/request.json',
      'imports/f/imp_new/feed.csv',
    ];
    for (const key of [...keys, 'features/f/p/0']) await objects.put(key, 'x');
    const now = Date.now();
    const aged = (path: string, days: number) =>
      utimes(path, (now - days * DAY_MS) / 1000, (now - days * DAY_MS) / 1000);
    for (const key of [keys[0]!, keys[1]!, 'features/f/p/0'])
      await aged(join(bucketDir, `${key}._S3rver_object`), 31);
    const s3 = createS3Client(config);
    const uploadIds: string[] = [];
    for (const key of ['imports/f/imp_a/feed.csv', 'imports/f/imp_b/feed.csv']) {
      const { UploadId } = await s3.send(
        new CreateMultipartUploadCommand({ Bucket: config.assetsBucket, Key: key }),
      );
      await s3.send(
        new UploadPartCommand({
          Bucket: config.assetsBucket,
          Key: key,
          UploadId,
          PartNumber: 1,
          Body: 'part',
        }),
      );
      uploadIds.push(UploadId!);
    }
    const uploads = join(bucketDir, '._S3rver_uploads');
    expect((await readdir(uploads)).sort()).toEqual([...uploadIds].sort());
    await aged(join(uploads, uploadIds[0]!), 2);

    // Act
    const removed = await sweepBucketLifecycle({ bucketDir, objects, nowMs: now });

    // Assess: the old import's two objects and the old upload; the rest kept, s3rver still listing them
    expect(removed).toBe(3);
    expect(await objects.list('imports/')).toEqual(['imports/f/imp_new/feed.csv']);
    expect(await objects.get('features/f/p/0')).toEqual(Buffer.from('x'));
    expect(await readdir(uploads)).toEqual([uploadIds[1]]);
    s3.destroy();
  });
});

describe('startTtlSweeper', () => {
  it('sweeps at start and then on its timer, with the clock it is given', async () => {
    const db = createDocumentClient(config);
    let now = (NOW + 1_000_000) * 1000;
    const expiring = (sk: string, at: number) =>
      db.send(new PutCommand({ TableName: config.tables.usage, Item: { pk: 'rate#t', sk, expiresAt: at } }));
    await expiring('first', NOW + 1_000_000 - 1);
    const sweeper = startTtlSweeper(db, config, {
      logger: createLogger('silent'),
      now: () => now,
      everyMs: 50,
    });
    try {
      await expect.poll(() => exists('first'), { timeout: 5000 }).toBe(false);
      await expiring('second', NOW + 2_000_000 - 1);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await exists('second')).toBe(true);
      now = (NOW + 2_000_000) * 1000;
      await expect.poll(() => exists('second'), { timeout: 5000 }).toBe(false);
    } finally {
      await sweeper.stop();
    }

    async function exists(sk: string) {
      const out = await db.send(
        new GetCommand({ TableName: config.tables.usage, Key: { pk: 'rate#t', sk }, ConsistentRead: true }),
      );
      return out.Item !== undefined;
    }
  });

  it('stops a sweep in progress between two deletes, without waiting for the rest', async () => {
    // Prepare: 600 expired buckets (an old data folder's first sweep); a client that counts deletes
    const db = createDocumentClient(config);
    await writeBatches(
      db,
      config.tables.usage,
      Array.from({ length: 600 }, (_, i) => ({
        PutRequest: { Item: { pk: 'rate#old', sk: `5m#${i}`, count: 1, expiresAt: NOW - 1 } },
      })),
    );
    let deletes = 0;
    let stopped: Promise<void> | undefined;
    const send = db.send.bind(db);
    const sweeper = startTtlSweeper(
      Object.assign(Object.create(db) as typeof db, {
        send: (command: { constructor: { name: string } }, ...rest: unknown[]) => {
          if (command.constructor.name === 'DeleteCommand' && (deletes += 1) === 10) stopped = sweeper.stop();
          return (send as (...args: unknown[]) => unknown)(command, ...rest);
        },
      }),
      config,
      { logger: createLogger('silent'), now: () => NOW * 1000 },
    );
    // Act
    await expect.poll(() => stopped !== undefined, { timeout: 10_000 }).toBe(true);
    await stopped;
    // Assess: the deletes in flight when it stopped, no more
    expect(deletes).toBeLessThanOrEqual(10 + 3);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(deletes).toBeLessThanOrEqual(10 + 3);
  });

  it('runs in npm start: an expired rate bucket and a month-old feed file are gone after a restart', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'vps-ttl-'));
    const env = { ...process.env, LOG_LEVEL: 'silent', PORT: '0', DATA_DIR: dataDir, DEMO_SEED: 'false' };
    try {
      const first = await startLocalStack(env);
      const db = createDocumentClient(first.config);
      const key = { pk: 'rate#vps_old', sk: '5m#000001700000000000' };
      await db.send(
        new PutCommand({
          TableName: first.config.tables.usage,
          Item: { ...key, count: 1, expiresAt: 1_700_007_200 },
        }),
      );
      const feedFile = 'imports/f/imp_old/feed.csv';
      await first.container.objects.put(feedFile, 'id,title');
      await first.close();
      const monthAgo = (Date.now() - 31 * DAY_MS) / 1000;
      await utimes(
        join(dataDir, 's3', first.config.assetsBucket, `${feedFile}._S3rver_object`),
        monthAgo,
        monthAgo,
      );
      const again = await startLocalStack(env);
      try {
        const stored = createDocumentClient(again.config);
        const get = () =>
          stored.send(
            new GetCommand({ TableName: again.config.tables.usage, Key: key, ConsistentRead: true }),
          );
        await expect.poll(async () => (await get()).Item, { timeout: 10_000 }).toBeUndefined();
        await again.expiredSwept();
        expect(await again.container.objects.get(feedFile)).toBeUndefined();
      } finally {
        await again.close();
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
