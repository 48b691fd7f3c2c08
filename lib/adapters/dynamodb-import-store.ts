import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed, queryPages, scanPages } from '#lib/adapters/dynamodb-client.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { DomainError } from '#lib/domain/errors.ts';
import type { ImportStore } from '#lib/ports.ts';

/**
 * The sort key of a feed's import lease, in the same table as its imports: import ids start with `imp_`,
 * so queries for imports (begins_with) never see it.
 */
const LEASE_KEY = 'lease';
const IMPORT_ID_PREFIX = 'imp_';

/**
 * Feed imports in a DynamoDB table keyed by (feedId, importId); import ids sort by creation time. Each feed
 * has at most one lease item beside its imports (conditional writes make it exclusive).
 */
export class DynamoDbImportStore implements ImportStore {
  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async create(record: ImportRecord): Promise<void> {
    try {
      await this.db.send(
        new PutCommand({
          TableName: this.table,
          Item: record,
          ConditionExpression: 'attribute_not_exists(importId)',
        }),
      );
    } catch (error) {
      if (isConditionalCheckFailed(error))
        throw new DomainError('conflict', `Import ${record.importId} already exists.`);
      throw error;
    }
  }

  async get(feedId: string, importId: string): Promise<ImportRecord | undefined> {
    // The lease shares the table: an id that is not an import's names none.
    if (!importId.startsWith(IMPORT_ID_PREFIX)) return undefined;
    const out = await this.db.send(
      new GetCommand({ TableName: this.table, Key: { feedId, importId }, ConsistentRead: true }),
    );
    return out.Item as ImportRecord | undefined;
  }

  async list(feedId: string, limit: number, after?: string): Promise<ImportRecord[]> {
    // Query pages until `limit` records: a record holds up to 100 errors, and DynamoDB cuts a page at
    // 1 MB (~17 such records), which would end the listing early.
    const records: ImportRecord[] = [];
    let start: Record<string, unknown> | undefined = after ? { feedId, importId: after } : undefined;
    do {
      const out = await this.db.send(
        new QueryCommand({
          ...this.newestFirst(feedId),
          Limit: limit - records.length,
          ExclusiveStartKey: start,
        }),
      );
      records.push(...((out.Items ?? []) as ImportRecord[]));
      start = out.LastEvaluatedKey;
    } while (start && records.length < limit);
    return records;
  }

  async page(
    feedId: string,
    limit: number,
    after?: string,
  ): Promise<{ records: ImportRecord[]; more: boolean }> {
    const out = await this.db.send(
      new QueryCommand({
        ...this.newestFirst(feedId),
        // One more than the page: a page that ends the listing says so.
        Limit: limit + 1,
        ...(after ? { ExclusiveStartKey: { feedId, importId: after } } : {}),
      }),
    );
    const items = (out.Items ?? []) as ImportRecord[];
    return {
      records: items.slice(0, limit),
      more: items.length > limit || out.LastEvaluatedKey !== undefined,
    };
  }

  /** The query of a feed's imports (not its lease), newest first. */
  private newestFirst(feedId: string) {
    return {
      TableName: this.table,
      KeyConditionExpression: 'feedId = :f AND begins_with(importId, :imp)',
      ExpressionAttributeValues: { ':f': feedId, ':imp': IMPORT_ID_PREFIX },
      ScanIndexForward: false,
    };
  }

  async listUnfinished(feedId: string): Promise<ImportRecord[]> {
    const records: ImportRecord[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'feedId = :f AND begins_with(importId, :imp)',
      FilterExpression: '#status IN (:queued, :running)',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: {
        ':f': feedId,
        ':imp': IMPORT_ID_PREFIX,
        ':queued': 'queued',
        ':running': 'running',
      },
      ConsistentRead: true,
    })) {
      records.push(...(items as unknown as ImportRecord[]));
    }
    return records;
  }

  async put(record: ImportRecord): Promise<void> {
    await this.db.send(new PutCommand({ TableName: this.table, Item: record }));
  }

  async delete(feedId: string, importId: string): Promise<void> {
    await this.db.send(new DeleteCommand({ TableName: this.table, Key: { feedId, importId } }));
  }

  async deleteFeed(feedId: string): Promise<void> {
    let records: ImportRecord[];
    do {
      records = await this.list(feedId, 100);
      for (const record of records) await this.delete(feedId, record.importId);
    } while (records.length > 0);
  }

  takeLease(feedId: string, owner: string, until: Date, now: Date): Promise<boolean> {
    return succeeds(() =>
      this.db.send(
        new PutCommand({
          TableName: this.table,
          Item: { feedId, importId: LEASE_KEY, owner, until: until.toISOString() },
          ConditionExpression: 'attribute_not_exists(importId) OR #owner = :owner OR #until < :now',
          ExpressionAttributeNames: { '#owner': 'owner', '#until': 'until' },
          ExpressionAttributeValues: { ':owner': owner, ':now': now.toISOString() },
        }),
      ),
    );
  }

  renewLease(feedId: string, owner: string, until: Date): Promise<boolean> {
    return succeeds(() =>
      this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { feedId, importId: LEASE_KEY },
          UpdateExpression: 'SET #until = :until',
          ConditionExpression: '#owner = :owner',
          ExpressionAttributeNames: { '#owner': 'owner', '#until': 'until' },
          ExpressionAttributeValues: { ':owner': owner, ':until': until.toISOString() },
        }),
      ),
    );
  }

  async leasedFeeds(): Promise<string[]> {
    const feeds: string[] = [];
    for await (const items of scanPages(this.db, {
      TableName: this.table,
      FilterExpression: 'importId = :lease',
      ExpressionAttributeValues: { ':lease': LEASE_KEY },
      ProjectionExpression: 'feedId',
    })) {
      for (const item of items) feeds.push(String(item.feedId));
    }
    return feeds;
  }

  async releaseLease(feedId: string, owner?: string): Promise<void> {
    try {
      await this.db.send(
        new DeleteCommand({
          TableName: this.table,
          Key: { feedId, importId: LEASE_KEY },
          ...(owner !== undefined
            ? {
                ConditionExpression: '#owner = :owner',
                ExpressionAttributeNames: { '#owner': 'owner' },
                ExpressionAttributeValues: { ':owner': owner },
              }
            : {}),
        }),
      );
    } catch (error) {
      // Someone else's lease (ours expired and was taken): not ours to give up.
      if (!isConditionalCheckFailed(error)) throw error;
    }
  }
}

/** Runs a conditional write: true when it was applied, false when its condition did not hold. */
async function succeeds(write: () => Promise<unknown>): Promise<boolean> {
  try {
    await write();
    return true;
  } catch (error) {
    if (isConditionalCheckFailed(error)) return false;
    throw error;
  }
}
