import {
  BatchGetCommand,
  type BatchGetCommandOutput,
  type DynamoDBDocumentClient,
  GetCommand,
  QueryCommand,
} from '@aws-sdk/lib-dynamodb';
import { DELETE_BATCHES_IN_FLIGHT, queryPages, writeBatches } from '#lib/adapters/dynamodb-client.ts';
import { ValidationError } from '#lib/domain/errors.ts';
import type { Product } from '#lib/domain/products.ts';
import { MAX_PRODUCT_ID_LENGTH } from '#lib/domain/schemas.ts';
import type { ProductStore } from '#lib/ports.ts';

/** Stored item: the product plus its table keys (feedId, productId) and the byItemGroup index key. */
type Item = Product & { feedId: string; productId: string; feedItemGroup: string };

/**
 * The stored name of a metadata key `__proto__`. The SDK's marshaller and unmarshaller build each map by
 * assignment, where that name reaches the prototype's setter: the entry vanished from the write (and read
 * back, an object value would become the prototype). A feed's metadata keys are [A-Za-z0-9_-] only
 * (lib/domain/catalogue/normalise.ts), so a stored name with `$` is never one of them.
 */
const STORED_PROTO_KEY = '$__proto__';

const toItem = (p: Product) => ({
  ...p,
  // A Map, not the plain object: the marshaller takes an object with an own `constructor` (a feed's
  // metadata column named "constructor") for a class instance and refuses the whole write. It reads
  // back as a plain object.
  metadata: new Map(
    Object.entries(p.metadata).map(([key, value]) => [key === '__proto__' ? STORED_PROTO_KEY : key, value]),
  ),
  feedId: p.feed_id,
  productId: p.product_id,
  feedItemGroup: `${p.feed_id}#${p.group}`,
});

function toProduct(item: Record<string, unknown>): Product {
  const { feedId: _f, productId: _p, feedItemGroup: _g, ...product } = item as unknown as Item;
  return { ...product, metadata: storedMetadata(product.metadata) };
}

