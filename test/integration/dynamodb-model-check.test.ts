/**
 * A seeded random model check: the same operations on each DynamoDB adapter (over the embedded
 * DynamoDB-protocol server) and on what the use-case tests trust in its place (the in-memory fakes of
 * test/unit/catalogue/fakes.ts, or a model of the port's documented contract where no fake exists),
 * every answer compared. Seed 1 unless MODEL_SEED=<n> names another (npm test stays deterministic: other
 * seeds are a search to run by hand); MODEL_STEPS sets its length.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchGetCommand, BatchWriteCommand } from '@aws-sdk/lib-dynamodb';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbFeedStore } from '#lib/adapters/dynamodb-feed-store.ts';
import { DynamoDbIdempotencyStore } from '#lib/adapters/dynamodb-idempotency-store.ts';
import { DynamoDbImportStore } from '#lib/adapters/dynamodb-import-store.ts';
import { DynamoDbKeyStore } from '#lib/adapters/dynamodb-key-store.ts';
import { DynamoDbProductStore } from '#lib/adapters/dynamodb-product-store.ts';
import { DynamoDbUsageStore } from '#lib/adapters/dynamodb-usage-store.ts';
import type { Config } from '#lib/config.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { Product } from '#lib/domain/products.ts';
import type { Endpoint, UsageOutcome, UsageRow } from '#lib/ports.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';
import { MemoryImportStore, MemoryProductStore } from '#test/unit/catalogue/fakes.ts';
import { seededRandom } from '#lib/vision/seeded-random.ts';

const SEED = Number(process.env.MODEL_SEED ?? 1);
const STEPS = Number(process.env.MODEL_STEPS ?? 300);

let config: Config;
let stop: () => Promise<void>;

beforeAll(async () => {
  ({ config, stop } = await startTestStores());
  console.log(`model check seed ${SEED} (MODEL_SEED=${SEED} to replay), ${STEPS} steps per store`);
});

afterAll(async () => {
  await stop?.();
});

/** The generator seeded, with the draws the model makes: a failing run replays from its seed. */
function random(seed: number) {
  const next = seededRandom(seed);
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  const some = <T>(items: readonly T[], max: number): T[] =>
    Array.from({ length: int(max + 1) }, () => pick(items));
  return { next, int, pick, some };
}
type Random = ReturnType<typeof random>;

/** An answer as comparable text: a thrown error by its kind (name and code), never by its message. */
async function outcome(run: () => Promise<unknown>): Promise<string> {
  try {
    return canonical(await run());
  } catch (error) {
    const e = error as Error & { code?: string };
    return `throws ${e.name}${e.code ? `(${e.code})` : ''}`;
  }
}

/** JSON with Maps as sorted entries and undefined members dropped (what the SDK's marshaller does). */
function canonical(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, v: unknown) =>
    v instanceof Map ? [...v.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) : v,
  );
}

/**
 * Runs one step on both sides and records a difference. Every step is logged, so that the first
 * difference comes with the operations that led to it (shown only on failure).
 */
function comparer(name: string) {
  const log: string[] = [];
  const differences: string[] = [];
  return {
    log,
    differences,
    async step(label: string, adapter: () => Promise<unknown>, model: () => Promise<unknown>) {
      const [a, m] = [await outcome(adapter), await outcome(model)];
      log.push(label);
      if (a !== m && differences.length < 5)
        differences.push(
          `${name} seed ${SEED} step ${log.length}: ${label}\n  adapter: ${a.slice(0, 600)}\n` +
            `  model:   ${m.slice(0, 600)}\n  after: ${log.slice(-8, -1).join(' | ')}`,
        );
    },
  };
}

// Ids with what DynamoDB treats unlike a JavaScript string: characters past the BMP (UTF-8 order differs
// from UTF-16 order from U+E000 on), `#` (the byItemGroup key's separator), spaces, quotes, one of the
// longest ids an import takes (MAX_ENCODED_ID 240 once URL-encoded) and JavaScript member names.
const PRODUCT_IDS = [
  'a',
  'B',
  '_',
  '10',
  '9',
  'a#b',
  'a b',
  '"q"',
  'é',
  '\uff01',
  '\ue000',
  '😀',
  '𝔸x',
  '__proto__',
  'constructor',
  'x'.repeat(200),
  '%2F/..',
];
const GROUPS = ['g1', 'g#2', '😀', ''];

/**
 * A client that, at random, sends only the first part of a batch and answers the rest as unprocessed, as
 * DynamoDB does when throttled or past 16 MB (the embedded server never does): the adapter's retries of
 * UnprocessedItems and UnprocessedKeys are then part of every comparison.
 */
