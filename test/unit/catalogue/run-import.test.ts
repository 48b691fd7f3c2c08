import { describe, expect, it } from 'vitest';
import {
  FetchError,
  importObjectKeys,
  importView,
  type ImportRecord,
} from '#lib/domain/catalogue/imports.ts';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { capErrors, ImportDeferred, runImport, runTriggeredImport } from '#lib/ingest/run-import.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import { CATALOGUE_FEATURES_VERSION } from '#lib/vision/local-features/recipe.ts';
import { vectorOf, world, type World } from './fakes.ts';

const FEED = 'shop';
const img = (name: string) => `https://cdn.example/${name}.jpg`;

function filesFor(...names: string[]): Map<string, Buffer> {
  return new Map(names.map((name) => [img(name), Buffer.from(`image ${name}`)]));
}

function jsonl(rows: Record<string, unknown>[]): string {
  return rows.map((row) => JSON.stringify(row)).join('\n');
}

const product = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  title: `Product ${id}`,
  image_link: img(id),
  price: '10.00 USD',
  ...extra,
});

/** The embedder refuses images whose bytes start with TRUNCATED (a header that reads, pixels that do not). */
function refuseTruncated(w: World): void {
  w.embedder.embed = async (images: Buffer[]) => {
    if (images.some((image) => image.toString().startsWith('TRUNCATED')))
      throw new InvalidImageError({
        reason: 'undecodable',
        problem: 'the image could not be decoded (it may be damaged or cut short)',
      });
    return images.map((image) => vectorOf(image));
  };
}

/** Queues an import (as the admin API does) without running it. */
function queue(w: World, request: Parameters<typeof startImport>[2]): Promise<ImportRecord> {
  return startImport(
    {
      feeds: w.feeds,
      imports: w.imports,
      objects: w.objects,
      dispatcher: { dispatch: async () => undefined },
      clock: w.deps.clock,
    },
    FEED,
    request,
  );
}

/** Queues an inline JSON Lines import of `content` without running it. */
function queueInline(
  w: World,
  content: string,
  mode: 'full' | 'incremental' = 'full',
): Promise<ImportRecord> {
  return queue(w, { content, format: 'jsonl', mode });
}

async function importInline(
  w: World,
  content: string,
  mode: 'full' | 'incremental' = 'full',
): Promise<ImportRecord> {
  const queued = await queueInline(w, content, mode);
  return runImport(w.deps, FEED, queued.importId);
}

/**
 * Serves `content` as the feed file at https://shop.example/feed.jsonl in 100 parts, `gap` ms apart,
 * stopping with FetchError('stopped.') when the fetch's signal aborts, as the HTTP fetcher does.
 * `started` is called as the download starts; `parts()` counts the parts read.
 */
function slowFeedFile(w: World, content: string) {
  const bytes = Buffer.from(content);
  const download = { started: () => undefined as unknown, gap: 100, parts: () => parts };
  let parts = 0;
  w.fetcher.open = async (url, _limits, options: { signal?: AbortSignal } = {}) => {
    download.started();
    const { signal } = options;
    const size = Math.ceil(bytes.length / 100);
    return {
      body: (async function* () {
        for (let i = 0; i < 100; i += 1) {
          await new Promise((resolve) => setTimeout(resolve, download.gap));
          if (signal?.aborted) throw new FetchError('stopped.');
          parts += 1;
          yield bytes.subarray(i * size, (i + 1) * size);
        }
      })(),
      contentType: undefined,
      url,
    };
  };
  return download;
}

