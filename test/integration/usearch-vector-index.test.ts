import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { UsearchVectorIndex } from '#lib/adapters/usearch-vector-index.ts';
import {
  CONTRACT_DIMENSION,
  describeVectorIndexContract,
  doc,
  randomUnit,
  unit,
} from './vector-index.contract.ts';

async function tempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'usearch-vector-index-'));
}

describeVectorIndexContract(
  'usearch',
  async () => {
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    return {
      index,
      reopen: () => UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION }),
      close: () => rm(dir, { recursive: true, force: true }),
    };
  },
  { persistent: true },
);

// Reopened with the default (i8): a saved feed must come back with the quantization it was built with.
describeVectorIndexContract(
  'usearch with an f32 graph',
  async () => {
    const dir = await tempDir();
    return {
      index: new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION, quantization: 'f32' }),
      reopen: () => UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION }),
      close: () => rm(dir, { recursive: true, force: true }),
    };
  },
  { persistent: true },
);

describe('UsearchVectorIndex', () => {
  it('gives a document the same similarity whether its query walks the graph or scans', async () => {
    // Prepare: no exact threshold: with an exclusion (as related products have), a query of 10 walks the
    // graph of 2,000, one of 400 scans them all
    const dir = await tempDir();
    const dimension = 512;
    const index = new UsearchVectorIndex({ dir, dimension, exactThreshold: 0, quantization: 'f32' });
    await index.upsert(
      Array.from({ length: 2000 }, (_, i) => doc('f1', `p${i}`, randomUnit(i + 1, dimension))),
    );
    const vector = randomUnit(77_777, dimension);
    // Act
    const excludeItemGroupIds = ['p0'];
    const walked = await index.search({ feedId: 'f1', vector, k: 10, excludeItemGroupIds });
    const scanned = new Map(
      (await index.search({ feedId: 'f1', vector, k: 400, excludeItemGroupIds })).map((hit) => [
        hit.id,
        hit.similarity,
      ]),
    );
    // Assess: to the bit (pages of different depths must rank and score one list alike)
    expect(walked).toHaveLength(10);
    for (const hit of walked) expect(scanned.get(hit.id), hit.id).toBe(hit.similarity);
    await rm(dir, { recursive: true, force: true });
  });

  it('finds the filtered nearest neighbours through the graph when the filter is too broad to scan', async () => {
    // Prepare: no scan thresholds, so a filter matching 200 of 2000 takes the oversampled graph path.
    const dir = await tempDir();
    const dimension = 32;
    const index = new UsearchVectorIndex({ dir, dimension, exactThreshold: 0, scanRatio: 0 });
    const documents = Array.from({ length: 2000 }, (_, i) =>
      doc('f1', `p${i}`, randomUnit(i + 1, dimension), {
        fields: { color: [i % 10 === 0 ? 'red' : 'blue'] },
      }),
    );
    await index.upsert(documents);
    const query = randomUnit(99_999, dimension);
    const dot = (v: Float32Array): number => v.reduce((sum, value, i) => sum + value * (query[i] ?? 0), 0);
    const expected = documents
      .filter((document) => document.fields.color?.[0] === 'red')
      .sort((a, b) => dot(b.vector) - dot(a.vector))
      .slice(0, 10)
      .map((document) => document.id);

    // Act
    const hits = await index.search({ feedId: 'f1', vector: query, k: 10, filter: { color: ['red'] } });

    // Assess
    const found = hits.filter((hit) => expected.includes(hit.id)).length;
    expect(hits).toHaveLength(10);
    expect(found).toBeGreaterThanOrEqual(9);
    expect(hits.every((hit) => Number(hit.productId.slice(1)) % 10 === 0)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('answers a batch of plain queries through one graph call exactly as one by one', async () => {
    // Prepare: a graph large enough for HNSW to approximate, and ~75 window-like queries of one k
    const dir = await tempDir();
    const dimension = 32;
    const index = new UsearchVectorIndex({ dir, dimension });
    await index.upsert(
      Array.from({ length: 3000 }, (_, i) => doc('f1', `p${i}`, randomUnit(i + 1, dimension))),
    );
    const queries = Array.from({ length: 75 }, (_, i) => ({
      feedId: 'f1',
      vector: randomUnit(50_000 + i, dimension),
      k: 5,
    }));
    const alone = [];
    for (const query of queries) alone.push(await index.search(query));

    // Act
    const batched = await index.searchMany(queries);

    // Assess
    expect(batched).toEqual(alone);
    expect(batched.every((hits) => hits.length === 5)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('finds the stored copies of a vector through the graph (products sharing one image)', async () => {
    // Prepare: 40 products share one image among 3000 others. As the search's twin lookup asks: 24
    // neighbours of that image, the verified group left out, taken at similarity ≥ 1 − 1e-5; through the
    // graph (no exact scan of a feed this small)
    const dir = await tempDir();
    const dimension = 32;
    const index = new UsearchVectorIndex({ dir, dimension, exactThreshold: 0 });
    const shared = randomUnit(77_777, dimension);
    await index.upsert([
      ...Array.from({ length: 3000 }, (_, i) => doc('f1', `p${i}`, randomUnit(i + 1, dimension))),
      ...Array.from({ length: 40 }, (_, i) => doc('f1', `twin${String(i).padStart(2, '0')}`, shared)),
    ]);

    // Act
    const [hits] = await index.searchMany([
      { feedId: 'f1', vector: shared, k: 24, excludeItemGroupIds: ['twin00'] },
    ]);

    // Assess: 24 of the copies (which ones is the graph's choice among equals), by productId
    const ids = hits!.map((hit) => hit.productId);
    expect(ids).toHaveLength(24);
    expect(ids.every((id) => id.startsWith('twin') && id !== 'twin00')).toBe(true);
    expect(ids).toEqual([...ids].sort());
    expect(hits!.every((hit) => hit.similarity >= 1 - 1e-5)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('filters and deletes by product right after a reopen, with rows replaced before its postings exist', async () => {
    // Prepare: three products written, then reopened (a loaded feed builds its postings at first use)
    const dir = await tempDir();
    const dimension = 8;
    const red = { fields: { color: ['red'] } };
    const written = new UsearchVectorIndex({ dir, dimension });
    await written.upsert([
      doc('f1', 'a', randomUnit(1, dimension), red),
      doc('f1', 'b', randomUnit(2, dimension), red),
      doc('f1', 'c', randomUnit(3, dimension), { fields: { color: ['blue'] } }),
    ]);
    await written.flush();
    const index = await UsearchVectorIndex.open({ dir, dimension });
    const ids = async (color: string) =>
      (
        await index.search({
          feedId: 'f1',
          vector: randomUnit(4, dimension),
          k: 10,
          filter: { color: [color] },
        })
      )
        .map((hit) => hit.productId)
        .sort();
    // Act: a becomes blue and d arrives before anything needs the postings; then a filter, then b goes
    await index.upsert([
      doc('f1', 'a', randomUnit(1, dimension), { fields: { color: ['blue'] } }),
      doc('f1', 'd', randomUnit(5, dimension), red),
    ]);
    const redAfterWrites = await ids('red');
    const blueAfterWrites = await ids('blue');
    await index.deleteProducts('f1', ['b']);
    const redAfterDeletion = await ids('red');
    // Assess
    expect(redAfterWrites).toEqual(['b', 'd']);
    expect(blueAfterWrites).toEqual(['a', 'c']);
    expect(redAfterDeletion).toEqual(['d']);
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps one folder per feed and removes it with the feed', async () => {
    // Prepare
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    await index.upsert([doc('feed/with:odd chars', 'p1', randomUnit(1)), doc('f2', 'p1', randomUnit(2))]);
    await index.flush();
    const before = await readdir(dir);

    // Act
    await index.deleteFeed('feed/with:odd chars');

    // Assess
    expect(before).toHaveLength(2);
    expect(await readdir(dir)).toEqual([Buffer.from('f2').toString('base64url')]);
    const reopened = await UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION });
    expect(await reopened.count('feed/with:odd chars')).toBe(0);
    expect(await reopened.count('f2')).toBe(1);
    await rm(dir, { recursive: true, force: true });
  });

  it('pages through products of one image by productId when a filtered query scans them', async () => {
    // Prepare: three products sharing one image, written highest productId first (the order a scan meets
    // them in), and one other; every query filtered, so the matching rows are scanned
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    const fields = { color: ['red'] };
    const shared = unit(0.6, 0.8);
    await index.upsert(['p3', 'p2', 'p1'].map((productId) => doc('f1', productId, shared, { fields })));
    await index.upsert([doc('f1', 'p0', unit(1, 0), { fields })]);
    // Act: pages of one, two and three
    const pages = [];
    for (const k of [1, 2, 3])
      pages.push(await index.search({ feedId: 'f1', vector: shared, k, filter: { color: ['red'] } }));
    // Assess: each page the start of the next (ties by productId), whichever k cut the tie
    expect(pages.map((hits) => hits.map((hit) => hit.productId))).toEqual([
      ['p1'],
      ['p1', 'p2'],
      ['p1', 'p2', 'p3'],
    ]);
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses to open an index written with another dimension', async () => {
    // Prepare
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    await index.upsert([doc('f1', 'p1', randomUnit(1))]);
    await index.flush();

    // Act
    const opening = UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION * 2 });

    // Assess
    await expect(opening).rejects.toThrow(/dimension/);
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses a metadata format it does not know by its format, not as a dimension mismatch', async () => {
    // Prepare: a feed saved by a later build with a format number this one does not read
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    await index.upsert([doc('f1', 'p1', randomUnit(1))]);
    await index.flush();
    const metaFile = join(dir, Buffer.from('f1').toString('base64url'), '1', 'meta.json');
    const saved = JSON.parse(await readFile(metaFile, 'utf8')) as Record<string, unknown>;
    await writeFile(metaFile, JSON.stringify({ ...saved, format: 3 }));

    // Act
    const opening = UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION });

    // Assess
    await expect(opening).rejects.toThrow(/metadata format 3, this build reads 1 and 2/);
    await rm(dir, { recursive: true, force: true });
  });

  it('ignores a half-written generation that CURRENT does not point to', async () => {
    // Prepare: a crash during flush leaves a new generation folder behind the pointer.
    const dir = await tempDir();
    const index = new UsearchVectorIndex({ dir, dimension: CONTRACT_DIMENSION });
    await index.upsert([doc('f1', 'p1', randomUnit(1))]);
    await index.flush();
    const feedDir = join(dir, Buffer.from('f1').toString('base64url'));
    await rm(join(feedDir, '2'), { recursive: true, force: true });
    await mkdir(join(feedDir, '2'));
    await writeFile(join(feedDir, '2', 'meta.json'), '{"trunc');

    // Act
    const reopened = await UsearchVectorIndex.open({ dir, dimension: CONTRACT_DIMENSION });

    // Assess
    expect(await reopened.count('f1')).toBe(1);
    await rm(dir, { recursive: true, force: true });
  });

  it('saves each distinct field name and value list once, and still reads files with fields per row', async () => {
    // Prepare: a value that reads like the JSON of a longer list, lists shared by rows, and a feed saved
    // again in the older form (format 1: each row's fields as an object)
    const dir = await tempDir();
    const dimension = 8;
    const written = new UsearchVectorIndex({ dir, dimension });
    await written.upsert([
      doc('f1', 'a', randomUnit(1, dimension), { fields: { color: ['["red","blue"]'], brand: ['acme'] } }),
      doc('f1', 'b', randomUnit(2, dimension), { fields: { color: ['red', 'blue'], brand: ['acme'] } }),
      doc('f1', 'c', randomUnit(3, dimension), { fields: { color: ['red'], brand: ['other'] } }),
    ]);
    await written.flush();
    const metaFile = join(dir, Buffer.from('f1').toString('base64url'), '1', 'meta.json');
    const saved = JSON.parse(await readFile(metaFile, 'utf8')) as {
      format: number;
      names: string[];
      lists: string[][];
      rows: [string, string, string, number[]][];
    };
    const answers = async (index: UsearchVectorIndex) => {
      const ids = async (filter: Record<string, string[]>) =>
        (await index.search({ feedId: 'f1', vector: randomUnit(4, dimension), k: 10, filter }))
          .map((hit) => hit.productId)
          .sort();
      return [
        await ids({ color: ['red'] }),
        await ids({ color: ['["red","blue"]'] }),
        await ids({ brand: ['acme'], color: ['blue'] }),
      ];
    };
    const expected = [['b', 'c'], ['a'], ['b']];

    // Act and assess: the lists once each
    expect(saved.format).toBe(2);
    expect(saved.names).toEqual(['color', 'brand']);
    expect(saved.lists).toEqual([['["red","blue"]'], ['acme'], ['red', 'blue'], ['red'], ['other']]);
    expect(await answers(await UsearchVectorIndex.open({ dir, dimension }))).toEqual(expected);
    // ...and the same feed in format 1
    const rows = saved.rows.map(([id, productId, itemGroupId, pairs]) => {
      const fields: Record<string, string[]> = {};
      for (let i = 0; i < pairs.length; i += 2) fields[saved.names[pairs[i]!]!] = saved.lists[pairs[i + 1]!]!;
      return [id, productId, itemGroupId, fields];
    });
    const { names: _names, lists: _lists, ...rest } = saved;
    await writeFile(metaFile, JSON.stringify({ ...rest, format: 1, rows }));
    expect(await answers(await UsearchVectorIndex.open({ dir, dimension }))).toEqual(expected);
    await rm(dir, { recursive: true, force: true });
  });
});