function unprocessing(r: Random) {
  const db = createDocumentClient(config);
  const send = db.send.bind(db) as (command: unknown) => Promise<Record<string, unknown>>;
  db.send = (async (command: unknown) => {
    if (r.int(3) !== 0) return send(command);
    if (command instanceof BatchWriteCommand) {
      const [table, requests] = Object.entries(command.input.RequestItems ?? {})[0] ?? [];
      if (!table || !requests || requests.length < 2) return send(command);
      const cut = 1 + r.int(requests.length - 1);
      await send(new BatchWriteCommand({ RequestItems: { [table]: requests.slice(0, cut) } }));
      return { UnprocessedItems: { [table]: requests.slice(cut) } };
    }
    if (command instanceof BatchGetCommand) {
      const [table, request] = Object.entries(command.input.RequestItems ?? {})[0] ?? [];
      const keys = request?.Keys ?? [];
      if (!table || keys.length < 2) return send(command);
      const cut = 1 + r.int(keys.length - 1);
      const out = await send(
        new BatchGetCommand({ RequestItems: { [table]: { Keys: keys.slice(0, cut) } } }),
      );
      return { ...out, UnprocessedKeys: { [table]: { Keys: keys.slice(cut) } } };
    }
    return send(command);
  }) as typeof db.send;
  return db;
}

function randomProduct(r: Random, feedId: string): Product {
  const productId = r.pick(PRODUCT_IDS);
  const itemGroup = r.pick(GROUPS);
  const metadataKeys = ['k', '__proto__', 'constructor', 'toString', 'a-b_1', 'hasOwnProperty'];
  const big = r.int(20) === 0;
  return {
    feed_id: feedId,
    id: `uuid-${r.int(1000)}`,
    product_id: productId,
    item_group_id: itemGroup,
    group: itemGroup || productId,
    title: r.pick(['T', 'ümlaut', '😀 t', ' padded ']),
    short_title: r.pick(['', 's']),
    // Up to the 128 KB an import lets a product be (MAX_PRODUCT_BYTES), so an item stays below 400 KB.
    description: big ? 'd'.repeat(120_000) : r.pick(['', 'desc', '\u0000nul']),
    age_group: '',
    availability: r.pick(['in_stock', 'out_of_stock', 'preorder', 'backorder'] as const),
    brand: r.pick(['', 'Brand']),
    color: '',
    condition: '',
    gender: '',
    category: r.pick(['', 'A > B']),
    product_type: '',
    gtin: r.pick(['', '0012345678905']),
    mpn: '',
    material: '',
    size: '',
    image_link: 'https://cdn.example.com/a.jpg',
    additional_image_links: r.some(['https://cdn.example.com/b.jpg', ''], 3),
    sb_image_url: '',
    link: '',
    price: r.pick([null, 0, 1, 1999, 2 ** 53 - 1]),
    sale_price: r.pick([null, 5]),
    currency: r.pick(['', 'USD']),
    shipping_price: r.pick([null, 0]),
    shipping_currency: '',
    shipping_country: '',
    shipping_weight: '',
    product_highlight: r.some(['h', '', 'ü'], 3),
    metadata: Object.fromEntries(r.some(metadataKeys, 3).map((k) => [k, r.pick(['v', '', '😀'])])),
    product_updated_at: '',
    update_hash: `h${r.int(5)}`,
    version: 1 + r.int(3),
    created_at: '2026-11-01T00:00:00.000Z',
    updated_at: '2026-11-02T00:00:00.000Z',
    vector_count: r.int(4),
    ...(r.int(2) ? { embedded_model: 'm1' } : {}),
    ...(r.int(2) ? { local_features: 1, visual_words: 2 } : {}),
    ...(r.int(2) ? { seen_import: r.pick(['imp_1', 'imp_2']), seen_row: r.int(100) } : {}),
    ...(r.int(4) === 0 ? { embedded_model: undefined } : {}),
  };
}

