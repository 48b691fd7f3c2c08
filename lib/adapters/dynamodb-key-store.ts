import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed, queryPages } from '#lib/adapters/dynamodb-client.ts';
import { NotFoundError } from '#lib/domain/errors.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { KeyStore } from '#lib/ports.ts';

/** Search ids keyed by the id itself (one GetItem per request), with a byFeed index for listings. */
export class DynamoDbKeyStore implements KeyStore {
  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async create(key: SearchKey): Promise<void> {
    await this.db.send(
      new PutCommand({
        TableName: this.table,
        Item: key,
        ConditionExpression: 'attribute_not_exists(searchId)',
      }),
    );
  }

  async get(searchId: string): Promise<SearchKey | undefined> {
    const out = await this.db.send(new GetCommand({ TableName: this.table, Key: { searchId } }));
    return out.Item as SearchKey | undefined;
  }

  async listByFeed(feedId: string): Promise<SearchKey[]> {
    const keys: SearchKey[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      IndexName: 'byFeed',
      KeyConditionExpression: 'feedId = :f',
      ExpressionAttributeValues: { ':f': feedId },
    })) {
      keys.push(...(items as unknown as SearchKey[]));
    }
    return keys;
  }

  async revoke(searchId: string, at: Date): Promise<void> {
    try {
      await this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { searchId },
          UpdateExpression: 'SET revokedAt = if_not_exists(revokedAt, :at)',
          ConditionExpression: 'attribute_exists(searchId)',
          ExpressionAttributeValues: { ':at': at.toISOString() },
        }),
      );
    } catch (error) {
      if (isConditionalCheckFailed(error)) throw new NotFoundError('not_found', 'Search id not found.');
      throw error;
    }
  }

  async touch(searchId: string, at: Date): Promise<void> {
    await this.db
      .send(
        new UpdateCommand({
          TableName: this.table,
          Key: { searchId },
          UpdateExpression: 'SET lastUsedAt = :at',
          ConditionExpression: 'attribute_exists(searchId)',
          ExpressionAttributeValues: { ':at': at.toISOString() },
        }),
      )
      .catch((error: unknown) => {
        // A key deleted between lookup and touch is not an error worth failing a request for.
        if (!isConditionalCheckFailed(error)) throw error;
      });
  }

  async delete(searchId: string): Promise<void> {
    await this.db.send(new DeleteCommand({ TableName: this.table, Key: { searchId } }));
  }

  async deleteByFeed(feedId: string): Promise<void> {
    for (const key of await this.listByFeed(feedId)) await this.delete(key.searchId);
  }
}
