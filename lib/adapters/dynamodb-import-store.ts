import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed } from '#lib/adapters/dynamodb-client.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { DomainError } from '#lib/domain/errors.ts';
import type { ImportStore } from '#lib/ports.ts';

/** Feed imports in a DynamoDB table keyed by (feedId, importId); import ids sort by creation time. */
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
    const out = await this.db.send(
      new GetCommand({ TableName: this.table, Key: { feedId, importId }, ConsistentRead: true }),
    );
    return out.Item as ImportRecord | undefined;
  }

  async list(feedId: string, limit: number): Promise<ImportRecord[]> {
    const out = await this.db.send(
      new QueryCommand({
        TableName: this.table,
        KeyConditionExpression: 'feedId = :f',
        ExpressionAttributeValues: { ':f': feedId },
        ScanIndexForward: false,
        Limit: limit,
      }),
    );
    return (out.Items ?? []) as ImportRecord[];
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
}