describe('DynamoDbProductStore against MemoryProductStore', () => {
  it('answers every random operation as the fake does', { timeout: 120_000 }, async () => {
    const r = random(SEED);
    const adapter = new DynamoDbProductStore(unprocessing(random(SEED + 7)), config.tables.products);
    const fake = new MemoryProductStore();
    const c = comparer('products');
    const feeds = [`p${SEED}-1`, `p${SEED}-2`];
    for (let i = 0; i < STEPS; i += 1) {
      const feedId = r.pick(feeds);
      const op = r.int(10);
      if (op <= 2) {
        // Up to 60 products: more than one BatchWriteItem of 25, ids repeated within a call at times.
        const products = Array.from({ length: r.pick([1, 2, 5, 30, 60]) }, () => randomProduct(r, feedId));
        await c.step(
          `putMany(${feedId}, [${products.map((p) => p.product_id.slice(0, 8)).join(',')}])`,
          () => adapter.putMany(structuredClone(products)),
          () => fake.putMany(structuredClone(products)),
        );
      } else if (op === 3) {
        const id = r.pick(PRODUCT_IDS);
        await c.step(
          `get(${feedId}, ${id.slice(0, 8)})`,
          () => adapter.get(feedId, id),
          () => fake.get(feedId, id),
        );
      } else if (op === 4) {
        // More than BatchGetItem's 100 keys at times, with repeats and ids never stored.
        const ids = r.some([...PRODUCT_IDS, 'missing'], r.pick([3, 150]));
        await c.step(
          `getMany(${feedId}, ${ids.length} ids)`,
          () => adapter.getMany(feedId, ids),
          () => fake.getMany(feedId, ids),
        );
      } else if (op === 5) {
        const ids = r.some([...PRODUCT_IDS, 'missing'], 4);
        await c.step(
          `deleteMany(${feedId}, [${ids.map((id) => id.slice(0, 8)).join(',')}])`,
          () => adapter.deleteMany(feedId, ids),
          () => fake.deleteMany(feedId, ids),
        );
      } else if (op === 6) {
        // A whole listing, page by page, each side following its own (opaque) cursor.
        const limit = r.pick([1, 2, 3, 7, 100]);
        const walk = async (store: typeof adapter | typeof fake) => {
          const pages: string[][] = [];
          let cursor: string | undefined;
          do {
            const page = await store.page(feedId, limit, cursor);
            pages.push(page.items.map((p) => canonical(p)));
            cursor = page.cursor;
          } while (cursor && pages.length < 50);
          return pages;
        };
        await c.step(
          `page walk(${feedId}, ${limit})`,
          () => walk(adapter),
          () => walk(fake),
        );
      } else if (op === 7) {
        const group = r.pick(['g1', 'g#2', '😀', ...PRODUCT_IDS.slice(0, 4)]);
        await c.step(
          `listGroup(${feedId}, ${group})`,
          () => adapter.listGroup(feedId, group),
          () => fake.listGroup(feedId, group),
        );
      } else if (op === 8) {
        const importId = r.pick(['imp_1', 'imp_2', 'imp_3']);
        // The port promises no order here: compared as sets.
        await c.step(
          `listUnseen(${feedId}, ${importId})`,
          async () => (await adapter.listUnseen(feedId, importId)).sort(),
          async () => (await fake.listUnseen(feedId, importId)).sort(),
        );
      } else if (r.int(6) === 0) {
        await c.step(
          `deleteFeed(${feedId})`,
          () => adapter.deleteFeed(feedId),
          () => fake.deleteFeed(feedId),
        );
      } else {
        await c.step(
          `hasProducts(${feedId})`,
          () => adapter.hasProducts(feedId),
          () => fake.hasProducts(feedId),
        );
      }
    }
    // Refused input: a cursor this listing never wrote, and the first page of a listing.
    for (const cursor of ['!!', '', 'bm90IGEgY3Vyc29y====']) {
      await c.step(
        `page(cursor ${JSON.stringify(cursor)})`,
        () => adapter.page(feeds[0]!, 2, cursor),
        () => fake.page(feeds[0]!, 2, cursor),
      );
    }
    expect(c.differences).toEqual([]);
  });
});

const IMPORT_IDS = ['imp_0mwz80pna_4f9c2a1b01', 'imp_0mwz80pnb_00', 'imp_A', 'imp_a', 'imp__', 'imp_-1'];

