import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed, scanPages } from '#lib/adapters/dynamodb-client.ts';
import { DomainError, NotFoundError } from '#lib/domain/errors.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { FeedStore } from '#lib/ports.ts';

/** Feeds in a DynamoDB table keyed by feedId. */
export class DynamoDbFeedStore implements FeedStore {
  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async create(feed: Feed): Promise<void> {
    try {
      await this.db.send(
        new PutCommand({
          TableName: this.table,
          Item: feed,
          ConditionExpression: 'attribute_not_exists(feedId)',
        }),
      );
    } catch (error) {
      if (isConditionalCheckFailed(error))
        throw new DomainError('conflict', `Feed ${feed.feedId} already exists.`);
      throw error;
    }
  }

  async get(feedId: string, options?: { fresh?: boolean }): Promise<Feed | undefined> {
    const out = await this.db.send(
      new GetCommand({ TableName: this.table, Key: { feedId }, ConsistentRead: options?.fresh === true }),
    );
    return out.Item as Feed | undefined;
  }

  async list(): Promise<Feed[]> {
    const feeds: Feed[] = [];
    for await (const items of scanPages(this.db, { TableName: this.table }))
      feeds.push(...(items as unknown as Feed[]));
    return feeds.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.feedId.localeCompare(b.feedId));
  }

  async put(feed: Feed, expectedUpdatedAt?: string | null): Promise<void> {
    try {
      await this.db.send(
        new PutCommand({
          TableName: this.table,
          Item: feed,
          // A feed being deleted is not written back (an update racing the deletion would undo its mark),
          // nor one deleted and created again since it was read; given `expectedUpdatedAt`, nor one
          // changed since it was read (a concurrent update's change would be lost).
          ConditionExpression:
            'attribute_exists(feedId) AND attribute_not_exists(deletingAt) AND createdAt = :createdAt' +
            (expectedUpdatedAt === undefined
              ? ''
              : expectedUpdatedAt === null
                ? ' AND attribute_not_exists(updatedAt)'
                : ' AND updatedAt = :updatedAt'),
          ExpressionAttributeValues: {
            ':createdAt': feed.createdAt,
            ...(typeof expectedUpdatedAt === 'string' ? { ':updatedAt': expectedUpdatedAt } : {}),
          },
        }),
      );
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
      if (expectedUpdatedAt !== undefined) {
        // Which condition failed: only a change of the same, live feed is a conflict (to read again).
        const now = await this.get(feed.feedId, { fresh: true });
        if (now && !now.deletingAt && now.createdAt === feed.createdAt)
          throw new DomainError('conflict', `Feed ${feed.feedId} was changed since it was read.`);
      }
      throw new NotFoundError('feed_not_found', `Feed ${feed.feedId} not found.`);
    }
  }

  async markDeleting(feedId: string, at: Date, createdAt?: string, updatedAt?: string | null): Promise<void> {
    const conditions = ['attribute_exists(feedId)'];
    const values: Record<string, string> = { ':at': at.toISOString() };
    if (createdAt !== undefined) {
      conditions.push('createdAt = :c');
      values[':c'] = createdAt;
    }
    if (updatedAt === null) conditions.push('attribute_not_exists(updatedAt)');
    else if (updatedAt !== undefined) {
      conditions.push('updatedAt = :u');
      values[':u'] = updatedAt;
    }
    try {
      await this.db.send(
        new UpdateCommand({
          TableName: this.table,
          Key: { feedId },
          UpdateExpression: 'SET deletingAt = if_not_exists(deletingAt, :at)',
          ConditionExpression: conditions.join(' AND '),
          ExpressionAttributeValues: values,
        }),
      );
    } catch (error) {
      if (isConditionalCheckFailed(error))
        throw new NotFoundError('feed_not_found', `Feed ${feedId} not found.`);
      throw error;
    }
  }

  async delete(feedId: string, createdAt?: string): Promise<void> {
    try {
      await this.db.send(
        new DeleteCommand({
          TableName: this.table,
          Key: { feedId },
          ...(createdAt !== undefined
            ? { ConditionExpression: 'createdAt = :c', ExpressionAttributeValues: { ':c': createdAt } }
            : {}),
        }),
      );
    } catch (error) {
      // Already gone, or another feed of the same id: nothing of this one left to delete.
      if (!isConditionalCheckFailed(error)) throw error;
    }
  }
}
