import { type DynamoDBDocumentClient, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import {
  DELETE_BATCHES_IN_FLIGHT,
  isConditionalCheckFailed,
  queryPages,
  writeBatches,
} from '#lib/adapters/dynamodb-client.ts';
import {
  currentWindowCapacity,
  retryAfterSeconds,
  secondsToFullAllowance,
  WINDOW_MS,
  windowAt,
} from '#lib/domain/rate-window.ts';
import type { Endpoint, RateLimitDecision, UsageOutcome, UsageRow, UsageStore } from '#lib/ports.ts';

const OUTCOME_ATTRIBUTE: Record<UsageOutcome, keyof UsageRow> = {
  ok: 'ok',
  client_error: 'clientErrors',
  server_error: 'serverErrors',
  rate_limited: 'rateLimited',
};
const USAGE_RETENTION_DAYS = 400;

/**
 * Rate-limit windows (`rate#<searchId>` / window start) and daily usage (`usage#<feedId>` /
 * `<day>#<endpoint>#<searchId>`) in one table. Every increment is an atomic ADD; the rate limit is a
 * conditional ADD, so racing requests can never push a window past its capacity.
 */
export class DynamoDbUsageStore implements UsageStore {
  /**
   * Counts of finished windows never change, so each process reads a search id's previous window once
   * per hour instead of on every request: the common request is then a single conditional write.
   */
  private readonly finishedWindows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async consume(searchId: string, limit: number, now: Date): Promise<RateLimitDecision> {
    const position = windowAt(now);
    const pk = `rate#${searchId}`;
    const previous = await this.previousWindowCount(searchId, pk, position.start);
    const capacity = currentWindowCapacity(limit, previous, position.elapsed);
    const refuse = (current: number): RateLimitDecision => ({
      allowed: false,
      limit,
      remaining: 0,
      resetSeconds: secondsToFullAllowance(previous, current, position, now),
      retryAfterSeconds: retryAfterSeconds(limit, previous, current, position, now),
    });
    // Refused before counting: this window's own count still matters for when to come back (after the
    // limit was lowered, this window may already hold admitted requests).
    if (capacity <= 0) return refuse(await this.windowCount(pk, position.start));
    try {
      const out = await this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { pk, sk: windowKey(position.start) },
          UpdateExpression: 'ADD #count :one SET expiresAt = :expires',
          ConditionExpression: 'attribute_not_exists(#count) OR #count < :capacity',
          ExpressionAttributeNames: { '#count': 'count' },
          ExpressionAttributeValues: {
            ':one': 1,
            ':capacity': capacity,
            ':expires': Math.floor((position.start + 3 * WINDOW_MS) / 1000),
          },
          ReturnValues: 'UPDATED_NEW',
        }),
      );
      const current = Number(out.Attributes?.count ?? 1);
      return {
        allowed: true,
        limit,
        remaining: Math.max(0, capacity - current),
        resetSeconds: secondsToFullAllowance(previous, current, position, now),
        retryAfterSeconds: 0,
      };
    } catch (error) {
      // Refused by the count: read it (this window may hold more than the capacity after the limit was
      // lowered mid-hour), so that Retry-After and Reset are right.
      if (isConditionalCheckFailed(error)) return refuse(await this.windowCount(pk, position.start));
      throw error;
    }
  }

  async record(entry: {
    feedId: string;
    feedCreatedAt: string;
    searchId: string;
    endpoint: Endpoint;
    outcome: UsageOutcome;
    at: Date;
  }): Promise<void> {
    const day = entry.at.toISOString().slice(0, 10);
    await this.db.send(
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
          ':expires': Math.floor(entry.at.getTime() / 1000) + USAGE_RETENTION_DAYS * 86_400,
        },
      }),
    );
  }

  async list(feedId: string, fromDay: string, toDay: string): Promise<UsageRow[]> {
    const rows: UsageRow[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'pk = :pk AND sk BETWEEN :from AND :to',
      ExpressionAttributeValues: {
        ':pk': `usage#${feedId}`,
        ':from': `${fromDay}#`,
        ':to': `${toDay}#\uffff`,
      },
    })) {
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

  async deleteFeed(feedId: string): Promise<void> {
    const pk = `usage#${feedId}`;
    const sks: string[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': pk },
      ProjectionExpression: 'sk',
    })) {
      for (const item of items) sks.push(String(item.sk));
    }
    await writeBatches(
      this.db,
      this.table,
      sks.map((sk) => ({ DeleteRequest: { Key: { pk, sk } } })),
      { inFlight: DELETE_BATCHES_IN_FLIGHT },
    );
  }

  private async windowCount(pk: string, start: number): Promise<number> {
    const out = await this.db.send(
      new GetCommand({ TableName: this.table, Key: { pk, sk: windowKey(start) }, ConsistentRead: true }),
    );
    return Number(out.Item?.count ?? 0);
  }

  private async previousWindowCount(searchId: string, pk: string, currentStart: number): Promise<number> {
    const start = currentStart - WINDOW_MS;
    const known = this.finishedWindows.get(searchId);
    if (known?.start === start) return known.count;
    const count = await this.windowCount(pk, start);
    if (this.finishedWindows.size >= 50_000) this.finishedWindows.clear();
    this.finishedWindows.set(searchId, { start, count });
    return count;
  }
}

/** Fixed-width so that string order equals time order. */
function windowKey(startMs: number): string {
  return String(startMs).padStart(15, '0');
}