function randomRecord(r: Random, feedId: string): ImportRecord {
  const errors = Array.from({ length: r.pick([0, 1, 3]) }, () => ({
    row: r.pick([null, 1, 7]),
    ...(r.int(2) ? { productId: r.pick(PRODUCT_IDS) } : {}),
    message: r.pick(['', 'HTTP 404.', 'ü'.repeat(300)]),
    ...(r.int(2) ? { severity: r.pick(['error', 'warning'] as const) } : {}),
  }));
  return {
    feedId,
    importId: r.pick(IMPORT_IDS),
    status: r.pick(['queued', 'running', 'succeeded', 'failed'] as const),
    mode: r.pick(['full', 'incremental'] as const),
    source: r.int(2) ? { kind: 'inline' } : { kind: 'url', url: 'https://u:p@example.com/feed.xml?a=1' },
    ...(r.int(2) ? { format: r.pick(['csv', 'xml'] as const) } : {}),
    objectKey: `feeds/${feedId}/x`,
    total: r.int(1000),
    processed: r.int(1000),
    embedded: r.int(5),
    updated: 0,
    skipped: 0,
    failed: errors.length,
    removed: 0,
    errors: errors as ImportRecord['errors'],
    checkpointRow: r.int(1000),
    ...(r.int(3) === 0 ? { message: r.pick(['', 'boom']) } : {}),
    ...(r.int(3) === 0 ? { attempts: r.int(3) } : {}),
    ...(r.int(2) ? { feedCreatedAt: '2026-11-01T00:00:00.000Z' } : {}),
    ...(r.int(4) === 0 ? { startedAt: undefined } : {}),
    createdAt: '2026-11-01T00:00:00.000Z',
    updatedAt: '2026-11-01T00:00:00.000Z',
  };
}

describe('DynamoDbImportStore against MemoryImportStore', () => {
  it('answers every random operation as the fake does', { timeout: 120_000 }, async () => {
    const r = random(SEED + 1);
    const adapter = new DynamoDbImportStore(createDocumentClient(config), config.tables.imports);
    const fake = new MemoryImportStore();
    const c = comparer('imports');
    const feeds = [`i${SEED}-1`, `i${SEED}-2`];
    const t0 = Date.parse('2026-11-22T10:00:00Z');
    const at = (minutes: number) => new Date(t0 + minutes * 60_000);
    for (let i = 0; i < STEPS; i += 1) {
      const feedId = r.pick(feeds);
      const op = r.int(12);
      if (op <= 1) {
        const record = randomRecord(r, feedId);
        await c.step(
          `create(${record.importId})`,
          () => adapter.create(structuredClone(record)),
          () => fake.create(structuredClone(record)),
        );
      } else if (op <= 3) {
        const record = randomRecord(r, feedId);
        await c.step(
          `put(${record.importId}, ${record.status})`,
          () => adapter.put(structuredClone(record)),
          () => fake.put(structuredClone(record)),
        );
      } else if (op === 4) {
        const id = r.pick([...IMPORT_IDS, 'lease', 'x']);
        await c.step(
          `get(${id})`,
          () => adapter.get(feedId, id),
          () => fake.get(feedId, id),
        );
      } else if (op === 5) {
        const [limit, after] = [r.pick([1, 2, 10]), r.pick([undefined, ...IMPORT_IDS, 'imp_0'])];
        await c.step(
          `list(${limit}, ${after})`,
          () => adapter.list(feedId, limit, after),
          () => fake.list(feedId, limit, after),
        );
        await c.step(
          `page(${limit}, ${after})`,
          () => adapter.page(feedId, limit, after),
          () => fake.page(feedId, limit, after),
        );
      } else if (op === 6) {
        await c.step(
          `listUnfinished`,
          () => adapter.listUnfinished(feedId),
          () => fake.listUnfinished(feedId),
        );
      } else if (op === 7) {
        const id = r.pick(IMPORT_IDS);
        await c.step(
          `delete(${id})`,
          () => adapter.delete(feedId, id),
          () => fake.delete(feedId, id),
        );
      } else if (op === 8 && r.int(4) === 0) {
        await c.step(
          `deleteFeed`,
          () => adapter.deleteFeed(feedId),
          () => fake.deleteFeed(feedId),
        );
      } else if (op <= 9) {
        const [owner, until, now] = [r.pick(['o1', 'o2']), at(r.int(20)), at(r.int(20))];
        await c.step(
          `takeLease(${owner}, +${(until.getTime() - t0) / 60_000}, +${(now.getTime() - t0) / 60_000})`,
          () => adapter.takeLease(feedId, owner, until, now),
          () => fake.takeLease(feedId, owner, until, now),
        );
      } else if (op === 10) {
        const [owner, until] = [r.pick(['o1', 'o2']), at(r.int(20))];
        await c.step(
          `renewLease(${owner})`,
          () => adapter.renewLease(feedId, owner, until),
          () => fake.renewLease(feedId, owner, until),
        );
      } else {
        const owner = r.pick(['o1', 'o2', undefined]);
        await c.step(
          `releaseLease(${owner})`,
          () => adapter.releaseLease(feedId, owner),
          () => fake.releaseLease(feedId, owner),
        );
      }
      if (i % 25 === 0)
        await c.step(
          'leasedFeeds',
          async () => (await adapter.leasedFeeds()).filter((f) => feeds.includes(f)).sort(),
          async () => (await fake.leasedFeeds()).sort(),
        );
    }
    expect(c.differences).toEqual([]);
  });

  it('gives a free lease to exactly one of many racing owners', async () => {
    const adapter = new DynamoDbImportStore(createDocumentClient(config), config.tables.imports);
    const now = new Date('2026-11-22T10:00:00Z');
    const until = new Date('2026-11-22T10:10:00Z');
    for (let round = 0; round < 5; round += 1) {
      const feedId = `race${SEED}-${round}`;
      const won = await Promise.all(
        Array.from({ length: 20 }, (_, i) => adapter.takeLease(feedId, `o${i}`, until, now)),
      );
      expect(won.filter(Boolean)).toHaveLength(1);
      // Only the holder renews it; the others' renewals are refused.
      const renewed = await Promise.all(won.map((_, i) => adapter.renewLease(feedId, `o${i}`, until)));
      expect(renewed).toEqual(won);
    }
  });
});

