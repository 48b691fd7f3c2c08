import { DeleteCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed, scanPages } from '#lib/adapters/dynamodb-client.ts';
import { TABLES, type TableDefinition } from '#lib/adapters/dynamodb-tables.ts';
import type { Config } from '#lib/config.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import { sweepBucketLifecycle } from '#lib/local/bucket-lifecycle.ts';
import type { Logger } from '#lib/log.ts';
import type { ObjectStore } from '#lib/ports.ts';

/** How often local mode removes expired items (DynamoDB's own TTL deletes within a day or two). */
export const TTL_SWEEP_EVERY_MS = 60 * 60_000;

export interface TtlSweeper {
  /** Removes the items (and objects) expired now; resolves with how many it removed. */
  sweep(): Promise<number>;
  /** Resolves once the sweep in progress, if any (the one at start), has ended. */
  idle(): Promise<void>;
  /** Stops the timer and a sweep in progress (between two deletes), and waits for that. */
  stop(): Promise<void>;
}

/**
 * DynamoDB's TTL for local mode, where the embedded server (dynalite) keeps every item: the tables with a
 * TTL attribute (rate-limit buckets, usage rows, idempotency answers) lose the items whose epoch-seconds
 * expiry has passed, at start and then every TTL_SWEEP_EVERY_MS. Without it they only grew (288 rate
 * buckets a day per search id in use). Each delete is conditional on the expiry it read, so an item a
 * request renewed meanwhile (a usage row counted again) stays. Readers already treat expired items as
 * absent, as they must in AWS, where deletion lags the expiry. With `bucket`, the assets bucket's
 * lifecycle rules are applied at the same times (lib/local/bucket-lifecycle.ts).
 */
export function startTtlSweeper(
  db: DynamoDBDocumentClient,
  config: Pick<Config, 'tables'>,
  options: {
    logger: Logger;
    now?: () => number;
    everyMs?: number;
    bucket?: { dir: string; objects: ObjectStore };
  },
): TtlSweeper {
  const now = options.now ?? Date.now;
  const stopping = new AbortController();
  let running: Promise<number> | undefined;
  const sweepAll = async () => {
    const nowMs = now();
    const items = await sweepExpired(db, config, Math.floor(nowMs / 1000), stopping.signal);
    const { bucket } = options;
    const objects = bucket
      ? await sweepBucketLifecycle({
          bucketDir: bucket.dir,
          objects: bucket.objects,
          nowMs,
          signal: stopping.signal,
        })
      : 0;
    return { items, objects };
  };
  const sweep = () => {
    running ??= sweepAll()
      .then(
        ({ items, objects }) => {
          // (A stop ends a sweep part way: the rest goes at the next start.)
          const stopped = stopping.signal.aborted ? { stopped: true } : {};
          if (items + objects > 0)
            options.logger.info('expired items removed', { removed: items, objects, ...stopped });
          return items + objects;
        },
        (error: unknown) => {
          options.logger.warn('expired items not removed', { error: String(error) });
          return 0;
        },
      )
      .finally(() => (running = undefined));
    return running;
  };
  void sweep();
  const timer = setInterval(() => void sweep(), options.everyMs ?? TTL_SWEEP_EVERY_MS);
  timer.unref();
  return {
    sweep,
    async idle() {
      await running;
    },
    async stop() {
      clearInterval(timer);
      stopping.abort();
      await running;
    },
  };
}

/**
 * Deletes the items of every TTL table whose expiry is before `nowSeconds`; `signal` stops it between two
 * deletes (a first sweep of an old data folder may have many: a stop must not wait for them all).
 */
export async function sweepExpired(
  db: DynamoDBDocumentClient,
  config: Pick<Config, 'tables'>,
  nowSeconds: number,
  signal?: AbortSignal,
): Promise<number> {
  let removed = 0;
  for (const table of TABLES) {
    if (table.ttlAttribute)
      removed += await sweepTable(
        db,
        config.tables[table.configKey],
        table,
        table.ttlAttribute,
        nowSeconds,
        signal,
      );
  }
  return removed;
}

async function sweepTable(
  db: DynamoDBDocumentClient,
  name: string,
  table: TableDefinition,
  ttlAttribute: string,
  nowSeconds: number,
  signal: AbortSignal | undefined,
): Promise<number> {
  const keys = [table.partitionKey, ...(table.sortKey ? [table.sortKey] : [])];
  const names = { '#ttl': ttlAttribute, ...Object.fromEntries(keys.map((key, i) => [`#k${i}`, key])) };
  // As DynamoDB's TTL: a number of epoch seconds in the past; any other value (none, text) never expires.
  const expired = { FilterExpression: '#ttl < :now', ExpressionAttributeValues: { ':now': nowSeconds } };
  let removed = 0;
  for await (const items of scanPages(db, {
    TableName: name,
    ...expired,
    ProjectionExpression: keys.map((_, i) => `#k${i}`).join(', '),
    ExpressionAttributeNames: names,
  })) {
    if (signal?.aborted) break;
    const deleted = await mapLimit(items, 4, async (Key) => {
      if (signal?.aborted) return 0;
      return db
        .send(
          new DeleteCommand({
            TableName: name,
            Key,
            ConditionExpression: expired.FilterExpression,
            ExpressionAttributeNames: { '#ttl': ttlAttribute },
            ExpressionAttributeValues: expired.ExpressionAttributeValues,
          }),
        )
        .then(
          () => 1,
          (error: unknown) => {
            if (isConditionalCheckFailed(error)) return 0;
            throw error;
          },
        );
    });
    removed += deleted.reduce((sum, one) => sum + one, 0);
  }
  return removed;
}
