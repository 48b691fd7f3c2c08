import { BatchWriteCommand, type DynamoDBDocumentClient, QueryCommand } from '@aws-sdk/lib-dynamodb';

/**
 * Products keyed by (feedId, productId). This is the slice the platform needs (is a feed empty, drop a
 * feed's products); the catalogue grows it into the full ProductStore.
 */
export class DynamoDbProductStore {
  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async hasProducts(feedId: string): Promise<boolean> {
    const out = await this.db.send(
      new QueryCommand({
        TableName: this.table,
        KeyConditionExpression: 'feedId = :f',
        ExpressionAttributeValues: { ':f': feedId },
        ProjectionExpression: 'productId',
        Limit: 1,
      }),
    );
    return (out.Items ?? []).length > 0;
  }

  async deleteFeed(feedId: string): Promise<void> {
    let start: Record<string, unknown> | undefined;
    do {
      const out = await this.db.send(
        new QueryCommand({
          TableName: this.table,
          KeyConditionExpression: 'feedId = :f',
          ExpressionAttributeValues: { ':f': feedId },
          ProjectionExpression: 'feedId, productId',
          ExclusiveStartKey: start,
        }),
      );
      const items = out.Items ?? [];
      for (let i = 0; i < items.length; i += 25) {
        const batch = items.slice(i, i + 25).map((item) => ({ DeleteRequest: { Key: item } }));
        await this.db.send(new BatchWriteCommand({ RequestItems: { [this.table]: batch } }));
      }
      start = out.LastEvaluatedKey;
    } while (start);
  }
}