/** Metadata as read, `__proto__` under its own name again: an own key (fromEntries), not the prototype. */
function storedMetadata(metadata: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(metadata).map(([key, value]) => [key === STORED_PROTO_KEY ? '__proto__' : key, value]),
  );
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Products keyed by (feedId, productId), with the byItemGroup index (variants of one group) and the byId
 * index (the product's UUID). Batch reads and writes retry their unprocessed keys with backoff.
 */
export class DynamoDbProductStore implements ProductStore {
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

  async get(feedId: string, productId: string): Promise<Product | undefined> {
    const out = await this.db.send(new GetCommand({ TableName: this.table, Key: { feedId, productId } }));
    return out.Item ? toProduct(out.Item) : undefined;
  }

  async getMany(feedId: string, productIds: string[]): Promise<Map<string, Product>> {
    const found = new Map<string, Product>();
    const unique = [...new Set(productIds)];
    for (let i = 0; i < unique.length; i += 100) {
      let keys: Record<string, unknown>[] | undefined = unique
        .slice(i, i + 100)
        .map((productId) => ({ feedId, productId }));
      for (let attempt = 0; keys && keys.length > 0; attempt += 1) {
        if (attempt > 0) await pause(Math.min(1000, 25 * 2 ** attempt));
        const out: BatchGetCommandOutput = await this.db.send(
          new BatchGetCommand({ RequestItems: { [this.table]: { Keys: keys } } }),
        );
        for (const item of out.Responses?.[this.table] ?? []) {
          const product = toProduct(item);
          found.set(product.product_id, product);
        }
        keys = out.UnprocessedKeys?.[this.table]?.Keys;
      }
    }
    return found;
  }

  async listGroup(feedId: string, itemGroupId: string): Promise<Product[]> {
    const products: Product[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      IndexName: 'byItemGroup',
      KeyConditionExpression: 'feedItemGroup = :g',
      ExpressionAttributeValues: { ':g': `${feedId}#${itemGroupId}` },
    })) {
      products.push(...items.map(toProduct));
    }
    return products.sort((a, b) => (a.product_id < b.product_id ? -1 : a.product_id > b.product_id ? 1 : 0));
  }

  async putMany(products: Product[]): Promise<void> {
    // One put per key, the last product given for it: BatchWriteItem refuses a whole batch that names a
    // key twice (ValidationException, after the batches before it were written), where puts one by one
    // would leave the last.
    const last = new Map(products.map((p) => [`${p.feed_id}\u0000${p.product_id}`, p]));
    await this.batchWrite([...last.values()].map((p) => ({ PutRequest: { Item: toItem(p) } })));
  }

  async deleteMany(feedId: string, productIds: string[]): Promise<void> {
    // Distinct keys, so batches can go side by side.
    await writeBatches(
      this.db,
      this.table,
      [...new Set(productIds)].map((productId) => ({ DeleteRequest: { Key: { feedId, productId } } })),
      { inFlight: DELETE_BATCHES_IN_FLIGHT },
    );
  }

  async page(feedId: string, limit: number, cursor?: string): Promise<{ items: Product[]; cursor?: string }> {
    let start: Record<string, unknown> | undefined;
    if (cursor) {
      // A cursor is a product id in base64url, as this listing wrote it: anything else is refused here,
      // not sent to DynamoDB as a start key (an empty or over-long one is a ValidationException there).
      const productId = Buffer.from(cursor, 'base64url').toString('utf8');
      if (
        productId.length === 0 ||
        productId.length > MAX_PRODUCT_ID_LENGTH ||
        Buffer.from(productId, 'utf8').toString('base64url') !== cursor
      ) {
        throw new ValidationError('Invalid cursor.', [
          { path: 'cursor', message: 'not a cursor of this listing' },
        ]);
      }
      start = { feedId, productId };
    }
    const out = await this.db.send(
      new QueryCommand({
        TableName: this.table,
        KeyConditionExpression: 'feedId = :f',
        ExpressionAttributeValues: { ':f': feedId },
        ExclusiveStartKey: start,
        // One more than the page: a page that ends the listing then carries no cursor (DynamoDB's own
        // last key sent clients on to an empty page whenever the listing ended on a full page).
        Limit: limit + 1,
      }),
    );
    const read = out.Items ?? [];
    const items = read.slice(0, limit);
    // More items, or a query cut short by DynamoDB's 1 MB page: the next page starts after this one.
    const more = read.length > limit || out.LastEvaluatedKey !== undefined;
    const last = items.at(-1)?.productId;
    return {
      items: items.map(toProduct),
      ...(more && typeof last === 'string'
        ? { cursor: Buffer.from(last, 'utf8').toString('base64url') }
        : {}),
    };
  }

  async listUnseen(feedId: string, importId: string): Promise<string[]> {
    const ids: string[] = [];
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'feedId = :f',
      ExpressionAttributeValues: { ':f': feedId },
      ProjectionExpression: 'productId, seen_import',
      // The last chunk's records were written just before: a stale read would take them for unseen.
      ConsistentRead: true,
    })) {
      for (const item of items) if (item.seen_import !== importId) ids.push(String(item.productId));
    }
    return ids;
  }

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    for await (const items of queryPages(this.db, {
      TableName: this.table,
      KeyConditionExpression: 'feedId = :f',
      ExpressionAttributeValues: { ':f': feedId },
      ProjectionExpression: 'productId',
      // Products written just before the deletion started are deleted too.
      ConsistentRead: true,
    })) {
      options.signal?.throwIfAborted();
      await this.deleteMany(
        feedId,
        items.map((item) => String(item.productId)),
      );
    }
  }

  private batchWrite(requests: Record<string, unknown>[]): Promise<void> {
    return writeBatches(this.db, this.table, requests);
  }
}