/** The FeedStore contract of lib/ports.ts as a map (there is no fake: use cases stub `get` only). */
class FeedModel {
  rows = new Map<string, Feed>();
  async create(feed: Feed) {
    if (this.rows.has(feed.feedId))
      throw Object.assign(new Error(), { name: 'DomainError', code: 'conflict' });
    this.rows.set(feed.feedId, structuredClone(feed));
  }
  async get(feedId: string) {
    return structuredClone(this.rows.get(feedId));
  }
  async put(feed: Feed, expected?: string | null) {
    const now = this.rows.get(feed.feedId);
    if (!now || now.deletingAt || now.createdAt !== feed.createdAt) throw notFound('feed_not_found');
    if (expected !== undefined && (now.updatedAt ?? null) !== expected)
      throw Object.assign(new Error(), { name: 'DomainError', code: 'conflict' });
    this.rows.set(feed.feedId, structuredClone(feed));
  }
  async markDeleting(feedId: string, at: Date, createdAt?: string, updatedAt?: string | null) {
    const now = this.rows.get(feedId);
    if (
      !now ||
      (createdAt !== undefined && now.createdAt !== createdAt) ||
      (updatedAt !== undefined && (now.updatedAt ?? null) !== updatedAt)
    )
      throw notFound('feed_not_found');
    now.deletingAt ??= at.toISOString();
  }
  async delete(feedId: string, createdAt?: string) {
    if (createdAt === undefined || this.rows.get(feedId)?.createdAt === createdAt) this.rows.delete(feedId);
  }
}

function notFound(code: string) {
  return Object.assign(new Error(), { name: 'NotFoundError', code });
}

describe('DynamoDbFeedStore against the FeedStore contract', () => {
  it('answers every random operation as the contract says', { timeout: 60_000 }, async () => {
    const r = random(SEED + 2);
    const adapter = new DynamoDbFeedStore(createDocumentClient(config), config.tables.feeds);
    const model = new FeedModel();
    const c = comparer('feeds');
    const ids = [`f${SEED}-a`, `f${SEED}-b`];
    const times = ['2026-11-01T00:00:00.000Z', '2026-11-02T00:00:00.000Z', '2026-11-03T00:00:00.000Z'];
    const feed = (): Feed => ({
      feedId: r.pick(ids),
      name: r.pick(['n', 'ü', '']),
      plan: r.pick(['free', 'pro', 'enterprise'] as const),
      ...(r.int(3) === 0 ? { hourlyLimit: r.pick([0, 10]) } : {}),
      domains: r.some(['a.example.com', '*.b.example'], 2),
      requireOrigin: r.int(2) === 0,
      createdAt: r.pick(times.slice(0, 2)),
      updatedAt: r.pick(times),
    });
    for (let i = 0; i < STEPS / 2; i += 1) {
      const op = r.int(6);
      const id = r.pick(ids);
      const created = r.pick([undefined, ...times.slice(0, 2)]);
      const updated = r.pick([undefined, null, ...times]);
      if (op === 0) {
        const f = feed();
        await c.step(
          `create(${f.feedId}, ${f.createdAt})`,
          () => adapter.create(f),
          () => model.create(f),
        );
      } else if (op === 1) {
        const [f, expected] = [feed(), r.pick([undefined, null, ...times])];
        await c.step(
          `put(${f.feedId}, ${f.createdAt}, expected ${expected})`,
          () => adapter.put(f, expected),
          () => model.put(f, expected),
        );
      } else if (op === 2) {
        const when = new Date(Date.parse(times[2]!) + r.int(3) * 1000);
        await c.step(
          `markDeleting(${id}, ${created}, ${updated})`,
          () => adapter.markDeleting(id, when, created, updated),
          () => model.markDeleting(id, when, created, updated),
        );
      } else if (op === 3) {
        await c.step(
          `delete(${id}, ${created})`,
          () => adapter.delete(id, created),
          () => model.delete(id, created),
        );
      } else {
        await c.step(
          `get(${id}, fresh)`,
          () => adapter.get(id, { fresh: true }),
          () => model.get(id),
        );
      }
    }
    expect(c.differences).toEqual([]);
  });
});

