import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDocumentClient } from '#lib/adapters/dynamodb-client.ts';
import { DynamoDbImportStore } from '#lib/adapters/dynamodb-import-store.ts';
import { DynamoDbProductStore } from '#lib/adapters/dynamodb-product-store.ts';
import { newImportId, type ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { Product } from '#lib/domain/products.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';

let stop: () => Promise<void>;
let products: DynamoDbProductStore;
let imports: DynamoDbImportStore;

beforeAll(async () => {
  const stores = await startTestStores();
  stop = stores.stop;
  const db = createDocumentClient(stores.config);
  products = new DynamoDbProductStore(db, stores.config.tables.products);
  imports = new DynamoDbImportStore(db, stores.config.tables.imports);
});

afterAll(async () => {
  await stop?.();
});

function product(
  feedId: string,
  productId: string,
  group = productId,
  extra: Partial<Product> = {},
): Product {
  return {
    feed_id: feedId,
    id: crypto.randomUUID(),
    product_id: productId,
    item_group_id: group === productId ? '' : group,
    group,
    title: `T ${productId}`,
    short_title: '',
    description: '',
    age_group: '',
    availability: 'in_stock',
    brand: '',
    color: '',
    condition: '',
    gender: '',
    category: '',
    product_type: '',
    gtin: '',
    mpn: '',
    material: '',
    size: '',
    image_link: 'https://cdn/x.jpg',
    additional_image_links: [],
    sb_image_url: '',
    link: '',
    price: 100,
    sale_price: null,
    currency: 'USD',
    shipping_price: null,
    shipping_currency: '',
    shipping_country: '',
    shipping_weight: '',
    product_highlight: [],
    metadata: { campaign: 'x' },
    product_updated_at: '',
    update_hash: 'h',
    version: 1,
    created_at: '2026-11-22T00:00:00.000Z',
    updated_at: '2026-11-22T00:00:00.000Z',
    vector_count: 1,
    ...extra,
  };
}

describe('DynamoDbProductStore on the DynamoDB-protocol server', () => {
  it('round-trips products in batches larger than one request', async () => {
    // Prepare
    // (p007 a stale mark: its hash before the mark is kept for the import that redoes it.)
    const mark = { update_hash: '', stale_hash: 'h', embedded_model: 'clip@1' };
    const many = Array.from({ length: 130 }, (_, i) =>
      product('f1', `p${String(i).padStart(3, '0')}`, undefined, i === 7 ? mark : {}),
    );
    // Act
    await products.putMany(many);
    const found = await products.getMany(
      'f1',
      many.map((p) => p.product_id),
    );
    // Assess
    expect(found.size).toBe(130);
    expect(found.get('p007')).toEqual(many[7]);
    expect(await products.get('f1', 'p129')).toEqual(many[129]);
    expect(await products.hasProducts('f1')).toBe(true);
    expect(await products.hasProducts('nobody')).toBe(false);
  });

  it('stores metadata whatever its keys are called, JavaScript object members included', async () => {
    // A feed's metadata.constructor column: as a plain object's own key, the marshaller refused the write.
    // A `__proto__` key: the marshaller assigned it to the prototype's setter, and the entry was gone.
    const named = product('f-meta', 'm1', 'm1', {
      metadata: Object.fromEntries([
        ['constructor', 'builder'],
        ['toString', 'x'],
        ['__proto__', 'p'],
        ['hasOwnProperty', 'y'],
        ['campaign', 'z'],
      ]),
    });

    await products.putMany([named]);

    for (const stored of [
      await products.get('f-meta', 'm1'),
      (await products.getMany('f-meta', ['m1'])).get('m1'),
      (await products.page('f-meta', 10)).items[0],
    ]) {
      expect(stored).toEqual(named);
      expect(Object.entries(stored!.metadata)).toEqual(Object.entries(named.metadata));
      expect(Object.getPrototypeOf(stored!.metadata)).toBe(Object.prototype);
    }
  });

  it('lists the variants of an item group in product_id order, never another feed’s', async () => {
    await products.putMany([
      product('f2', 'b', 'g'),
      product('f2', 'a', 'g'),
      product('f2', 'c'),
      product('f3', 'a', 'g'),
    ]);
    expect((await products.listGroup('f2', 'g')).map((p) => p.product_id)).toEqual(['a', 'b']);
  });

  it('pages through a feed with an opaque cursor', async () => {
    await products.putMany(['a', 'b', 'c', 'd', 'e'].map((id) => product('f4', id)));
    const first = await products.page('f4', 2);
    const second = await products.page('f4', 2, first.cursor);
    const third = await products.page('f4', 2, second.cursor);
    expect([...first.items, ...second.items, ...third.items].map((p) => p.product_id)).toEqual([
      'a',
      'b',
      'c',
      'd',
      'e',
    ]);
    expect(third.cursor).toBeUndefined();
    // A listing that ends on a full page has no cursor to an empty one
    const firstFour = await products.page('f4', 4);
    const lastOne = await products.page('f4', 4, firstFour.cursor);
    expect(lastOne.items.map((p) => p.product_id)).toEqual(['e']);
    expect(lastOne.cursor).toBeUndefined();
    expect((await products.page('f4', 5)).cursor).toBeUndefined();
  });

  it('lists products not seen by an import and deletes them', async () => {
    await products.putMany([
      product('f5', 'a', 'a', { seen_import: 'imp2' }),
      product('f5', 'b', 'b', { seen_import: 'imp1' }),
      product('f5', 'c'),
    ]);
    const unseen = await products.listUnseen('f5', 'imp2');
    expect(unseen.sort()).toEqual(['b', 'c']);
    await products.deleteMany('f5', unseen);
    expect((await products.page('f5', 10)).items.map((p) => p.product_id)).toEqual(['a']);
    await products.deleteFeed('f5');
    expect(await products.hasProducts('f5')).toBe(false);
  });

  it("does not start a feed's deletion whose signal has aborted (a deletion out of its time)", async () => {
    await products.putMany([product('f6', 'a')]);
    await expect(products.deleteFeed('f6', { signal: AbortSignal.abort() })).rejects.toThrow();
    expect(await products.hasProducts('f6')).toBe(true);
  });
});

describe('DynamoDbImportStore on the DynamoDB-protocol server', () => {
  const record = (importId: string): ImportRecord => ({
    feedId: 'f1',
    importId,
    status: 'queued',
    mode: 'full',
    source: { kind: 'inline' },
    format: 'csv',
    objectKey: `imports/f1/${importId}/feed`,
    total: 0,
    processed: 0,
    embedded: 0,
    updated: 0,
    skipped: 0,
    failed: 0,
    removed: 0,
    errors: [],
    checkpointRow: 0,
    createdAt: '2026-11-22T00:00:00.000Z',
    updatedAt: '2026-11-22T00:00:00.000Z',
  });

  it("lists as many imports as asked past DynamoDB's 1 MB page (records of 100 long errors)", async () => {
    // ~60 KB a record: a query page holds ~17 of them
    const errors = Array.from({ length: 100 }, (_, i) => ({
      row: i + 2,
      productId: `p${i}`,
      message: `image_link https://cdn.example.com/${'x'.repeat(440)}.jpg: HTTP 404.`,
    }));
    const ids = Array.from({ length: 40 }, (_, i) => newImportId(new Date(Date.UTC(2026, 0, 1, 0, 0, i))));
    for (const importId of ids) await imports.create({ ...record(importId), feedId: 'big', errors });
    const first = await imports.list('big', 25);
    expect(first.map((r) => r.importId)).toEqual(ids.toReversed().slice(0, 25));
    const rest = await imports.list('big', 25, first.at(-1)!.importId);
    expect(rest.map((r) => r.importId)).toEqual(ids.toReversed().slice(25));
    // The API's pages stop at DynamoDB's 1 MB (a response stays inside Lambda's 6 MB) and say more follow
    const paged: string[] = [];
    let after: string | undefined;
    for (let more = true; more;) {
      const page = await imports.page('big', 25, after);
      expect(page.records.length).toBeLessThan(25);
      paged.push(...page.records.map((r) => r.importId));
      after = page.records.at(-1)?.importId;
      more = page.more;
    }
    expect(paged).toEqual(ids.toReversed());
    await imports.deleteFeed('big');
  });

  it('creates once, updates progress and lists newest first', async () => {
    const older = newImportId(new Date('2026-11-22T00:00:00Z'));
    const newer = newImportId(new Date('2026-11-22T00:00:01Z'));
    await imports.create(record(older));
    await imports.create(record(newer));
    await expect(imports.create(record(newer))).rejects.toMatchObject({ code: 'conflict' });
    await imports.put({
      ...record(older),
      status: 'running',
      processed: 5,
      errors: [{ row: 2, productId: 'x', message: 'bad' }],
    });
    expect(await imports.get('f1', older)).toMatchObject({
      status: 'running',
      processed: 5,
      errors: [{ row: 2, productId: 'x', message: 'bad' }],
    });
    expect((await imports.list('f1', 10)).map((r) => r.importId)).toEqual([newer, older]);
    await imports.delete('f1', newer);
    expect((await imports.list('f1', 10)).map((r) => r.importId)).toEqual([older]);
    await imports.deleteFeed('f1');
    expect(await imports.list('f1', 10)).toEqual([]);
  });

  it("lists a feed's unfinished imports oldest first, never its lease", async () => {
    const ids = [0, 1, 2].map((s) => newImportId(new Date(Date.UTC(2026, 10, 22, 0, 0, s))));
    await imports.create(record(ids[2]!));
    await imports.create({ ...record(ids[1]!), status: 'succeeded' });
    await imports.create({ ...record(ids[0]!), status: 'running' });
    await imports.takeLease(
      'f1',
      'runner',
      new Date('2026-11-22T01:00:00Z'),
      new Date('2026-11-22T00:00:00Z'),
    );

    expect((await imports.listUnfinished('f1')).map((r) => r.importId)).toEqual([ids[0], ids[2]]);
    expect((await imports.list('f1', 10)).map((r) => r.importId)).toEqual([ids[2], ids[1], ids[0]]);
    // A page after an import id: the older ones
    expect((await imports.list('f1', 1, ids[2])).map((r) => r.importId)).toEqual([ids[1]]);
    expect((await imports.list('f1', 10, ids[1])).map((r) => r.importId)).toEqual([ids[0]]);
    expect(await imports.get('f1', 'lease')).toBeUndefined();
    // The feed's deletion holds the lease while it deletes the imports, and gives it up itself.
    await imports.deleteFeed('f1');
    expect(await imports.list('f1', 10)).toEqual([]);
    expect(await imports.takeLease('f1', 'next', new Date('2026-11-22T01:00:00Z'), new Date(0))).toBe(false);
    await imports.releaseLease('f1', 'runner');
    expect(await imports.takeLease('f1', 'next', new Date('2026-11-22T01:00:00Z'), new Date(0))).toBe(true);
    await imports.releaseLease('f1');
  });

  it('gives the lease to one owner at a time until it expires or is given up', async () => {
    const at = (minute: number) => new Date(Date.UTC(2026, 10, 22, 0, minute));
    const take = (owner: string, now: number) => imports.takeLease('lf', owner, at(now + 10), at(now));
    const raced = await Promise.all(['a', 'b', 'c', 'd'].map((owner) => take(owner, 0)));
    expect(raced.filter(Boolean)).toHaveLength(1);
    const holder = ['a', 'b', 'c', 'd'][raced.indexOf(true)]!;
    const other = holder === 'a' ? 'b' : 'a';

    expect(await imports.renewLease('lf', holder, at(15))).toBe(true);
    expect(await imports.renewLease('lf', other, at(15))).toBe(false);
    expect(await take(other, 12)).toBe(false);
    await imports.releaseLease('lf', other); // not the holder's: no effect
    expect(await take(other, 14)).toBe(false);
    expect(await take(other, 16)).toBe(true); // expired
    await imports.releaseLease('lf', other);
    expect(await take(holder, 17)).toBe(true);
    await imports.releaseLease('lf');
    expect(await take(other, 18)).toBe(true);
    expect(await imports.leasedFeeds()).toContain('lf');
    await imports.releaseLease('lf');
    expect(await imports.leasedFeeds()).not.toContain('lf');
  });
});
