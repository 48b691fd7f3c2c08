import { createHash } from 'node:crypto';
import { type DynamoDBDocumentClient, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import {
  DELETE_BATCHES_IN_FLIGHT,
  isConditionalCheckFailed,
  queryPages,
  writeBatches,
} from '#lib/adapters/dynamodb-client.ts';
import { RATE_LIMIT_PARTITION_PREFIX } from '#lib/adapters/dynamodb-tables.ts';
import {
  BUCKET_MS,
  bucketStart,
  currentBucketCapacity,
  retryAfterSeconds,
  secondsToFullAllowance,
  WINDOW_BUCKETS,
} from '#lib/domain/rate-window.ts';
import type {
  Endpoint,
  RateLimitDecision,
  UsageContext,
  UsageContextRow,
  UsageEntry,
  UsageOutcome,
  UsageRow,
  UsageStore,
} from '#lib/ports.ts';

const OUTCOME_ATTRIBUTE: Record<UsageOutcome, keyof UsageRow> = {
  ok: 'ok',
  client_error: 'clientErrors',
  server_error: 'serverErrors',
  rate_limited: 'rateLimited',
};
const USAGE_RETENTION_DAYS = 400;

/**
 * Rate-limit buckets (`rate#<searchId>` / `5m#<bucket start>`, lib/domain/rate-window.ts), daily usage
 * (`usage#<feedId>` / `<day>#<endpoint>#<searchId>`) and daily contexts (`usage#<feedId>` /
 * `ctx#<day>#<hash>`) in one table. Every increment is an atomic ADD; the rate limit is a conditional
 * ADD, so racing requests can never push a bucket past its capacity.
 */
export class DynamoDbUsageStore implements UsageStore {
  /** Feed-days whose MAX_DAILY_CONTEXTS places this process found taken (recordContext). */
  private readonly fullDays = new Set<string>();

  /**
   * Counts of finished buckets do not change once settled, so each process reads a search id's 12
   * previous buckets with one query per 5-minute bucket (a second one when the first came in the
   * bucket's first 10 s, see previousBucketCounts; concurrent requests share one) instead of on every
   * request: the common request is then a single conditional write. Keyed by search id: the current
   * bucket's start and its predecessors' counts, newest first.
   */
  private readonly finishedWindows = new Map<string, { start: number; counts: number[]; settled: boolean }>();
  /** Reads of previous buckets in flight, by search id, bucket and phase: concurrent requests share one. */
  private readonly bucketReads = new Map<string, Promise<number[]>>();

  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async consume(searchId: string, limit: number, now: Date): Promise<RateLimitDecision> {
    const start = bucketStart(now);
    const pk = `${RATE_LIMIT_PARTITION_PREFIX}${searchId}`;
    const previous = await this.previousBucketCounts(searchId, pk, start, now.getTime());
    const capacity = currentBucketCapacity(limit, previous);
    const refuse = (current: number): RateLimitDecision => {
      const retry = retryAfterSeconds(limit, previous, current, now);
      return {
        allowed: false,
        limit,
        remaining: 0,
        // (Equal or later anyway for a limit of at least 1; the max only guards odd limits.)
        resetSeconds: Math.max(retry, secondsToFullAllowance(previous, current, now)),
        retryAfterSeconds: retry,
      };
    };
    // Refused before counting: this bucket's own count still matters for when to come back (after the
    // limit was lowered, this bucket may already hold admitted requests).
    if (capacity <= 0) return refuse(await this.windowCount(pk, start));
    try {
      const out = await this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk, sk: windowKey(start) },
          UpdateExpression: 'ADD #count :one SET expiresAt = :expires',
          ConditionExpression: 'attribute_not_exists(#count) OR #count < :capacity',
          ExpressionAttributeNames: { '#count': 'count' },
          ExpressionAttributeValues: {
            ':one': 1,
            ':capacity': capacity,
            // A bucket counts until 65 minutes after its start; kept 2 hours.
            ':expires': Math.floor((start + 24 * BUCKET_MS) / 1000),
          },
          ReturnValues: 'UPDATED_NEW',
        }),
      );
      const current = Number(out.Attributes?.count ?? 1);
      return {
        allowed: true,
        limit,
        remaining: Math.max(0, capacity - current),
        resetSeconds: secondsToFullAllowance(previous, current, now),
        retryAfterSeconds: 0,
      };
    } catch (error) {
      // Refused by the count: read it (this bucket may hold more than the capacity after the limit was
      // lowered), so that Retry-After and Reset are right.
      if (isConditionalCheckFailed(error)) return refuse(await this.windowCount(pk, start));
      throw error;
    }
  }

  async record(entry: UsageEntry): Promise<void> {
    const day = entry.at.toISOString().slice(0, 10);
    const expiresAt = Math.floor(entry.at.getTime() / 1000) + USAGE_RETENTION_DAYS * 86_400;
    // (Both writes at once; Promise.all so that neither's failure goes unhandled while the other runs.)
    await Promise.all([
      entry.context && this.recordContext(entry.feedId, entry.feedCreatedAt, day, entry.context, expiresAt),
      this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk: `usage#${entry.feedId}`, sk: `${day}#${entry.endpoint}#${entry.searchId}` },
          UpdateExpression:
            'ADD requests :one, #outcome :one SET #day = :day, endpoint = :endpoint, searchId = :sid, feedCreatedAt = :fc, expiresAt = :expires',
          ExpressionAttributeNames: { '#outcome': OUTCOME_ATTRIBUTE[entry.outcome], '#day': 'day' },
          ExpressionAttributeValues: {
            ':one': 1,
            ':day': day,
            ':endpoint': entry.endpoint,
            ':sid': entry.searchId,
            ':fc': entry.feedCreatedAt,
            ':expires': expiresAt,
          },
        }),
      ),
    ]);
  }

  /**
   * One item per feed, day and context (`ctx#<day>#<hash>`, beside the daily rows under the feed's key,
   * so a feed's deletion removes them with the rest): the type and domain may be 353 characters of any
   * script, more than a sort key holds once encoded, so the key names their hash and the item holds them.
   */
  private async recordContext(
    feedId: string,
    feedCreatedAt: string,
    day: string,
    context: UsageContext,
    expiresAt: number,
  ): Promise<void> {
    const pk = `usage#${feedId}`;
    const hash = createHash('sha256')
      .update(JSON.stringify([context.type, context.domain]))
      .digest('base64url');
    const add = (sk: string, row: UsageContext, condition?: string) =>
      this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk, sk },
          UpdateExpression:
            'ADD requests :one SET #day = :day, #type = :type, #domain = :domain, feedCreatedAt = :fc, expiresAt = :expires',
          ...(condition ? { ConditionExpression: condition } : {}),
          ExpressionAttributeNames: { '#day': 'day', '#type': 'type', '#domain': 'domain' },
          ExpressionAttributeValues: {
            ':one': 1,
            ':day': day,
            ':type': row.type,
            ':domain': row.domain,
            ':fc': feedCreatedAt,
            ':expires': expiresAt,
          },
        }),
      );
    const sk = `ctx#${day}#${hash.slice(0, 24)}`;
    try {
      // The common case, one write: a context the day has counted already.
      await add(sk, context, 'attribute_exists(requests)');
      return;
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
    }
    // A context new to the day takes one of its MAX_DAILY_CONTEXTS places; past them it is counted under
    // OTHER_CONTEXTS, so that a client sending a new context with every request cannot add an item each
    // time (a report reads every item of its range). Two first requests of one context at once may both
    // take a place (or one its own row, the other `(other)`), and a context write failing after its place
    // was taken leaves the place used: the cap is a bound, not an exact count. The counter is the feed's
    // (its createdAt in the key): late requests of a deleted feed do not fill a new one's day. Once a day is
    // full, this process writes `(other)` without asking the counter again.
    const full = `${feedId}#${feedCreatedAt}#${day}`;
    if (!this.fullDays.has(full)) {
      try {
        await this.db.send(
          new UpdateCommand({
            TableName: this.table,
            Key: { pk, sk: `ctxcount#${day}#${feedCreatedAt}` },
            UpdateExpression: 'ADD places :one SET expiresAt = :expires',
            ConditionExpression: 'attribute_not_exists(places) OR places < :max',
            ExpressionAttributeValues: { ':one': 1, ':max': MAX_DAILY_CONTEXTS, ':expires': expiresAt },
          }),
        );
        await add(sk, context);
        return;
      } catch (error) {
        if (!isConditionalCheckFailed(error)) throw error;
        if (this.fullDays.size >= 10_000) this.fullDays.clear();
        this.fullDays.add(full);
      }
    }
    await add(`ctx#${day}#other`, { type: OTHER_CONTEXTS, domain: '' });
  }

  async listContexts(feedId: string, fromDay: string, toDay: string): Promise<UsageContextRow[]> {
    const rows: UsageContextRow[] = [];
    for await (const items of queryPages(this.db, this.daysOf(feedId, 'ctx#', fromDay, toDay))) {
      for (const item of items) {
        rows.push({
          day: String(item.day),
          type: String(item.type ?? ''),
          domain: String(item.domain ?? ''),
          ...(typeof item.feedCreatedAt === 'string' ? { feedCreatedAt: item.feedCreatedAt } : {}),
          requests: Number(item.requests ?? 0),
        });
      }
    }
    return rows;
  }

  async list(feedId: string, fromDay: string, toDay: string): Promise<UsageRow[]> {
    const rows: UsageRow[] = [];
    for await (const items of queryPages(this.db, this.daysOf(feedId, '', fromDay, toDay))) {
      for (const item of items) {
        rows.push({
          day: String(item.day),
          endpoint: item.endpoint as Endpoint,
          searchId: String(item.searchId),
          ...(typeof item.feedCreatedAt === 'string' ? { feedCreatedAt: item.feedCreatedAt } : {}),
          requests: Number(item.requests ?? 0),
          ok: Number(item.ok ?? 0),
          clientErrors: Number(item.clientErrors ?? 0),
          serverErrors: Number(item.serverErrors ?? 0),
          rateLimited: Number(item.rateLimited ?? 0),
        });
      }
    }
    return rows;
  }

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    const pk = `usage#${feedId}`;
    // Page by page, the deletion's signal seen between pages (a year of daily rows and contexts is tens of
    // thousands of items: a deletion out of time hands the rest over instead of running on).
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': pk },
      ProjectionExpression: 'sk',
    })) {
      options.signal?.throwIfAborted();
      await writeBatches(
        this.db,
        this.table,
        items.map((item) => ({ DeleteRequest: { Key: { pk, sk: String(item.sk) } } })),
        { inFlight: DELETE_BATCHES_IN_FLIGHT },
      );
    }
  }

  /**
   * The query of a feed's items of days in [fromDay, toDay] whose sort keys are `<prefix><day>#…`: the
   * daily rows (no prefix; days begin with a digit) or the contexts (`ctx#`), never one for the other.
   */
  private daysOf(feedId: string, prefix: string, fromDay: string, toDay: string) {
    return {
      TableName: this.table,
      KeyConditionExpression: 'pk = :pk AND sk BETWEEN :from AND :to',
      ExpressionAttributeValues: {
        ':pk': `usage#${feedId}`,
        ':from': `${prefix}${fromDay}#`,
        ':to': `${prefix}${toDay}#\uffff`,
      },
    };
  }

  private async windowCount(pk: string, start: number): Promise<number> {
    const out = await this.db.send(
      new GetCommand({ TableName: this.table, Key: { pk, sk: windowKey(start) }, ConsistentRead: true }),
    );
    return Number(out.Item?.count ?? 0);
  }

  /**
   * Counts of the 12 buckets before the one starting at `start`, newest first (then cached). Read in the
   * first SETTLE_MS of a bucket, the previous bucket may still get writes (another process's clock a
   * little behind, a write in flight or retried): that reading is used until SETTLE_MS, then read again
   * once. (Cached for the whole bucket, a count read a moment too early let a process admit up to one
   * limit more for 5 minutes.)
   */
  private async previousBucketCounts(
    searchId: string,
    pk: string,
    start: number,
    now: number,
  ): Promise<number[]> {
    const known = this.finishedWindows.get(searchId);
    if (known?.start === start && (known.settled || now < start + SETTLE_MS)) return known.counts;
    // (A request past the settle point does not join a read begun before it.)
    const settled = now >= start + SETTLE_MS;
    const readKey = `${searchId}\n${start}\n${settled}`;
    const inFlight = this.bucketReads.get(readKey);
    if (inFlight) return inFlight;
    const read = this.readPreviousBuckets(pk, start)
      .then((counts) => {
        // A reading of an earlier bucket, or from before the settle point, does not replace a later one.
        const cached = this.finishedWindows.get(searchId);
        if (cached && (cached.start > start || (cached.start === start && cached.settled && !settled)))
          return counts;
        if (this.finishedWindows.size >= 50_000) this.finishedWindows.clear();
        this.finishedWindows.set(searchId, { start, counts, settled });
        return counts;
      })
      .finally(() => this.bucketReads.delete(readKey));
    this.bucketReads.set(readKey, read);
    return read;
  }

  /** Counts of the 12 buckets before the one starting at `start`, newest first, as stored now. */
  private async readPreviousBuckets(pk: string, start: number): Promise<number[]> {
    const counts: number[] = Array.from({ length: WINDOW_BUCKETS }, () => 0);
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'pk = :pk AND sk BETWEEN :from AND :to',
      ExpressionAttributeValues: {
        ':pk': pk,
        ':from': windowKey(start - WINDOW_BUCKETS * BUCKET_MS),
        ':to': windowKey(start - BUCKET_MS),
      },
      ConsistentRead: true,
    })) {
      for (const item of items) {
        const bucket = Number(String(item.sk).slice(BUCKET_KEY_PREFIX.length));
        const back = Math.round((start - bucket) / BUCKET_MS);
        if (back >= 1 && back <= WINDOW_BUCKETS) counts[back - 1] = Number(item.count ?? 0);
      }
    }
    return counts;
  }
}

/**
 * Marks the 5-minute buckets' keys. The hourly windows of earlier versions were keyed by the bare start
 * (no prefix): this store neither reads nor adds to them, and they expire by their TTL. During the deploy
 * that switches over, the requests that old processes counted in them are ignored here (a search id may
 * then get up to one limit more in that hour; acceptable).
 */
const BUCKET_KEY_PREFIX = '5m#';

/** Distinct contexts a feed's day counts on their own; the others are counted together. */
export const MAX_DAILY_CONTEXTS = 200;
/** The type of the row counting a day's contexts past MAX_DAILY_CONTEXTS (no metered type has parentheses). */
export const OTHER_CONTEXTS = '(other)';

/** How long after a bucket starts the previous bucket's count may still change (see previousBucketCounts). */
const SETTLE_MS = 10_000;

/** A bucket's sort key: its start in ms, fixed-width so that string order equals time order. */
function windowKey(startMs: number): string {
  return BUCKET_KEY_PREFIX + String(startMs).padStart(15, '0');
}