describe('DynamoDbKeyStore against the KeyStore contract', () => {
  it('answers every random operation as a map of keys would', { timeout: 60_000 }, async () => {
    const r = random(SEED + 3);
    const adapter = new DynamoDbKeyStore(createDocumentClient(config), config.tables.keys);
    const model = new Map<string, SearchKey>();
    const c = comparer('keys');
    const ids = [`k${SEED}-1`, `k${SEED}-2`, `k${SEED}-3`];
    const feeds = [`kf${SEED}-1`, `kf${SEED}-2`];
    const byId = (keys: SearchKey[]) => keys.sort((a, b) => (a.searchId < b.searchId ? -1 : 1));
    for (let i = 0; i < STEPS / 2; i += 1) {
      const op = r.int(7);
      const id = r.pick(ids);
      const at = new Date(Date.parse('2026-11-22T00:00:00Z') + r.int(5) * 1000);
      if (op === 0) {
        const key: SearchKey = {
          searchId: id,
          feedId: r.pick(feeds),
          name: r.pick(['web', '']),
          createdAt: at.toISOString(),
          ...(r.int(2) ? { feedCreatedAt: '2026-11-01T00:00:00.000Z' } : {}),
        };
        // A second create of an id is not documented: only the first one's outcome is compared.
        if (model.has(id)) continue;
        await c.step(
          `create(${id})`,
          () => adapter.create(key),
          async () => void model.set(id, structuredClone(key)),
        );
      } else if (op === 1) {
        await c.step(
          `revoke(${id})`,
          () => adapter.revoke(id, at),
          async () => {
            const key = model.get(id);
            if (!key) throw notFound('not_found');
            // Revoked once: "kept, so a revoked id is told apart"; the adapter keeps the first time.
            key.revokedAt ??= at.toISOString();
          },
        );
      } else if (op === 2) {
        await c.step(
          `touch(${id})`,
          () => adapter.touch(id, at),
          async () => {
            const key = model.get(id);
            if (key) key.lastUsedAt = at.toISOString();
          },
        );
      } else if (op === 3) {
        await c.step(
          `delete(${id})`,
          () => adapter.delete(id),
          async () => void model.delete(id),
        );
      } else if (op === 4) {
        const feedId = r.pick(feeds);
        await c.step(
          `listByFeed(${feedId})`,
          async () => byId(await adapter.listByFeed(feedId)),
          async () => byId([...model.values()].filter((k) => k.feedId === feedId)),
        );
        if (r.int(4) === 0)
          await c.step(
            `deleteByFeed(${feedId})`,
            () => adapter.deleteByFeed(feedId),
            async () => {
              for (const [k, v] of model) if (v.feedId === feedId) model.delete(k);
            },
          );
      } else {
        await c.step(
          `get(${id})`,
          () => adapter.get(id),
          async () => structuredClone(model.get(id)),
        );
      }
    }
    expect(c.differences).toEqual([]);
  });
});

