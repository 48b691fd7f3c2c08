import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionalCheckFailed } from '#lib/adapters/dynamodb-client.ts';
import type { IdempotencyClaim, IdempotencyStore, StoredResponse } from '#lib/ports.ts';

interface IdempotencyItem {
  idempotencyKey: string;
  fingerprint: string;
  owner: string;
  state: 'running' | 'done';
  /** Epoch milliseconds: until then a running claim is its owner's. */
  lockedUntil: number;
  /** Epoch seconds (the table's TTL attribute; the local server keeps expired items, so reads check it). */
  expiresAt: number;
  response?: StoredResponse;
}

/**
 * One item per key. A claim is a conditional put: it wins over no item, an expired one, or a running one
 * whose owner stopped (lock passed) for the same request. Whoever loses reads the item to say why.
 */
export class DynamoDbIdempotencyStore implements IdempotencyStore {
  constructor(
    private readonly db: DynamoDBDocumentClient,
    private readonly table: string,
  ) {}

  async begin(
    key: string,
    claim: { fingerprint: string; owner: string; now: Date; lockMs: number; ttlMs: number },
  ): Promise<IdempotencyClaim> {
    const nowMs = claim.now.getTime();
    const nowSeconds = Math.floor(nowMs / 1000);
    const item: IdempotencyItem = {
      idempotencyKey: key,
      fingerprint: claim.fingerprint,
      owner: claim.owner,
      state: 'running',
      lockedUntil: nowMs + claim.lockMs,
      expiresAt: Math.ceil((nowMs + claim.ttlMs) / 1000),
    };
    // The item can change between the put and the read (answered, abandoned, expired): a few rounds.
    for (let round = 0; round < 3; round += 1) {
      try {
        await this.db.send(
          new PutCommand({
            TableName: this.table,
            Item: item,
            ConditionExpression:
              'attribute_not_exists(idempotencyKey) OR expiresAt < :nowSeconds OR ' +
              '(#state = :running AND lockedUntil < :nowMs AND fingerprint = :fingerprint)',
            ExpressionAttributeNames: { '#state': 'state' },
            ExpressionAttributeValues: {
              ':nowSeconds': nowSeconds,
              ':running': 'running',
              ':nowMs': nowMs,
              ':fingerprint': claim.fingerprint,
            },
          }),
        );
        return { kind: 'started' };
      } catch (error) {
        if (!isConditionalCheckFailed(error)) throw error;
      }
      const out = await this.db.send(
        new GetCommand({ TableName: this.table, Key: { idempotencyKey: key }, ConsistentRead: true }),
      );
      const held = out.Item as IdempotencyItem | undefined;
      if (!held || held.expiresAt < nowSeconds) continue;
      // This attempt's own put, applied but answered as failed (the SDK retried it after a lost answer).
      if (held.owner === claim.owner && held.state === 'running') return { kind: 'started' };
      if (held.fingerprint !== claim.fingerprint) return { kind: 'mismatch' };
      if (held.state === 'done' && held.response) return { kind: 'replay', response: held.response };
      if (held.lockedUntil < nowMs) continue;
      return { kind: 'in_progress' };
    }
    return { kind: 'in_progress' };
  }

  async finish(key: string, owner: string, response: StoredResponse): Promise<void> {
    await this.ifOwner(
      new UpdateCommand({
        TableName: this.table,
        Key: { idempotencyKey: key },
        UpdateExpression: 'SET #state = :done, #response = :response REMOVE lockedUntil',
        ConditionExpression: '#owner = :owner AND #state = :running',
        ExpressionAttributeNames: { '#state': 'state', '#response': 'response', '#owner': 'owner' },
        ExpressionAttributeValues: {
          ':done': 'done',
          ':response': response,
          ':owner': owner,
          ':running': 'running',
        },
      }),
    );
  }

  async abandon(key: string, owner: string): Promise<void> {
    await this.ifOwner(
      new DeleteCommand({
        TableName: this.table,
        Key: { idempotencyKey: key },
        ConditionExpression: '#owner = :owner AND #state = :running',
        ExpressionAttributeNames: { '#state': 'state', '#owner': 'owner' },
        ExpressionAttributeValues: { ':owner': owner, ':running': 'running' },
      }),
    );
  }

  /** A write that applies only while the attempt still owns the key (another may have taken it over). */
  private async ifOwner(command: UpdateCommand | DeleteCommand): Promise<void> {
    try {
      await this.db.send(command);
    } catch (error) {
      if (!isConditionalCheckFailed(error)) throw error;
    }
  }
}