describe('runImport', () => {
  it('counts the row where a file cut short ends in its total, as it does in processed', async () => {
    // Prepare: a JSON array never closed, its second element cut part way
    const w = world(filesFor('a'));
    const content = `[${JSON.stringify(product('a'))}, {"id": "b", "ti`;
    const queued = await queue(w, { content, format: 'json', mode: 'incremental' });

    // Act
    const record = await runImport(w.deps, FEED, queued.importId);

    // Assess: progress never passes its total
    expect(record).toMatchObject({ total: 2, processed: 2, embedded: 1, failed: 1 });
    expect(record.errors).toEqual([expect.objectContaining({ row: 2 })]);
  });

  it('counts and reports the row where a file cut short ends once when a run resumes after it', async () => {
    // Prepare: a run that saved the chunk holding the cut-short row, then died before its final status
    const w = world(filesFor('a'));
    const content = `[${JSON.stringify(product('a'))}, {"id": "b", "ti`;
    const queued = await queue(w, { content, format: 'json', mode: 'incremental' });
    w.imports.failOnPut = w.imports.puts + 4; // running, total, chunk 1 (rows 1–2) ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ status: 'running', checkpointRow: 2 });
    w.imports.failOnPut = undefined;

    // Act
    const record = await runImport(w.deps, FEED, queued.importId);

    // Assess: as an uninterrupted run
    expect(record).toMatchObject({ total: 2, processed: 2, embedded: 1, failed: 1 });
    expect(record.errors).toEqual([expect.objectContaining({ row: 2 })]);
  });

  it('imports products whose metadata names it does not keep, noting each name once, at its first row', async () => {
    // Prepare: a column every row has, and one only the last has
    const w = world(filesFor('a', 'b', 'c'));
    const feed = jsonl([
      product('a', { 'metadata.Campaign Name': 'winter' }),
      product('b', { 'metadata.Campaign Name': 'summer' }),
      product('c', { 'metadata.Campaign Name': 'autumn', 'metadata.a.b': 'y' }),
    ]);
    // Act
    const record = await importInline(w, feed);
    // Assess: imported, not failed; the notes name the first row of each
    expect(record).toMatchObject({ status: 'succeeded', embedded: 3, failed: 0 });
    const rule = 'is not kept: a metadata name is 1–64 letters, digits, "_" or "-".';
    expect(record.errors).toEqual([
      // Warnings: the products were imported.
      { row: 1, productId: 'a', message: `metadata "Campaign Name" ${rule}`, severity: 'warning' },
      { row: 3, productId: 'c', message: `metadata "a.b" ${rule}`, severity: 'warning' },
    ]);
  });

  /** Runs the import until a chunk past its checkpoint is saved, then pauses it (as a worker's deadline). */
  async function runOneChunk(w: World, importId: string): Promise<void> {
    const pause = new AbortController();
    const before = (await w.imports.get(FEED, importId))!.checkpointRow;
    const onProgress = (record: ImportRecord) => {
      if (record.checkpointRow > before) pause.abort();
    };
    await expect(
      runImport({ ...w.deps, signal: pause.signal, onProgress }, FEED, importId),
    ).rejects.toThrow();
  }

  it('notes a left-out metadata name once per import, counting the notes of the runs before a resumed one', async () => {
    // Prepare: 12 rows (chunks of 3), each with the same 11 names the import does not keep; one row fails
    const ids = Array.from({ length: 12 }, (_, i) => `p${i + 1}`);
    const w = world(filesFor(...ids));
    // (Names with line breaks among them: a note quoting one must still be read back as a note.)
    const bad = Object.fromEntries(
      Array.from({ length: 11 }, (_, i) => [
        `metadata.bad${['\n', '\r', '\u2028', ' '][i % 4]}name ${i}`,
        'x',
      ]),
    );
    const rows: Record<string, unknown>[] = ids.map((id) => product(id, bad));
    rows[10] = { id: 'p11', image_link: img('p11') };
    const queued = await queueInline(w, jsonl(rows));
    // Act: three runs paused after a chunk each, then one to the end
    for (let run = 0; run < 3; run += 1) await runOneChunk(w, queued.importId);
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the first 10 names once, at row 1; the failed row listed
    expect(record).toMatchObject({ status: 'succeeded', embedded: 11, failed: 1 });
    expect(record.errors).toEqual([
      ...Array.from({ length: 10 }, (_, i) => ({
        row: 1,
        productId: 'p1',
        message: `metadata "bad${['\n', '\r', '\u2028', ' '][i % 4]}name ${i}" is not kept: a metadata name is 1–64 letters, digits, "_" or "-".`,
        severity: 'warning',
      })),
      { row: 11, productId: 'p11', message: 'title is missing.', severity: 'error' },
    ]);
  });

  it('notes metadata fields past the 100th once, whatever their number, and a left-out name after them', async () => {
    // Prepare: rows with 101, 102 and 103 metadata fields, then one with a name the import does not keep
    const w = world(filesFor('a', 'b', 'c', 'd'));
    const fields = (count: number) =>
      Object.fromEntries(Array.from({ length: count }, (_, i) => [`metadata.k${i}`, 'v']));
    const feed = jsonl([
      product('a', fields(101)),
      product('b', fields(102)),
      product('c', fields(103)),
      product('d', { 'metadata.Campaign Name': 'w' }),
    ]);
    // Act
    const record = await importInline(w, feed);
    // Assess
    expect(record.errors.map(({ row, message }) => [row, message])).toEqual([
      [1, 'metadata fields past the 100th are not kept.'],
      [4, 'metadata "Campaign Name" is not kept: a metadata name is 1–64 letters, digits, "_" or "-".'],
    ]);
  });

  it('notes nothing about a row a resumed run finds to repeat an earlier id', async () => {
    // Prepare: row 5 repeats b (imported at row 2, before the checkpoint) with a name not kept
    const w = world(filesFor('a', 'b', 'c', 'd', 'e'));
    const feed = jsonl([
      product('a'),
      product('b'),
      product('c'),
      product('d'),
      product('b', { 'metadata.Campaign Name': 'x' }),
      product('e'),
    ]);
    const queued = await queueInline(w, feed);
    await runOneChunk(w, queued.importId);
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the duplicate's error alone
    expect(record.errors).toEqual([
      { row: 5, productId: 'b', message: 'Duplicate id; row 2 was imported.', severity: 'error' },
    ]);
  });

  it('stores products with variants, embeds their images and records bad rows without stopping', async () => {
    // Prepare
    const w = world(filesFor('a', 'b', 'c'));
    const feed = jsonl([
      product('a', { item_group_id: 'g1', color: 'red' }),
      product('b', { item_group_id: 'g1', color: 'blue' }),
      { id: 'x', image_link: img('x') },
      product('c'),
      product('d', { price: 'cheap' }),
    ]);
    // Act
    const record = await importInline(w, feed);
    // Assess
    expect(record).toMatchObject({
      status: 'succeeded',
      total: 5,
      processed: 5,
      embedded: 3,
      skipped: 0,
      failed: 2,
    });
    expect(record.errors).toEqual([
      { row: 3, productId: 'x', message: 'title is missing.', severity: 'error' },
      {
        row: 5,
        productId: 'd',
        message: 'price "cheap" is not a price like "12.99 USD".',
        severity: 'error',
      },
    ]);
    const a = await w.products.get(FEED, 'a');
    expect(a).toMatchObject({
      group: 'g1',
      version: 1,
      price: 1000,
      currency: 'USD',
      vector_count: 1,
      embedded_model: 'fake-1',
    });
    expect(a?.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(a?.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect((await w.products.get(FEED, 'c'))?.group).toBe('c');
    expect(w.index.docs.size).toBe(3);
    expect(w.index.docs.get(`${FEED}/a/0`)?.fields).toMatchObject({ color: ['red'], item_group_id: ['g1'] });
  });

  it('re-embeds nothing when the same feed is imported again, and keeps id and version', async () => {
    const w = world(filesFor('a', 'b'));
    const feed = jsonl([product('a'), product('b')]);
    await importInline(w, feed);
    const before = await w.products.get(FEED, 'a');
    const embedded = w.embedder.embedded;
    const again = await importInline(w, feed);
    expect(again).toMatchObject({ status: 'succeeded', embedded: 0, skipped: 2, failed: 0, removed: 0 });
    expect(w.embedder.embedded).toBe(embedded);
    const after = await w.products.get(FEED, 'a');
    expect(after).toMatchObject({
      id: before?.id,
      version: 1,
      updated_at: before?.updated_at,
      update_hash: before?.update_hash,
    });
  });

  it('bumps version and update_hash of a changed product, keeps its id and reuses its vectors', async () => {
    // Prepare
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a', { color: 'red' })]));
    const before = await w.products.get(FEED, 'a');
    const fetches = w.fetcher.fetched.length;
    const embedded = w.embedder.embedded;
    // Act: a new price and colour, the same image.
    const record = await importInline(w, jsonl([product('a', { price: '12.00 USD', color: 'blue' })]));
    // Assess: nothing fetched or embedded; the vector is re-filed under the new colour.
    const after = await w.products.get(FEED, 'a');
    expect(record).toMatchObject({ embedded: 0, updated: 1, skipped: 0, failed: 0 });
    expect(w.fetcher.fetched.length).toBe(fetches);
    expect(w.embedder.embedded).toBe(embedded);
    expect(after).toMatchObject({
      id: before?.id,
      version: 2,
      created_at: before?.created_at,
      price: 1200,
      vector_count: 1,
    });
    expect(after?.update_hash).not.toBe(before?.update_hash);
    expect(w.index.docs.get(`${FEED}/a/0`)?.fields.color).toEqual(['blue']);
  });

  it('embeds a product again when its image link changes', async () => {
    const w = world(filesFor('a', 'a-new'));
    await importInline(w, jsonl([product('a')]));
    const record = await importInline(w, jsonl([product('a', { image_link: img('a-new') })]));
    expect(record).toMatchObject({ embedded: 1, updated: 0 });
    expect(w.index.docs.get(`${FEED}/a/0`)?.vector).toEqual(vectorOf(Buffer.from('image a-new')));
  });

  it('leaves a product that a stopped chunk re-embedded to be redone by the next import, whatever its version', async () => {
    // Prepare: "a" imported; then its image changes, and writing its record fails after its vectors were
    // replaced (every run, so the import ends failed)
    const w = world(filesFor('a', 'a-new', 'b'));
    await importInline(w, jsonl([product('a'), product('b')]));
    const putMany = w.products.putMany.bind(w.products);
    let failing = true;
    w.products.putMany = async (products) => {
      if (failing && products.some((p) => p.product_id === 'a' && p.update_hash !== ''))
        throw new Error('store rejected the batch');
      return putMany(products);
    };
    const changedFeed = jsonl([product('a', { image_link: img('a-new') }), product('b')]);
    const stopped = await queueInline(w, changedFeed);
    for (let run = 0; run < 2; run += 1)
      await expect(runImport(w.deps, FEED, stopped.importId)).rejects.toThrow('store rejected');
    await runImport(w.deps, FEED, stopped.importId);
    expect((await w.imports.get(FEED, stopped.importId))?.status).toBe('failed');
    failing = false;
    // Act: the first version of the feed again
    const again = await importInline(w, jsonl([product('a'), product('b')]));
    // Assess: "a" is embedded again from its first image, not skipped with the new image's vector
    expect(again).toMatchObject({ status: 'succeeded', embedded: 1, skipped: 1 });
    expect(w.index.docs.get(`${FEED}/a/0`)?.vector).toEqual(vectorOf(Buffer.from('image a')));
  });

  /** Runs the import once, its second product write failing: the first wrote the chunk's stale marks. */
  async function runFailingAfterStaleMarks(w: World, importId: string): Promise<void> {
    const putMany = w.products.putMany.bind(w.products);
    let calls = 0;
    w.products.putMany = async (products) => {
      calls += 1;
      if (calls === 2) throw new Error('store unavailable');
      return putMany(products);
    };
    await expect(runImport(w.deps, FEED, importId)).rejects.toThrow('store unavailable');
    w.products.putMany = putMany;
  }

  it('after a run failed past its stale mark, re-files a renamed product whose image is gone', async () => {
    // Prepare: "a" imported, its image gone since; the run re-filing it under its new title fails
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a')]));
    w.fetcher.files.delete(img('a'));
    const queued = await queueInline(w, jsonl([product('a', { title: 'Renamed' })]));
    await runFailingAfterStaleMarks(w, queued.importId);
    // Act
    const resumed = await runImport(w.deps, FEED, queued.importId);
    // Assess: its vectors reused, as an uninterrupted run does (not fetched, 404, and dropped)
    expect(resumed).toMatchObject({ status: 'succeeded', updated: 1, failed: 0 });
    expect(await w.products.get(FEED, 'a')).toMatchObject({ vector_count: 1, version: 2, title: 'Renamed' });
    expect(w.index.docs.get(`${FEED}/a/0`)?.vector).toEqual(vectorOf(Buffer.from('image a')));
  });

  it("after a run failed past its stale mark, keeps an older-recipe product's vectors", async () => {
    // Prepare: "a" on an older keypoint recipe, its image gone; the run refreshing it fails
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a')]));
    const stored = (await w.products.get(FEED, 'a'))!;
    await w.products.putMany([{ ...stored, local_features: CATALOGUE_FEATURES_VERSION - 1 }]);
    w.fetcher.files.delete(img('a'));
    const queued = await queueInline(w, jsonl([product('a')]));
    await runFailingAfterStaleMarks(w, queued.importId);
    // Act
    const resumed = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(resumed).toMatchObject({ status: 'succeeded', failed: 1 });
    expect(await w.products.get(FEED, 'a')).toMatchObject({
      vector_count: 1,
      version: 1,
      local_features: CATALOGUE_FEATURES_VERSION - 1,
    });
    expect(w.index.docs.has(`${FEED}/a/0`)).toBe(true);
  });

  it('after a run failed past its stale mark, keeps the version of an unchanged product', async () => {
    // Prepare: "a" stored without vectors (its image never answered); the next import of it fails
    const w = world();
    await importInline(w, jsonl([product('a')]));
    const before = (await w.products.get(FEED, 'a'))!;
    const queued = await queueInline(w, jsonl([product('a')]));
    await runFailingAfterStaleMarks(w, queued.importId);
    // Act
    await runImport(w.deps, FEED, queued.importId);
    // Assess: its content did not change
    expect(await w.products.get(FEED, 'a')).toMatchObject({
      version: 1,
      updated_at: before.updated_at,
      update_hash: before.update_hash,
    });
    expect((await w.products.get(FEED, 'a'))?.stale_hash).toBeUndefined();
  });

  it('removes what a run failed past a stale mark embedded beyond the vectors kept', async () => {
    // Prepare: "a" on an older recipe with one vector (its additional image did not answer then); the run
    // refreshing it embeds both images and fails; then its main image is gone
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a', { additional_image_link: img('a-2') })]));
    const stored = (await w.products.get(FEED, 'a'))!;
    await w.products.putMany([{ ...stored, local_features: CATALOGUE_FEATURES_VERSION - 1 }]);
    w.fetcher.files.set(img('a-2'), Buffer.from('image a-2'));
    const queued = await queueInline(w, jsonl([product('a', { additional_image_link: img('a-2') })]));
    await runFailingAfterStaleMarks(w, queued.importId);
    expect(w.index.docs.has(`${FEED}/a/1`)).toBe(true);
    w.fetcher.files.delete(img('a'));
    // Act
    await runImport(w.deps, FEED, queued.importId);
    // Assess: one vector kept, as an uninterrupted run keeps it; the second image's vector and features go
    expect(await w.products.get(FEED, 'a')).toMatchObject({ vector_count: 1 });
    expect([...w.index.docs.keys()]).toEqual([`${FEED}/a/0`]);
    const [first, second] = await w.features.getMany([
      { feedId: FEED, productId: 'a', imageIndex: 0 },
      { feedId: FEED, productId: 'a', imageIndex: 1 },
    ]);
    expect(first).toBeDefined();
    expect(second).toBeUndefined();
  });

  it('removes products a full import no longer lists, from the store and the vector index', async () => {
    const w = world(filesFor('a', 'b'));
    await importInline(w, jsonl([product('a'), product('b')]));
    const record = await importInline(w, jsonl([product('a')]));
    expect(record.removed).toBe(1);
    expect(await w.products.get(FEED, 'b')).toBeUndefined();
    expect([...w.index.docs.keys()]).toEqual([`${FEED}/a/0`]);
  });

  it('counts the removals of a crashed run when the import resumes', async () => {
    // Prepare: the run that removes b and c crashes just before it can mark the import succeeded
    const w = world(filesFor('a', 'b', 'c'));
    await importInline(w, jsonl([product('a'), product('b'), product('c')]));
    const queued = await queueInline(w, jsonl([product('a')]));
    const put = w.imports.put.bind(w.imports);
    let crashed = false;
    w.imports.put = async (record) => {
      if (record.status === 'succeeded' && !crashed) {
        crashed = true;
        throw new Error('crash');
      }
      return put(record);
    };
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    // Act
    const resumed = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(resumed).toMatchObject({ status: 'succeeded', removed: 2 });
  });

  it('keeps unlisted products on an incremental import', async () => {
    const w = world(filesFor('a', 'b'));
    await importInline(w, jsonl([product('a'), product('b')]));
    const record = await importInline(w, jsonl([product('a')]), 'incremental');
    expect(record.removed).toBe(0);
    expect(await w.products.get(FEED, 'b')).toBeDefined();
  });

  it('records an unreachable image, stores the product without vectors and retries it on the next import', async () => {
    const w = world(filesFor('a'));
    const first = await importInline(w, jsonl([product('a'), product('gone')]));
    expect(first).toMatchObject({ embedded: 1, failed: 1 });
    expect(first.errors).toEqual([
      { row: 2, productId: 'gone', message: `image_link ${img('gone')}: HTTP 404.`, severity: 'error' },
    ]);
    expect(await w.products.get(FEED, 'gone')).toMatchObject({ vector_count: 0 });
    w.fetcher.files.set(img('gone'), Buffer.from('now here'));
    const second = await importInline(w, jsonl([product('a'), product('gone')]));
    expect(second).toMatchObject({ embedded: 1, skipped: 1, failed: 0 });
  });

  it('embeds additional images and skips one that is not an image', async () => {
    const files = filesFor('a');
    files.set(img('a2'), Buffer.from('BAD bytes'));
    files.set(img('a3'), Buffer.from('third'));
    const w = world(files);
    const record = await importInline(
      w,
      jsonl([product('a', { additional_image_link: [img('a2'), img('a3')] })]),
    );
    expect(record).toMatchObject({ embedded: 1, failed: 0 });
    expect(record.errors).toEqual([
      {
        row: 1,
        productId: 'a',
        // The link names the image; the refusal's own problem follows it.
        message: `additional_image_link ${img('a2')}: the data is not a decodable image.`,
        // The product was imported without it.
        severity: 'warning',
      },
    ]);
    expect((await w.products.get(FEED, 'a'))?.vector_count).toBe(2);
  });

  it('names the image field of an image that passes inspection but cannot be decoded', async () => {
    // Prepare: a header that reads, pixels that do not (a truncated JPEG): the embedder refuses them
    const files = filesFor('a');
    files.set(img('t'), Buffer.from('TRUNCATED main'));
    files.set(img('a2'), Buffer.from('TRUNCATED additional'));
    const w = world(files);
    refuseTruncated(w);
    // Act
    const record = await importInline(
      w,
      jsonl([product('a', { additional_image_link: [img('a2')] }), product('t')]),
    );
    // Assess
    expect(record).toMatchObject({ embedded: 1, failed: 1 });
    expect(record.errors).toEqual([
      {
        row: 1,
        productId: 'a',
        message: `additional_image_link ${img('a2')}: the image could not be decoded (it may be damaged or cut short).`,
        // Imported without it.
        severity: 'warning',
      },
      {
        row: 2,
        productId: 't',
        message: `image_link ${img('t')}: the image could not be decoded (it may be damaged or cut short).`,
        severity: 'error',
      },
    ]);
  });

  it('reports a product whose main image failed as one failed row, without its additional images', async () => {
    // Prepare: a's images cannot be fetched at all; t's fetch but cannot be decoded
    const files = filesFor('ok');
    files.set(img('t'), Buffer.from('TRUNCATED main'));
    files.set(img('t2'), Buffer.from('TRUNCATED additional'));
    const w = world(files);
    refuseTruncated(w);
    // Act
    const record = await importInline(
      w,
      jsonl([
        product('ok'),
        product('a', { additional_image_link: [img('a2')] }),
        product('t', { additional_image_link: [img('t2')] }),
      ]),
    );
    // Assess: one error each, no warning "imported without an additional image" for rows not imported
    expect(record).toMatchObject({ embedded: 1, failed: 2 });
    expect(record.errors.map((error) => [error.row, error.severity, error.message])).toEqual([
      [2, 'error', `image_link ${img('a')}: HTTP 404.`],
      [
        3,
        'error',
        `image_link ${img('t')}: the image could not be decoded (it may be damaged or cut short).`,
      ],
    ]);
  });

  it('reports a product whose main image could not be embedded as one error, without its unfetched other images', async () => {
    // Prepare: t's main image fetches but does not decode; its additional image answers 404
    const files = filesFor('ok');
    files.set(img('t'), Buffer.from('TRUNCATED main'));
    const w = world(files);
    refuseTruncated(w);
    // Act
    const record = await importInline(
      w,
      jsonl([product('ok'), product('t', { additional_image_link: [img('t2')] })]),
    );
    // Assess
    expect(record).toMatchObject({ embedded: 1, failed: 1 });
    expect(record.errors.map((error) => [error.row, error.severity, error.message])).toEqual([
      [
        2,
        'error',
        `image_link ${img('t')}: the image could not be decoded (it may be damaged or cut short).`,
      ],
    ]);
  });

  it('keeps the note that a full import kept products, whatever the number of failed rows', async () => {
    // Prepare: a stored product; then a full import of 100 refused rows and one row it cannot read
    const w = world(filesFor('old'));
    await importInline(w, jsonl([product('old')]));
    const rows = [
      ...Array.from({ length: 100 }, (_, i) => JSON.stringify({ id: `r${i}`, image_link: img('x') })),
      '{"id": broken',
    ];
    // Act
    const record = await importInline(w, rows.join('\n'));
    // Assess: old kept, and said so
    expect(await w.products.get(FEED, 'old')).toBeDefined();
    expect(record.errors).toHaveLength(100);
    expect(record.errors.filter((error) => error.row === null)).toEqual([
      expect.objectContaining({ message: expect.stringMatching(/^Products not in this file were kept/) }),
    ]);
  });

  it('keeps failed rows past the 100 problems before warnings, and the first 100 by row', async () => {
    // Prepare: 60 products each missing two additional images (120 warnings), then a refused row; and
    // a chunk (3 rows in the fakes) whose image failure (row 62) comes before a refused row (row 63)
    const rows: Record<string, unknown>[] = Array.from({ length: 60 }, (_, i) =>
      product(`p${i}`, { additional_image_link: [img(`p${i}-a`), img(`p${i}-b`)] }),
    );
    rows.push({ id: 'untitled', image_link: img('untitled') }, product('gone'), {
      id: 'r',
      image_link: img('r'),
    });
    const w = world(filesFor(...Array.from({ length: 60 }, (_, i) => `p${i}`)));
    // Act
    const record = await importInline(w, jsonl(rows));
    // Assess
    expect(record).toMatchObject({ embedded: 60, failed: 3 });
    expect(record.errors).toHaveLength(100);
    expect(record.errors.filter((error) => error.severity === 'error').map((error) => error.row)).toEqual([
      61, 62, 63,
    ]);
    // The warnings kept are the earliest ones.
    expect(record.errors.filter((error) => error.severity === 'warning').at(-1)?.row).toBe(49);
  });

  it('fails an import with a valid product whose image failed naming that error, not a refused row', async () => {
    const w = world(new Map());
    const record = await importInline(
      w,
      jsonl([{ id: 'refused', title: 'No image' }, product('v')]),
      'incremental',
    );
    expect(record.status).toBe('failed');
    expect(record.message).toBe(
      `The file's one valid product could not be imported. The first error, row 2 (id v): image_link ${img('v')}: HTTP 404.`,
    );
  });

  it('reports a repeated product id and imports the first row only', async () => {
    const w = world(filesFor('a', 'b'));
    const record = await importInline(
      w,
      jsonl([product('a'), product('b'), product('a', { title: 'Other' })]),
    );
    expect(record.errors).toEqual([
      { row: 3, productId: 'a', message: 'Duplicate id; row 1 was imported.', severity: 'error' },
    ]);
    expect((await w.products.get(FEED, 'a'))?.title).toBe('Product a');
  });

  it('reports a repeated product id across chunks (chunks are prepared while the previous one commits)', async () => {
    const w = world(filesFor('a', 'b', 'c', 'd'));
    const rows = [
      product('a'),
      product('b'),
      product('c'),
      product('c', { title: 'again' }),
      product('d'),
      product('a'),
    ];
    const record = await importInline(w, jsonl(rows));
    expect(record.errors).toEqual([
      { row: 4, productId: 'c', message: 'Duplicate id; row 3 was imported.', severity: 'error' },
      { row: 6, productId: 'a', message: 'Duplicate id; row 1 was imported.', severity: 'error' },
    ]);
    expect(record).toMatchObject({ embedded: 4, failed: 2, processed: 6 });
  });

  it('names the imported row for each repeat of an id two chunks back, not an earlier repeat', async () => {
    // Prepare: "a" at row 1, then twice in the third chunk (chunks of 3), whose store lookup finds row 1
    const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'a', 'a'];
    const w = world(filesFor(...ids));
    // Act
    const record = await importInline(w, jsonl(ids.map((id) => product(id))));
    // Assess: row 8 repeats row 1 (row 7 was itself a repeat, not imported)
    expect(record.errors).toEqual([
      { row: 7, productId: 'a', message: 'Duplicate id; row 1 was imported.', severity: 'error' },
      { row: 8, productId: 'a', message: 'Duplicate id; row 1 was imported.', severity: 'error' },
    ]);
  });

  it('resumes an interrupted import after its checkpoint without duplicating work', async () => {
    // Prepare: 7 rows, chunks of 3; the process dies while checkpointing the second chunk.
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const w = world(filesFor(...names));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    w.imports.failOnPut = 4; // running, total, chunk 1, chunk 2 ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    const interrupted = await w.imports.get(FEED, queued.importId);
    expect(interrupted).toMatchObject({ status: 'running', checkpointRow: 3 });
    // Act
    w.imports.failOnPut = undefined;
    const embeddedBefore = w.embedder.embedded;
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: rows 4–6 were written before the crash, so they are recognised as unchanged.
    expect(record).toMatchObject({ status: 'succeeded', processed: 7, removed: 0 });
    expect(record.embedded + record.skipped).toBe(7);
    expect(w.embedder.embedded - embeddedBefore).toBe(1);
    expect(w.products.all(FEED)).toHaveLength(7);
    expect(w.index.docs.size).toBe(7);
  });

  it('fails an import whose next rows fail three runs in a row, and counts runs from its last checkpoint', async () => {
    // Prepare: 9 rows, chunks of 3; writing the products of a chunk with row "d" fails while `broken`
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'];
    const w = world(filesFor(...names));
    const putMany = w.products.putMany.bind(w.products);
    let broken = new Set(['d']);
    w.products.putMany = async (products) => {
      if (products.some((p) => broken.has(p.product_id))) throw new Error('store rejected the batch');
      return putMany(products);
    };
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    // Act: two runs fail at rows 4-6 and stay running; then rows 4-6 pass and 7-9 fail: the count starts
    // again from that checkpoint, so only the third failure there ends the import
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    broken = new Set(['g']);
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    const resumed = await w.imports.get(FEED, queued.importId);
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(resumed).toMatchObject({ status: 'running', checkpointRow: 6, attempts: 1 });
    expect(record).toMatchObject({ status: 'failed', checkpointRow: 6 });
    expect(record.message).toBe(
      'Stopped after row 6: the next rows failed 3 times in a row (store rejected the batch).',
    );
    expect(importView(record)).not.toHaveProperty('attempts');
    expect(await runImport(w.deps, FEED, queued.importId)).toMatchObject({ status: 'failed' });
  });

  it("shows an import's errors by row, file-level notes last, whatever order they were recorded in", () => {
    const record = {
      source: { kind: 'inline' },
      errors: [
        { row: 2, productId: 'b', message: 'image_link: HTTP 404' },
        { row: null, message: 'Products not in this file were kept: …' },
        { row: 1, productId: 'a', message: 'image_link: HTTP 404' },
      ],
    } as unknown as Parameters<typeof importView>[0];
    expect(importView(record).errors.map((error) => error.row)).toEqual([1, 2, null]);
  });

  it("shows the feed's values its messages quote with line breaks and bidi overrides escaped, as stored", async () => {
    // Prepare: a kept product with a metadata name holding a line break, and a row whose price holds U+202E
    const w = world(filesFor('a', 'b'));
    const feed = jsonl([
      product('a', { 'metadata.bad\nname': 'x' }),
      product('b', { price: '12\u202e USD' }),
    ]);
    // Act
    const record = await importInline(w, feed);
    // Assess: stored as read (a resumed run tells its notes by their text), shown escaped
    expect(record.errors.map((problem) => problem.message)).toEqual([
      'metadata "bad\nname" is not kept: a metadata name is 1–64 letters, digits, "_" or "-".',
      'price "12\u202e USD" is not a price like "12.99 USD".',
    ]);
    expect(importView(record).errors.map((problem) => [problem.message, problem.severity])).toEqual([
      [
        'metadata "bad\\u000aname" is not kept: a metadata name is 1–64 letters, digits, "_" or "-".',
        'warning',
      ],
      ['price "12\\u202e USD" is not a price like "12.99 USD".', 'error'],
    ]);
    // …and so is why an import failed
    const failed = { ...record, errors: [], message: 'Feed file https://shop.example/f\u2028x: HTTP 404.' };
    expect(importView(failed).message).toBe('Feed file https://shop.example/f\\u2028x: HTTP 404.');
  });

  it('shows the severity of errors stored before it was recorded, told from their text', () => {
    const record = {
      source: { kind: 'inline' },
      errors: [
        { row: 1, productId: 'a', message: 'metadata "a b" is not kept: a metadata name is 1–64 letters.' },
        { row: 2, productId: 'b', message: 'additional_image_link https://cdn.example/b2.jpg: HTTP 404.' },
        { row: 3, productId: 'c', message: 'image_link https://cdn.example/c.jpg: HTTP 404.' },
        { row: 4, message: 'Not valid JSON.' },
        // One recorded with its severity keeps it, whatever its text.
        { row: 5, productId: 'e', message: 'metadata "x y" is not kept: …', severity: 'error' },
        { row: null, message: 'Products not in this file were kept: …' },
        // A row refused for its link (not an image that could not be fetched) failed.
        { row: 6, productId: 'f', message: 'additional_image_link must be an http(s) URL.' },
      ],
    } as unknown as Parameters<typeof importView>[0];
    expect(importView(record).errors.map((error) => error.severity)).toEqual([
      'warning',
      'warning',
      'error',
      'error',
      'error',
      'error',
      'warning',
    ]);
  });

  it('fetches a URL feed through the fetcher, stores it and resolves relative links against it', async () => {
    const w = world(new Map([['https://shop.example/img/a.jpg', Buffer.from('a')]]));
    w.fetcher.files.set(
      'https://shop.example/feed.jsonl',
      Buffer.from(jsonl([{ id: 'a', title: 'A', image_link: '/img/a.jpg' }])),
    );
    const queued = await queue(w, { url: 'https://shop.example/feed.jsonl', mode: 'full' });
    const record = await runImport(w.deps, FEED, queued.importId);
    expect(record).toMatchObject({ status: 'succeeded', format: 'jsonl', embedded: 1 });
    expect(w.objects.objects.has(importObjectKeys(FEED, queued.importId).file)).toBe(true);
  });

  it('tells a fetched feed’s format and encoding from its first bytes: a UTF-16 JSON array', async () => {
    // Prepare: a byte-order mark, then the array in UTF-16LE
    const w = world(new Map([['https://shop.example/img/a.jpg', Buffer.from('a')]]));
    const array = JSON.stringify([{ id: 'grüß', title: 'A', image_link: '/img/a.jpg' }]);
    w.fetcher.files.set(
      'https://shop.example/feed',
      Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(array, 'utf16le')]),
    );
    // Act
    const queued = await queue(w, { url: 'https://shop.example/feed', mode: 'full' });
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', format: 'json', embedded: 1 });
    expect(await w.products.get(FEED, 'grüß')).toBeDefined();
  });

  it('fails the import with the reason when the feed URL cannot be fetched', async () => {
    const w = world();
    const queued = await queue(w, { url: 'https://shop.example/missing.xml', mode: 'full' });
    const record = await runImport(w.deps, FEED, queued.importId);
    expect(record).toMatchObject({ status: 'failed', message: 'The feed URL could not be read: HTTP 404.' });
  });

  describe('credentials in the links of an import', () => {
    const FEED_URL = 'https://feeduser:FEEDPASS@shop.example/private.jsonl?token=FEEDQUERYTOKEN&v=2';
    const SECRETS = /FEEDPASS|FEEDQUERYTOKEN|IMGPASS|IMGSECRETSIG|ADDSIG|EMBEDSIG|feeduser|imguser/;
    const SIGNED = 'https://cdn.example/b.jpg?X-Amz-Signature=IMGSECRETSIG&w=1';
    const WITH_USER = 'https://imguser:IMGPASS@cdn.example/c.jpg';

    it('fetches with the real links, records and shows them redacted, and keeps the real feed URL', async () => {
      // Prepare: a relative image (resolved against the feed URL, without its userinfo), an additional
      // image that answers 404 behind a signed link, a main image that cannot be decoded (embedding) and
      // one that is no image (inspection), both behind credentials, and two main images answering 404
      const relative = 'https://shop.example/img/a.jpg';
      const additional = 'https://cdn.example/a2.jpg?sig=ADDSIG&sv=2022';
      const undecodable = 'https://cdn.example/d.jpg?Signature=EMBEDSIG&Key-Pair-Id=K2';
      const w = world(
        new Map([
          [relative, Buffer.from('a')],
          [undecodable, Buffer.from('TRUNCATED d')],
          [WITH_USER.replace('c.jpg', 'e.jpg'), Buffer.from('BAD e')],
        ]),
      );
      refuseTruncated(w);
      const rows = [
        { id: 'a', title: 'A', image_link: '/img/a.jpg', additional_image_link: additional, link: '#' },
        product('b', { image_link: SIGNED }),
        product('c', { image_link: WITH_USER }),
        product('d', { image_link: undecodable }),
        product('e', { image_link: WITH_USER.replace('c.jpg', 'e.jpg') }),
      ];
      w.fetcher.files.set(FEED_URL, Buffer.from(jsonl(rows)));
      // Act
      const queued = await queue(w, { url: FEED_URL, mode: 'full' });
      const record = await runImport(w.deps, FEED, queued.importId);
      // Assess: the fetches used the links as given, credentials included
      expect(record).toMatchObject({ status: 'succeeded', embedded: 1, failed: 4 });
      expect(w.fetcher.fetched).toEqual(
        expect.arrayContaining([FEED_URL, relative, additional, SIGNED, WITH_USER, undecodable]),
      );
      // …the record keeps the feed URL it needs to run again, and its errors without the credentials
      const stored = (await w.imports.get(FEED, queued.importId))!;
      expect(stored.source).toEqual({ kind: 'url', url: FEED_URL });
      expect(stored.errors.map((problem) => problem.message)).toEqual([
        'additional_image_link https://cdn.example/a2.jpg?sig=***&sv=2022: HTTP 404.',
        'image_link https://cdn.example/b.jpg?X-Amz-Signature=***&w=1: HTTP 404.',
        'image_link https://***@cdn.example/c.jpg: HTTP 404.',
        'image_link https://cdn.example/d.jpg?Signature=***&Key-Pair-Id=***: ' +
          'the image could not be decoded (it may be damaged or cut short).',
        'image_link https://***@cdn.example/e.jpg: the data is not a decodable image.',
      ]);
      // …nor the product the relative link made, whose image_link search answers show
      expect((await w.products.get(FEED, 'a'))?.image_link).toBe(relative);
      // (a placeholder link '#' kept the feed URL's query, its token with it)
      expect((await w.products.get(FEED, 'a'))?.link).toBe('https://shop.example/private.jsonl#');
      // …and the admin API's view shows no credential
      const view = importView(stored);
      expect(view.source).toEqual({
        kind: 'url',
        url: 'https://***@shop.example/private.jsonl?token=***&v=2',
      });
      expect(JSON.stringify(view)).not.toMatch(SECRETS);
      expect(JSON.stringify(stored.errors)).not.toMatch(SECRETS);
    });

    it('names the first image error redacted in the message of an import whose images all failed', async () => {
      const w = world();
      w.fetcher.files.set(
        FEED_URL,
        Buffer.from(jsonl([product('b', { image_link: SIGNED }), product('c', { image_link: WITH_USER })])),
      );
      const queued = await queue(w, { url: FEED_URL, mode: 'incremental' });
      const record = await runImport(w.deps, FEED, queued.importId);
      expect(record).toMatchObject({ status: 'failed', failed: 2 });
      expect(record.message).toBe(
        "Not one of the file's 2 valid products could be imported. The first error, row 1 (id b): " +
          'image_link https://cdn.example/b.jpg?X-Amz-Signature=***&w=1: HTTP 404.',
      );
      expect(w.fetcher.fetched).toEqual(expect.arrayContaining([SIGNED, WITH_USER]));
    });

    it('fetches the feed and resolves its links with the real URL on a resumed run', async () => {
      // Prepare: the first run's download fails with an infrastructure error (the import stays running)
      const relative = 'https://shop.example/img/a.jpg';
      const w = world(new Map([[relative, Buffer.from('a')]]));
      w.fetcher.files.set(FEED_URL, Buffer.from(jsonl([{ id: 'a', title: 'A', image_link: 'img/a.jpg' }])));
      let fails = true;
      w.fetcher.before = (url) => {
        if (url === FEED_URL && fails) {
          fails = false;
          throw new Error(`socket hang up: GET ${url}`);
        }
      };
      const queued = await queue(w, { url: FEED_URL, mode: 'full' });
      await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('socket hang up');
      expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ status: 'running' });
      // Act
      const record = await runImport(w.deps, FEED, queued.importId);
      // Assess
      expect(record).toMatchObject({ status: 'succeeded', embedded: 1 });
      expect(w.fetcher.fetched).toEqual([FEED_URL, relative]);
    });

    it("redacts the links an infrastructure error's message quotes in the message of the import it failed", async () => {
      const w = world(filesFor('a'));
      w.products.putMany = async () => {
        throw new Error('PUT https://svc:SVCPASS@store.example/batch?X-Amz-Security-Token=STORETOKEN failed');
      };
      const queued = await queueInline(w, jsonl([product('a')]));
      for (let run = 0; run < 2; run += 1)
        await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('PUT');
      const record = await runImport(w.deps, FEED, queued.importId);
      expect(record.status).toBe('failed');
      expect(record.message).toBe(
        'Stopped after row 0: the next rows failed 3 times in a row ' +
          '(PUT https://***@store.example/batch?X-Amz-Security-Token=*** failed).',
      );
    });

    it('shows the links of errors stored as written (before they were redacted, or a refused row) redacted', () => {
      const record = {
        source: { kind: 'inline' },
        errors: [
          { row: 1, productId: 'a', message: `image_link ${SIGNED}: HTTP 404.` },
          {
            row: 2,
            productId: 'b',
            message: 'image_link "http://imguser:IMGPASS@cdn ex/b.jpg" is not a URL.',
          },
        ],
        message: `The first error, row 1 (id a): image_link ${WITH_USER}: HTTP 404.`,
      } as unknown as Parameters<typeof importView>[0];
      const view = importView(record);
      expect(view.errors.map((problem) => problem.message)).toEqual([
        'image_link https://cdn.example/b.jpg?X-Amz-Signature=***&w=1: HTTP 404.',
        'image_link "http://***@cdn ex/b.jpg" is not a URL.',
      ]);
      expect(view.message).toBe(
        'The first error, row 1 (id a): image_link https://***@cdn.example/c.jpg: HTTP 404.',
      );
      expect(view.source).toEqual({ kind: 'inline' });
    });
  });

  it('keeps existing products when a full import has a row it cannot read at all, saying which', async () => {
    const w = world(filesFor('a', 'b'));
    await importInline(w, jsonl([product('a'), product('b')]));
    // b's line is broken JSON: the file may still list b, so nothing is removed.
    const record = await importInline(w, `${jsonl([product('a')])}\n{"id":"b",\n`);
    expect(record.removed).toBe(0);
    expect(await w.products.get(FEED, 'b')).toBeDefined();
    expect(record.errors).toContainEqual({
      row: null,
      message: 'Products not in this file were kept: row 2 could not be read, and it may list one of them.',
      severity: 'warning',
    });
    // Rows that read but are not products (null, 1) or are refused (no title) are not such rows: b goes.
    const notProducts = await importInline(w, `${jsonl([product('a')])}\nnull\n1\n`);
    expect(notProducts.removed).toBe(1);
    await importInline(w, jsonl([product('a'), product('b')]));
    const refused = await importInline(w, jsonl([product('a'), { id: 'b' }]));
    expect(refused.removed).toBe(1);
  });

  it('notes once that a full import kept products when a run resumes after the note was saved', async () => {
    // Prepare: "a" and "b" imported; then a file listing "a" and a row that cannot be read, whose run dies
    // saving its final status, after the note that products were kept
    const w = world(filesFor('a', 'b'));
    await importInline(w, jsonl([product('a'), product('b')]));
    const queued = await queueInline(w, `${jsonl([product('a')])}\n{"id":"b",\n`);
    w.imports.failOnPut = w.imports.puts + 5; // running, total, chunk 1, the note, succeeded ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    w.imports.failOnPut = undefined;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: as an uninterrupted run
    expect(record).toMatchObject({ status: 'succeeded', removed: 0 });
    expect(record.errors).toEqual([
      { row: 2, message: 'Not valid JSON.', severity: 'error' },
      {
        row: null,
        message: 'Products not in this file were kept: row 2 could not be read, and it may list one of them.',
        severity: 'warning',
      },
    ]);
  });

  it('keeps existing products when a full import lists no valid product', async () => {
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a')]));
    const record = await importInline(w, jsonl([{ id: 'broken' }]));
    expect(record.removed).toBe(0);
    expect(await w.products.get(FEED, 'a')).toBeDefined();
  });

  it('fails a full import none of whose valid products could be imported, and removes nothing', async () => {
    // Prepare: three products; then a file of one refused row and one product whose image answers 404
    const w = world(filesFor('a', 'b', 'c'));
    await importInline(w, jsonl([product('a'), product('b'), product('c')]));
    // Act
    const record = await importInline(w, jsonl([{ id: 'broken' }, product('gone')]));
    // Assess: the catalogue is still there, searchable; the import says why it failed
    expect(record).toMatchObject({ status: 'failed', processed: 2, embedded: 0, failed: 2, removed: 0 });
    expect(record.message).toBe(
      "The file's one valid product could not be imported. The first error, row 2 (id gone): " +
        `image_link ${img('gone')}: HTTP 404. Products not in this file were kept.`,
    );
    expect(record.errors).toContainEqual({
      row: null,
      message: "Products not in this file were kept: the file's one valid product could not be imported.",
      severity: 'warning',
    });
    expect(w.products.all(FEED).map((p) => [p.product_id, p.vector_count])).toEqual([
      ['a', 1],
      ['b', 1],
      ['c', 1],
      ['gone', 0],
    ]);
    expect([...w.index.docs.keys()].sort()).toEqual([`${FEED}/a/0`, `${FEED}/b/0`, `${FEED}/c/0`]);
  });

  it('fails a re-import whose every new image link cannot be fetched (a moved CDN), naming the first error', async () => {
    // Prepare
    const names = ['a', 'b', 'c', 'd'];
    const w = world(filesFor(...names));
    await importInline(w, jsonl(names.map((n) => product(n))));
    // Act: the same products, their images on a host that answers 404 to every one (the first row's
    // answer comes last)
    w.fetcher.before = (url) => url.endsWith('/a.jpg') && new Promise((resolve) => setTimeout(resolve, 20));
    const moved = names.map((n) => product(n, { image_link: `https://new-cdn.example/${n}.jpg` }));
    const record = await importInline(w, jsonl(moved));
    const incremental = await importInline(w, jsonl(moved), 'incremental');
    // Assess: not a success a client polling `status` would take for a healthy import
    expect(record).toMatchObject({ status: 'failed', processed: 4, embedded: 0, failed: 4, removed: 0 });
    expect(record.message).toBe(
      "Not one of the file's 4 valid products could be imported. The first error, row 1 (id a): " +
        'image_link https://new-cdn.example/a.jpg: HTTP 404.',
    );
    expect(incremental).toMatchObject({ status: 'failed', failed: 4 });
    expect(incremental.message).toMatch(/^Not one of the file's 4 valid products could be imported\. /);
  });

  it('names the first image error even when refused rows filled the errors the import keeps', async () => {
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a')]));
    const refused = Array.from({ length: 101 }, (_, i) => ({ id: `r${i}`, image_link: img(`r${i}`) }));
    const record = await importInline(w, jsonl([...refused, product('gone')]));
    expect(record).toMatchObject({ status: 'failed', failed: 102, removed: 0 });
    expect(record.errors).toHaveLength(100);
    expect(record.message).toBe(
      "The file's one valid product could not be imported. The first error, row 102 (id gone): " +
        `image_link ${img('gone')}: HTTP 404. Products not in this file were kept.`,
    );
  });

  it('succeeds, counting the failed, and removes unlisted products when some products were imported', async () => {
    // Prepare
    const w = world(filesFor('a', 'b', 'c'));
    await importInline(w, jsonl([product('a'), product('b'), product('c')]));
    // Act: a unchanged (skipped), one new product whose image answers 404; b and c are no longer listed
    const record = await importInline(w, jsonl([product('a'), product('gone')]));
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', skipped: 1, failed: 1, removed: 2 });
    expect(record.message).toBeUndefined();
    expect(w.products.all(FEED).map((p) => p.product_id)).toEqual(['a', 'gone']);
  });

  it('keeps existing products when a resumed full import lists no valid product before or after its checkpoint', async () => {
    // Prepare: "a" imported; then 6 refused rows in chunks of 3, the run dying as it checkpoints the
    // second chunk
    const w = world(filesFor('a'));
    await importInline(w, jsonl([product('a')]));
    const refused = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6'].map((id) => ({ id, image_link: img(id) }));
    const queued = await queueInline(w, jsonl(refused));
    w.deps.limits.quietSaveMs = 0; // (every chunk saved, although it wrote nothing)
    w.imports.failOnPut = w.imports.puts + 4; // running, total, chunk 1, chunk 2 ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ checkpointRow: 3 });
    w.imports.failOnPut = undefined;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the refused rows before the checkpoint are not counted as valid products
    expect(record).toMatchObject({ status: 'succeeded', processed: 6, failed: 6, removed: 0 });
    expect(await w.products.get(FEED, 'a')).toBeDefined();
  });

  it('saves the progress of chunks whose rows were all refused with the next save, not a save each', async () => {
    // Prepare: 300 refused rows (100 chunks of 3), then one valid product
    const w = world(filesFor('a'));
    const refused = Array.from({ length: 300 }, (_, i) => ({ id: `r${i}`, image_link: img(`r${i}`) }));
    const queued = await queueInline(w, jsonl([...refused, product('a')]));
    w.deps.limits.quietSaveMs = 60_000;
    const before = w.imports.puts;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: saved when running, with the total, after the chunk that wrote "a", and at the end
    expect(w.imports.puts - before).toBe(4);
    expect(record).toMatchObject({ status: 'succeeded', processed: 301, failed: 300, embedded: 1 });
    expect(record.errors.map((e) => e.row)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(await w.imports.get(FEED, queued.importId)).toEqual(record);
  });

  it('saves each chunk that marked products as seen, even when every product in it was unchanged', async () => {
    // Prepare: six products imported (two chunks of 3), then the same file again
    const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
    const w = world(filesFor(...ids));
    const content = jsonl(ids.map((id) => product(id)));
    await importInline(w, content, 'incremental');
    const queued = await queueInline(w, content, 'incremental');
    w.deps.limits.quietSaveMs = 60_000;
    const before = w.imports.puts;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: saved when running, with the total, after each of the two chunks, and at the end
    expect(record).toMatchObject({ status: 'succeeded', skipped: 6 });
    expect(w.imports.puts - before).toBe(5);
  });

  it('does the refused rows of unsaved progress again after a crash, counting and reporting them once', async () => {
    // Prepare: 6 refused rows (two chunks, their progress unsaved), then "a"; the run dies saving a's chunk
    const w = world(filesFor('a'));
    const refused = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6'].map((id) => ({ id, image_link: img(id) }));
    const queued = await queueInline(w, jsonl([...refused, product('a')]));
    w.deps.limits.quietSaveMs = 60_000;
    w.imports.failOnPut = w.imports.puts + 3; // running, total, the chunk of "a" ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ checkpointRow: 0, processed: 0 });
    w.imports.failOnPut = undefined;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess ("a" was written before its chunk's save failed: unchanged now)
    expect(record).toMatchObject({ status: 'succeeded', processed: 7, failed: 6, skipped: 1 });
    expect(record.errors.map((e) => e.row)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('fails an import whose rows after refused ones fail three runs in a row, their progress unsaved', async () => {
    // Prepare: 3 refused rows (a chunk whose progress waits for the next save), then "a", whose write fails
    const w = world(filesFor('a'));
    const refused = ['r1', 'r2', 'r3'].map((id) => ({ id, image_link: img(id) }));
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async (products) => {
      if (products.some((p) => p.product_id === 'a')) throw new Error('store rejected the batch');
      return putMany(products);
    };
    const queued = await queueInline(w, jsonl([...refused, product('a')]));
    w.deps.limits.quietSaveMs = 60_000;
    // Act
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store rejected');
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: each run redid the refused rows; the stored checkpoint counted the runs that failed after it
    expect(record).toMatchObject({ status: 'failed', checkpointRow: 3, failed: 3 });
    expect(record.message).toBe(
      'Stopped after row 3: the next rows failed 3 times in a row (store rejected the batch).',
    );
    expect(await w.imports.get(FEED, queued.importId)).toEqual(record);
  });

  it('counts a repeated id before the checkpoint of a resumed import once, as an uninterrupted run does', async () => {
    // Prepare: rows 1 and 2 list the same product; every image answers 404; chunks of 3, the first run
    // dying as it checkpoints the second chunk
    const content = jsonl(['a', 'a', 'b', 'c', 'd', 'e'].map((id) => product(id)));
    const uninterrupted = await importInline(world(), content);
    const w = world();
    const queued = await queueInline(w, content);
    w.imports.failOnPut = w.imports.puts + 4; // running, total, chunk 1, chunk 2 ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ checkpointRow: 3 });
    w.imports.failOnPut = undefined;
    // Act
    const resumed = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(uninterrupted.message).toMatch(/^Not one of the file's 5 valid products could be imported\. /);
    expect(resumed).toMatchObject({ status: 'failed', message: uninterrupted.message });
  });

  /** A world whose products `names` were imported with an older keypoint recipe and lost their images. */
  async function olderRecipeProductsWithoutImages(names: string[], unlisted: string[]): Promise<World> {
    const w = world(filesFor(...names, ...unlisted));
    await importInline(w, jsonl([...names, ...unlisted].map((n) => product(n))));
    const stored = await w.products.getMany(FEED, names);
    await w.products.putMany(
      [...stored.values()].map((p) => ({ ...p, local_features: CATALOGUE_FEATURES_VERSION - 1 })),
    );
    for (const name of names) w.fetcher.files.delete(img(name));
    return w;
  }

  it('succeeds when its products all failed only to refresh their keypoints, keeping their vectors', async () => {
    // Prepare: a and b on the older recipe, their images gone; c no longer listed
    const w = await olderRecipeProductsWithoutImages(['a', 'b'], ['c']);
    // Act
    const record = await importInline(w, jsonl([product('a'), product('b')]));
    // Assess: nothing was lost, so the import is a success with the refreshes' failures counted and noted
    expect(record).toMatchObject({ status: 'succeeded', processed: 2, embedded: 0, failed: 2, removed: 1 });
    expect(record.message).toBeUndefined();
    expect(record.errors).toEqual([
      expect.objectContaining({ row: 1, message: expect.stringContaining('keeps its stored vectors') }),
      expect.objectContaining({ row: 2, message: expect.stringContaining('keeps its stored vectors') }),
    ]);
    expect(w.products.all(FEED).map((p) => [p.product_id, p.vector_count])).toEqual([
      ['a', 1],
      ['b', 1],
    ]);
  });

  it('succeeds when refreshes before the checkpoint of a resumed import kept their vectors and the rest failed', async () => {
    // Prepare: rows 1-3 older-recipe products whose images are gone, rows 4-6 new products whose images
    // answer 404; chunks of 3, the first run dying as it checkpoints the second chunk
    const w = await olderRecipeProductsWithoutImages(['a', 'b', 'c'], []);
    const queued = await queueInline(w, jsonl(['a', 'b', 'c', 'd', 'e', 'f'].map((id) => product(id))));
    w.imports.failOnPut = w.imports.puts + 4; // running, total, chunk 1, chunk 2 ← crash
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('crash');
    expect(await w.imports.get(FEED, queued.importId)).toMatchObject({ checkpointRow: 3 });
    w.imports.failOnPut = undefined;
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', processed: 6, failed: 6 });
    expect(record.message).toBeUndefined();
  });
});

describe('pausing', () => {
  it("stops downloading a URL import's feed file when paused, and the resumed run downloads it", async () => {
    const w = world(filesFor('a'));
    const download = slowFeedFile(w, jsonl([product('a')]));
    const queued = await queue(w, { url: 'https://shop.example/feed.jsonl', mode: 'full' });
    const pause = new AbortController();
    download.started = () => setTimeout(() => pause.abort(), 300);
    // Act
    await expect(runImport({ ...w.deps, signal: pause.signal }, FEED, queued.importId)).rejects.toThrow();
    const stopped = download.parts();
    download.started = () => undefined;
    download.gap = 0;
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(stopped).toBeLessThan(20);
    expect(record).toMatchObject({ status: 'succeeded', embedded: 1 });
  });

  it('does not count a paused run as a failed attempt, however often it is paused', async () => {
    // Prepare: every run is paused while its first chunk fetches its images
    const names = ['a', 'b', 'c', 'd'];
    const w = world(filesFor(...names));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    let pause: AbortController | undefined;
    w.fetcher.before = () => pause?.abort();
    // Act: four paused runs, then one left alone
    for (let run = 0; run < 4; run += 1) {
      pause = new AbortController();
      await expect(runImport({ ...w.deps, signal: pause.signal }, FEED, queued.importId)).rejects.toThrow();
    }
    pause = undefined;
    // A store failure after the pauses is this import's first failed attempt: retried, not failed
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async () => {
      throw new Error('store unavailable');
    };
    await expect(runImport(w.deps, FEED, queued.importId)).rejects.toThrow('store unavailable');
    w.products.putMany = putMany;
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', embedded: 4 });
  });

  it('pauses at a checkpoint when its signal aborts and resumes from there', async () => {
    // Prepare: 10 rows in chunks of 3; abort once the first chunk is checkpointed. The chunk being
    // prepared then (the pipeline's second) is not committed, so the import pauses at row 3.
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'];
    const w = world(filesFor(...names));
    const controller = new AbortController();
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    const deps = {
      ...w.deps,
      signal: controller.signal,
      onProgress: (r: ImportRecord) => {
        if (r.checkpointRow === 3) controller.abort();
      },
    };
    // Act
    await expect(runImport(deps, FEED, queued.importId)).rejects.toThrow();
    const paused = await w.imports.get(FEED, queued.importId);
    const pausedDurable = w.index.durable;
    const resumed = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(paused).toMatchObject({ status: 'running', checkpointRow: 3, processed: 3 });
    // The vectors of every checkpointed row were flushed before the run stopped (a local index keeps
    // them in memory; the resumed run skips those rows)
    expect(pausedDurable).toEqual(new Set(names.slice(0, 3).map((n) => `${FEED}/${n}/0`)));
    expect(resumed).toMatchObject({ status: 'succeeded', processed: 10, embedded: 10, removed: 0 });
  });
});

describe('runImport and a local vector index', () => {
  it('makes the vectors of a chunk durable before storing the records that point at them', async () => {
    // Prepare: 7 rows in chunks of 3; each product record, when stored, must find its vectors flushed
    // (a local index keeps them in memory until it flushes: a process killed in between would leave a
    // record that a resumed import skips, with no vector behind it)
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const w = world(filesFor(...names));
    const missing: string[] = [];
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async (products) => {
      for (const p of products)
        for (let i = 0; i < p.vector_count; i += 1)
          if (!w.index.durable.has(`${p.feed_id}/${p.product_id}/${i}`)) missing.push(p.product_id);
      return putMany(products);
    };
    // Act
    const record = await importInline(w, jsonl(names.map((n) => product(n))));
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', embedded: 7 });
    expect(missing).toEqual([]);
  });

  it('saves the removal of the vectors of unlisted products before deleting their records', async () => {
    // Prepare: three products, then a full import that lists one
    const w = world(filesFor('a', 'b', 'c'));
    await importInline(w, jsonl([product('a'), product('b'), product('c')]));
    const stillDurable: string[] = [];
    const deleteMany = w.products.deleteMany.bind(w.products);
    w.products.deleteMany = async (feedId, ids) => {
      for (const id of ids) if (w.index.durable.has(`${feedId}/${id}/0`)) stillDurable.push(id);
      return deleteMany(feedId, ids);
    };
    // Act
    const record = await importInline(w, jsonl([product('a')]));
    // Assess
    expect(record).toMatchObject({ status: 'succeeded', removed: 2 });
    expect(stillDurable).toEqual([]);
  });
});

describe('an import whose feed is deleted', () => {
  /** Calls `then` once the import has stored product `id` (the feed's deletion starts at that point). */
  function afterStoring(w: World, id: string, then: () => void) {
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async (products) => {
      await putMany(products);
      if (products.some((p) => p.product_id === id && p.seen_import !== undefined)) then();
    };
  }
  const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
  const stored = (w: World) => [...w.products.rows.values()].map((p) => p.product_id).sort();
  const importFiles = (w: World, importId: string) =>
    [...w.objects.objects.keys()].filter((key) => key.startsWith(`imports/${FEED}/${importId}/`));

  it('stops when the deletion starts and removes what it stored after that, and its own record and files', async () => {
    // Prepare: chunks of 3; the deletion starts while the second chunk (d, e, f) is being stored
    const w = world(filesFor(...names));
    afterStoring(w, 'd', () => w.feeds.deleting.add(FEED));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the first chunk was stored before the mark (the deletion removes it); nothing of the
    // second is left, the third was never stored
    expect(record).toMatchObject({ status: 'failed', message: expect.stringContaining('deleted') });
    expect(stored(w)).toEqual(['a', 'b', 'c']);
    expect([...w.index.docs.keys()].sort()).toEqual([`${FEED}/a/0`, `${FEED}/b/0`, `${FEED}/c/0`]);
    expect(await w.features.getMany([{ feedId: FEED, productId: 'd', imageIndex: 0 }])).toEqual([undefined]);
    expect(await w.imports.get(FEED, queued.importId)).toBeUndefined();
    expect(importFiles(w, queued.importId)).toEqual([]);
  });

  it('leaves alone a product that a new feed of the same id stored meanwhile', async () => {
    // Prepare: while the second chunk is stored, the feed is deleted and created again, and an import
    // of the new feed stores its own product d
    const w = world(filesFor(...names));
    afterStoring(w, 'd', () => {
      const ours = w.products.rows.get(`${FEED}\u0000d`)!;
      w.products.rows.set(`${FEED}\u0000d`, { ...ours, seen_import: 'imp_new', update_hash: 'new' });
      w.feeds.recreated.add(FEED);
    });
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(record.status).toBe('failed');
    expect(stored(w)).toEqual(['a', 'b', 'c', 'd']);
    expect(w.products.rows.get(`${FEED}\u0000d`)?.seen_import).toBe('imp_new');
  });

  it('removes its chunk when it finds its lease lost to a runner of a new feed of the same id', async () => {
    // Prepare: while the second chunk is written, the feed is deleted and created again, and a runner of
    // the new feed's import holds the lease (this runner stalled past the lease's expiry)
    const w = world(filesFor(...names));
    afterStoring(w, 'd', () => {
      for (const n of ['a', 'b', 'c']) w.products.rows.delete(`${FEED}\u0000${n}`);
      w.feeds.recreated.add(FEED);
      w.imports.leases.set(FEED, {
        owner: 'runner of the new feed',
        until: new Date('2026-12-01T00:00:00Z'),
      });
    });
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    // Act
    await runTriggeredImport(w.deps, FEED, queued.importId);
    // Assess: nothing of the old feed's import is left in the new feed
    expect(stored(w)).toEqual([]);
    expect([...w.index.docs.keys()].filter((id) => /\/[def]\//.test(id))).toEqual([]);
    expect(w.imports.leases.get(FEED)?.owner).toBe('runner of the new feed');
  });

  it('does not run into a new feed of the same id an import recorded before imports knew their feed', async () => {
    // Prepare: a record without feedCreatedAt, created before the feed (created again since)
    const w = world(filesFor('old'));
    const queued = await queueInline(w, jsonl([product('old')]));
    const { feedCreatedAt: _mark, ...legacy } = (await w.imports.get(FEED, queued.importId))!;
    w.imports.rows.set(`${FEED}/${queued.importId}`, legacy);
    w.feeds.recreated.add(FEED);
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess
    expect(record.status).toBe('failed');
    expect(stored(w)).toEqual([]);
  });

  it("stops fetching the next chunk's images once the deletion has been seen", async () => {
    // Prepare: chunks of 8 fetched 2 at a time, 40 ms each; the deletion starts as the first is stored
    const many = Array.from({ length: 24 }, (_, i) => `p${i}`);
    const w = world(filesFor(...many));
    w.deps.limits = { ...w.deps.limits, chunkSize: 8, imageConcurrency: 2 };
    w.fetcher.before = () => new Promise((resolve) => setTimeout(resolve, 40));
    afterStoring(w, 'p0', () => w.feeds.deleting.add(FEED));
    const queued = await queueInline(w, jsonl(many.map((n) => product(n))));
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the second chunk's fetches stopped part way; the third chunk's never started
    expect(record.status).toBe('failed');
    expect(w.fetcher.fetched.length).toBeLessThan(14);
  });

  it('stops within a feed check while a chunk is still fetching its images', async () => {
    // Prepare: one chunk of 16 images fetched one at a time, 300 ms each (about 5 s); the deletion
    // starts during the first fetch
    const many = Array.from({ length: 16 }, (_, i) => `p${i}`);
    const w = world(filesFor(...many));
    w.deps.limits = { ...w.deps.limits, chunkSize: 16, imageConcurrency: 1 };
    w.fetcher.before = () => {
      w.feeds.deleting.add(FEED);
      return new Promise((resolve) => setTimeout(resolve, 300));
    };
    const queued = await queueInline(w, jsonl(many.map((n) => product(n))));
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: stopped at the first check (2 s), nothing stored
    expect(record.status).toBe('failed');
    expect(w.fetcher.fetched.length).toBeLessThan(10);
    expect(stored(w)).toEqual([]);
  });

  it('stops an image fetch in flight once the deletion has been seen', async () => {
    // Prepare: one image whose server would answer after 8 s; the deletion starts as it is asked for
    const w = world(filesFor('a'));
    let stopped = false;
    w.fetcher.fetch = async (url, _limits, options: { signal?: AbortSignal } = {}) => {
      w.feeds.deleting.add(FEED);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 8000);
        options.signal?.addEventListener('abort', () => {
          stopped = true;
          clearTimeout(timer);
          resolve();
        });
      });
      throw new FetchError(stopped ? 'stopped.' : 'timed out.');
    };
    const queued = await queueInline(w, jsonl([product('a')]));
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: the fetch was stopped at the first feed check, not left to its server
    expect(stopped).toBe(true);
    expect(record.status).toBe('failed');
    expect(stored(w)).toEqual([]);
  });

  it("stops downloading a URL import's feed file within a feed check once the feed is being deleted", async () => {
    // Prepare: the feed file trickles in over ~10 s (100 parts, 100 ms apart); the deletion starts as
    // the download does
    const w = world(filesFor('a'));
    const download = slowFeedFile(w, jsonl([product('a')]));
    const queued = await queue(w, { url: 'https://shop.example/feed.jsonl', mode: 'full' });
    download.started = () => w.feeds.deleting.add(FEED);
    // Act
    const record = await runImport(w.deps, FEED, queued.importId);
    // Assess: stopped at the first check (2 s), and the import removed itself and its files
    expect(record.status).toBe('failed');
    expect(download.parts()).toBeLessThan(50);
    expect(await w.imports.get(FEED, queued.importId)).toBeUndefined();
    expect(importFiles(w, queued.importId)).toEqual([]);
  });

  it('does nothing but remove itself when its feed is gone before it starts', async () => {
    const w = world(filesFor(...names));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    w.feeds.gone.add(FEED);

    const record = await runImport(w.deps, FEED, queued.importId);

    expect(record.status).toBe('failed');
    expect(w.fetcher.fetched).toEqual([]);
    expect(stored(w)).toEqual([]);
    expect(await w.imports.get(FEED, queued.importId)).toBeUndefined();
    expect(importFiles(w, queued.importId)).toEqual([]);
  });

  it('does not run into a new feed of the same id an import queued for the deleted one', async () => {
    const w = world(filesFor(...names));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    w.feeds.recreated.add(FEED);

    const record = await runImport(w.deps, FEED, queued.importId);

    expect(record.status).toBe('failed');
    expect(stored(w)).toEqual([]);
  });
});

describe('runTriggeredImport', () => {
  it('drops a trigger whose import no longer exists, with what its start wrote after the record went', async () => {
    const w = world();
    const keys = importObjectKeys(FEED, 'imp_gone');
    await w.objects.put(keys.request, '{}');
    await w.objects.put(keys.file, 'rows');
    expect(await runTriggeredImport(w.deps, FEED, 'imp_gone')).toBeUndefined();
    expect([...w.objects.objects.keys()].filter((key) => key.startsWith(`imports/${FEED}/`))).toEqual([]);
  });

  it("runs a feed's imports in creation order whatever order their triggers arrive in", async () => {
    // Prepare: the older import lists a and b, the newer (full) one a only; the newer's trigger comes first
    const w = world(filesFor('a', 'b'));
    const older = await queueInline(w, jsonl([product('a'), product('b')]));
    const newer = await queueInline(w, jsonl([product('a')]));
    // Act
    const first = await runTriggeredImport(w.deps, FEED, newer.importId);
    const second = await runTriggeredImport(w.deps, FEED, older.importId);
    // Assess: the catalogue is the newer import's
    const olderDone = await w.imports.get(FEED, older.importId);
    expect(first?.status).toBe('succeeded');
    expect(second?.status).toBe('succeeded');
    expect(olderDone!.finishedAt! < first!.finishedAt!).toBe(true);
    expect([...w.products.rows.values()].map((p) => p.product_id)).toEqual(['a']);
    expect(w.imports.leases.size).toBe(0);
  });

  it('defers (for a retry of its trigger) the imports of a feed whose lease another runner holds', async () => {
    const w = world(filesFor('a'));
    const queued = await queueInline(w, jsonl([product('a')]));
    const until = new Date(Date.parse('2026-12-01T00:00:00Z'));
    await w.imports.takeLease(FEED, 'other runner', until, new Date(0));

    const feedReads = w.feeds.gets;

    await expect(runTriggeredImport(w.deps, FEED, queued.importId)).rejects.toBeInstanceOf(ImportDeferred);

    expect((await w.imports.get(FEED, queued.importId))?.status).toBe('queued');
    expect(w.feeds.gets).toBe(feedReads);
  });

  it('takes over the lease of a runner that stopped saving (it expired)', async () => {
    const w = world(filesFor('a'));
    const queued = await queueInline(w, jsonl([product('a')]));
    await w.imports.takeLease(
      FEED,
      'crashed runner',
      new Date(Date.parse('2026-11-01T00:00:00Z')),
      new Date(0),
    );

    expect((await runTriggeredImport(w.deps, FEED, queued.importId))?.status).toBe('succeeded');
  });

  it('runs an import queued while it held the lease, whose own trigger found the lease held', async () => {
    // Prepare: the second import is queued and triggered just as the runner of the first, having found
    // nothing more to run, is about to give the lease up
    const w = world(filesFor('a', 'b'));
    const first = await queueInline(w, jsonl([product('a')]), 'incremental');
    let second: ImportRecord | undefined;
    const release = w.imports.releaseLease.bind(w.imports);
    w.imports.releaseLease = async (feedId, owner) => {
      if (!second) {
        second = await queueInline(w, jsonl([product('b')]), 'incremental');
        const secondTrigger = runTriggeredImport(w.deps, FEED, second.importId);
        await expect(secondTrigger).rejects.toBeInstanceOf(ImportDeferred);
      }
      return release(feedId, owner);
    };
    // Act
    await runTriggeredImport(w.deps, FEED, first.importId);
    // Assess: the runner of the first looked again after giving the lease up, and ran the second
    expect((await w.imports.get(FEED, second!.importId))?.status).toBe('succeeded');
    expect([...w.products.rows.keys()].length).toBe(2);
  });

  it('lets the chunk being committed finish before a failed run gives its lease up', async () => {
    // Prepare: the first chunk's vectors are written slowly; looking up the second chunk's products fails
    const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const w = world(filesFor(...names));
    const queued = await queueInline(w, jsonl(names.map((n) => product(n))));
    const upsert = w.index.upsert.bind(w.index);
    w.index.upsert = async (docs) => {
      await new Promise((resolve) => setTimeout(resolve, 50));
      return upsert(docs);
    };
    let lookups = 0;
    const getMany = w.products.getMany.bind(w.products);
    w.products.getMany = async (feedId, ids) => {
      lookups += 1;
      if (lookups === 2) throw new Error('throttled');
      return getMany(feedId, ids);
    };
    // Act
    await expect(runTriggeredImport(w.deps, FEED, queued.importId)).rejects.toThrow('throttled');
    const leaseAfterReturn = w.imports.leases.get(FEED);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Assess: the first chunk's save happened before the run ended; no lease is held afterwards
    expect(leaseAfterReturn).toBeUndefined();
    expect(w.imports.leases.get(FEED)).toBeUndefined();
    expect((await w.imports.get(FEED, queued.importId))?.checkpointRow).toBe(3);
  });

  it('writes nothing of a chunk whose preparation outlasted its lease, taken over meanwhile', async () => {
    // Prepare: chunks of 2; while the second chunk's images are fetched, another runner takes the
    // lease (this one stalled past its expiry)
    const w = world(filesFor('a', 'b', 'c', 'd'));
    w.deps.limits = { ...w.deps.limits, chunkSize: 2, imageConcurrency: 1 };
    w.fetcher.before = (url) => {
      if (url === img('c'))
        w.imports.leases.set(FEED, { owner: 'other runner', until: new Date('2026-12-01T00:00:00Z') });
    };
    const queued = await queueInline(w, jsonl(['a', 'b', 'c', 'd'].map((n) => product(n))));
    // Act
    const record = await runTriggeredImport(w.deps, FEED, queued.importId);
    // Assess: the first chunk only (written before the takeover); the other runner resumes the import
    expect([...w.products.rows.values()].map((p) => p.product_id).sort()).toEqual(['a', 'b']);
    expect(record?.status).toBe('running');
    expect(w.imports.leases.get(FEED)?.owner).toBe('other runner');
  });

  it('stops without failing the import when another runner took its lease over', async () => {
    // Prepare: after the first chunk, the lease is taken by another runner (this one stalled past it)
    const w = world(filesFor('a', 'b', 'c', 'd'));
    const queued = await queueInline(w, jsonl(['a', 'b', 'c', 'd'].map((n) => product(n))));
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async (products) => {
      await putMany(products);
      w.imports.leases.set(FEED, { owner: 'other runner', until: new Date('2026-12-01T00:00:00Z') });
    };
    // Act
    const record = await runTriggeredImport(w.deps, FEED, queued.importId);
    // Assess: left running at its checkpoint for the other runner to resume
    expect(record?.status).toBe('running');
    expect(w.imports.leases.get(FEED)?.owner).toBe('other runner');
  });
});

describe('capErrors', () => {
  it('keeps the first 100 errors, each bounded and well-formed, whatever a row put in it', () => {
    const kept = capErrors(
      [{ row: 1, message: 'earlier' }],
      [
        { row: 2, productId: 'x'.repeat(5000), message: 'm'.repeat(100_000), severity: 'error' },
        { row: 3, productId: '\ud800', message: 'bad \udc00 text', severity: 'error' },
        ...Array.from({ length: 200 }, (_, i) => ({
          row: 4 + i,
          message: 'more',
          severity: 'error' as const,
        })),
      ],
    );
    expect(kept).toHaveLength(100);
    expect(kept[0]).toEqual({ row: 1, message: 'earlier' });
    expect(kept[1]!.message).toHaveLength(500);
    expect(kept[1]!.message.endsWith('…')).toBe(true);
    expect(kept[1]!.productId).toHaveLength(200);
    expect(kept[2]).toEqual({ row: 3, productId: '\ufffd', message: 'bad \ufffd text', severity: 'error' });
    // Bounding what is already bounded changes nothing.
    expect(capErrors(kept, [])).toEqual(kept);
  });
});