describe('DynamoDbUsageStore against the UsageStore contract', () => {
  it('counts concurrent records exactly and lists inclusive day ranges', { timeout: 60_000 }, async () => {
    const r = random(SEED + 4);
    const adapter = new DynamoDbUsageStore(createDocumentClient(config), config.tables.usage);
    const feedId = `u${SEED}`;
    const model = new Map<string, UsageRow>();
    const endpoints: Endpoint[] = ['search_image', 'detect', 'related', 'root_search'];
    const outcomes: UsageOutcome[] = ['ok', 'client_error', 'server_error', 'rate_limited'];
    const field = { ok: 'ok', client_error: 'clientErrors', server_error: 'serverErrors' } as const;
    const days = ['2026-10-31', '2026-11-01', '2026-11-09', '2026-11-10', '2026-12-01'];
    const entries = Array.from({ length: 400 }, () => ({
      feedId,
      feedCreatedAt: '2026-10-01T00:00:00.000Z',
      searchId: r.pick(['vps_a', 'vps_B', 'vps_-_']),
      endpoint: r.pick(endpoints),
      outcome: r.pick(outcomes),
      at: new Date(`${r.pick(days)}T${r.pick(['00:00:00.000', '23:59:59.999', '12:00:00.000'])}Z`),
    }));
    for (const e of entries) {
      const day = e.at.toISOString().slice(0, 10);
      const key = `${day}#${e.endpoint}#${e.searchId}`;
      const row = model.get(key) ?? {
        day,
        endpoint: e.endpoint,
        searchId: e.searchId,
        feedCreatedAt: e.feedCreatedAt,
        requests: 0,
        ok: 0,
        clientErrors: 0,
        serverErrors: 0,
        rateLimited: 0,
      };
      row.requests += 1;
      row[e.outcome === 'rate_limited' ? 'rateLimited' : field[e.outcome]] += 1;
      model.set(key, row);
    }
    // All at once, 50 in flight: every increment must land (atomic ADDs).
    for (let i = 0; i < entries.length; i += 50)
      await Promise.all(entries.slice(i, i + 50).map((e) => adapter.record(e)));
    const c = comparer('usage');
    const order = (rows: UsageRow[]) => rows.map((x) => canonical(x)).sort();
    for (let i = 0; i < 30; i += 1) {
      const [a, b] = [r.pick(days), r.pick(days)];
      const [from, to] = a <= b ? [a, b] : [b, a];
      await c.step(
        `list(${from}, ${to})`,
        async () => order(await adapter.list(feedId, from, to)),
        async () => order([...model.values()].filter((x) => x.day >= from && x.day <= to)),
      );
    }
    await c.step(
      'deleteFeed',
      async () => {
        await adapter.deleteFeed(feedId);
        return adapter.list(feedId, '2000-01-01', '2999-12-31');
      },
      async () => [],
    );
    expect(c.differences).toEqual([]);
  });

  it('never admits more than the limit when consumers race on random limits', async () => {
    const r = random(SEED + 5);
    const db = createDocumentClient(config);
    const stores = [db, createDocumentClient(config)].map(
      (d) => new DynamoDbUsageStore(d, config.tables.usage),
    );
    for (let round = 0; round < 6; round += 1) {
      const [limit, n] = [1 + r.int(30), 10 + r.int(60)];
      const now = new Date(Date.parse('2026-11-22T10:00:00Z') + r.int(3_600_000));
      const decisions = await Promise.all(
        Array.from({ length: n }, (_, i) => stores[i % 2]!.consume(`race${SEED}-${round}`, limit, now)),
      );
      expect(decisions.filter((d) => d.allowed)).toHaveLength(Math.min(limit, n));
    }
  });
});

describe('DynamoDbIdempotencyStore against the IdempotencyStore contract', () => {
  it('answers random claims, answers and abandons as the contract says', { timeout: 60_000 }, async () => {
    const r = random(SEED + 6);
    const adapter = new DynamoDbIdempotencyStore(createDocumentClient(config), config.tables.idempotency);
    type Held = { fingerprint: string; owner: string; until: number; expires: number; response?: unknown };
    const model = new Map<string, Held>();
    const c = comparer('idempotency');
    const keys = [`id${SEED}-1`, `id${SEED}-2`];
    let clock = Date.parse('2026-11-22T10:00:00Z');
    const [lockMs, ttlMs] = [60_000, 600_000];
    for (let i = 0; i < STEPS / 2; i += 1) {
      // Whole seconds apart: the adapter keeps expiries in seconds, the contract's `ttlMs` in ms.
      clock += r.pick([0, 1000, 61_000, 601_000]);
      const now = new Date(clock);
      const key = r.pick(keys);
      const owner = r.pick(['o1', 'o2', 'o3']);
      const op = r.int(3);
      if (op === 0) {
        const fingerprint = r.pick(['POST /feeds {}', 'POST /feeds {"a":1}']);
        await c.step(
          `begin(${key}, ${owner}, ${fingerprint})`,
          () => adapter.begin(key, { fingerprint, owner, now, lockMs, ttlMs }),
          async () => {
            const held = model.get(key);
            const live = held && held.expires >= Math.floor(clock / 1000);
            if (!live || (!held.response && held.until < clock && held.fingerprint === fingerprint)) {
              model.set(key, {
                fingerprint,
                owner,
                until: clock + lockMs,
                expires: Math.ceil((clock + ttlMs) / 1000),
              });
              return { kind: 'started' };
            }
            if (!held.response && held.owner === owner) return { kind: 'started' };
            if (held.fingerprint !== fingerprint) return { kind: 'mismatch' };
            if (held.response) return { kind: 'replay', response: held.response };
            return { kind: 'in_progress' };
          },
        );
      } else if (op === 1) {
        const response = { statusCode: 201, headers: { 'content-type': 'x' }, body: `{"n":${i}}` };
        await c.step(
          `finish(${key}, ${owner})`,
          () => adapter.finish(key, owner, response),
          async () => {
            const held = model.get(key);
            if (held && held.owner === owner && !held.response) held.response = response;
          },
        );
      } else {
        await c.step(
          `abandon(${key}, ${owner})`,
          () => adapter.abandon(key, owner),
          async () => {
            const held = model.get(key);
            if (held && held.owner === owner && !held.response) model.delete(key);
          },
        );
      }
    }
    expect(c.differences).toEqual([]);
  });

  it('lets exactly one of many racing requests claim a key', async () => {
    const adapter = new DynamoDbIdempotencyStore(createDocumentClient(config), config.tables.idempotency);
    const now = new Date('2026-11-22T10:00:00Z');
    for (let round = 0; round < 5; round += 1) {
      const claims = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          adapter.begin(`race${SEED}-${round}`, {
            fingerprint: 'POST /feeds {}',
            owner: `o${i}`,
            now,
            lockMs: 60_000,
            ttlMs: 86_400_000,
          }),
        ),
      );
      expect(claims.filter((claim) => claim.kind === 'started')).toHaveLength(1);
      expect(claims.filter((claim) => claim.kind !== 'started').every((x) => x.kind === 'in_progress')).toBe(
        true,
      );
    }
  });
});

describe('differences the model check found, minimized', () => {
  const minimal = (productId: string, title = 'T') => ({
    ...randomProduct(random(0), 'min'),
    product_id: productId,
    group: productId,
    item_group_id: '',
    title,
  });

  it('keeps the last product of an id given twice to putMany, as the fake does', async () => {
    const stores = [
      new DynamoDbProductStore(createDocumentClient(config), config.tables.products),
      new MemoryProductStore(),
    ];
    for (const store of stores) {
      // Before: BatchWriteItem refused the batch ("Provided list of item keys contains duplicates").
      await store.putMany([minimal('dup', 'first'), minimal('dup', 'second')]);
      expect((await store.get('min', 'dup'))?.title).toBe('second');
    }
  });

  it('pages product ids in the same order on both sides, and refuses a foreign cursor on both', async () => {
    const stores = [
      new DynamoDbProductStore(createDocumentClient(config), config.tables.products),
      new MemoryProductStore(),
    ];
    for (const store of stores) {
      await store.putMany(['😀', '\uff01', 'a'].map((id) => ({ ...minimal(id), feed_id: 'order' })));
      const first = await store.page('order', 2);
      const rest = await store.page('order', 2, first.cursor);
      // DynamoDB's order is by UTF-8 bytes: U+FF01 (EF BC 81) before U+1F600 (F0 9F 98 80).
      expect([...first.items, ...rest.items].map((p) => p.product_id)).toEqual(['a', '\uff01', '😀']);
      expect(rest.cursor).toBeUndefined();
      await expect(store.page('order', 2, 'a')).rejects.toMatchObject({ name: 'ValidationError' });
    }
  });

  it('refuses a second import of one id, finds only `imp_` ids and lists them in key order', async () => {
    const stores = [
      new DynamoDbImportStore(createDocumentClient(config), config.tables.imports),
      new MemoryImportStore(),
    ];
    for (const store of stores) {
      const record = (importId: string): ImportRecord => ({
        ...randomRecord(random(0), 'min'),
        importId,
        status: 'queued',
      });
      await store.create(record('imp_a'));
      await expect(store.create(record('imp_a'))).rejects.toMatchObject({ code: 'conflict' });
      await store.put(record('imp_B'));
      await store.put(record('imp__'));
      await store.put(record('other'));
      expect(await store.get('min', 'other')).toBeUndefined();
      // Byte order ('B' < '_' < 'a'), not localeCompare's ('_' < 'a' < 'B').
      expect((await store.list('min', 10)).map((r) => r.importId)).toEqual(['imp_a', 'imp__', 'imp_B']);
      expect((await store.listUnfinished('min')).map((r) => r.importId)).toEqual(['imp_B', 'imp__', 'imp_a']);
      expect((await store.page('min', 1, 'imp_a')).records.map((r) => r.importId)).toEqual(['imp__']);
    }
  });
});
