import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';

/**
 * Local visual-word index (one process, files under `dir`): per feed, the word lists of its images in
 * memory, persisted on flush to one file per feed (`<feed>.words`: a 4-byte length, the rows as JSON,
 * padding to 8 bytes, then every row's words as float64), written to a temporary name and renamed.
 *
 * Search structure, rebuilt lazily on the first search after a change: per descriptor slice, one sorted
 * Float64Array of `bits · 2²⁰ + image ordinal` (exact in a double), so the postings of a word are one
 * binary search and a contiguous run, with no per-word objects (a Map per word would exceed V8's Map size
 * at a few thousand images). Memory: 8 bytes per (image, word): ~8 words per keypoint and ~1000
 * keypoints per image (both orientations) ≈ 64 KB per image in the search structure, as much again in the
 * word lists (measured figures in docs/benchmarks.md).
 */
const ORDINAL_BITS = 2 ** 20;
const SLICES = 8;

interface Row {
  id: string;
  productId: string;
  itemGroupId: string;
  words: Float64Array;
}

interface Postings {
  rows: Row[];
  /** Per slice: sorted `bits * ORDINAL_BITS + ordinal`. */
  slices: Float64Array[];
}

interface FeedWords {
  rows: Map<string, Row>;
  postings?: Postings;
  dirty: boolean;
}

type PersistedRow = [id: string, productId: string, itemGroupId: string, words: number];

/** First index whose value is ≥ `value` in a sorted array. */
function lowerBound(sorted: Float64Array, value: number): number {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (sorted[middle]! < value) low = middle + 1;
    else high = middle;
  }
  return low;
}

function buildPostings(rowsById: Map<string, Row>): Postings {
  const rows = [...rowsById.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  if (rows.length >= ORDINAL_BITS)
    throw new Error(`visual-word index: more than ${ORDINAL_BITS} images in a feed`);
  const counts = new Array<number>(SLICES).fill(0);
  for (const row of rows) for (const word of row.words) counts[Math.floor(word / SLICE_SPAN)]! += 1;
  const slices = counts.map((count) => new Float64Array(count));
  const filled = new Array<number>(SLICES).fill(0);
  rows.forEach((row, ordinal) => {
    for (const word of row.words) {
      const slice = Math.floor(word / SLICE_SPAN);
      slices[slice]![filled[slice]!++] = (word - slice * SLICE_SPAN) * ORDINAL_BITS + ordinal;
    }
  });
  for (const slice of slices) slice.sort();
  return { rows, slices };
}

export class LocalVisualWordIndex implements VisualWordIndex {
  private readonly feeds = new Map<string, Promise<FeedWords>>();

  constructor(private readonly dir: string) {}

  private file(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.words`);
  }

  private feed(feedId: string): Promise<FeedWords> {
    let loaded = this.feeds.get(feedId);
    if (!loaded) {
      loaded = this.load(feedId);
      this.feeds.set(feedId, loaded);
    }
    return loaded;
  }

  private async load(feedId: string): Promise<FeedWords> {
    const rows = new Map<string, Row>();
    const bytes = await readFile(this.file(feedId)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (bytes === undefined) return { rows, dirty: false };
    const metaLength = bytes.readUInt32LE(0);
    const meta = bytes.subarray(4, 4 + metaLength).toString('utf8');
    const dataStart = Math.ceil((4 + metaLength) / 8) * 8;
    const data = bytes.subarray(dataStart);
    // Copy into an aligned buffer: a Float64Array view needs an offset that is a multiple of 8.
    const all = new Float64Array(new Uint8Array(data).buffer);
    let offset = 0;
    for (const [id, productId, itemGroupId, count] of JSON.parse(meta) as PersistedRow[]) {
      rows.set(id, { id, productId, itemGroupId, words: all.slice(offset, offset + count) });
      offset += count;
    }
    return { rows, dirty: false };
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    for (const document of documents) {
      const feed = await this.feed(document.feedId);
      const { id, productId, itemGroupId, words } = document;
      feed.rows.set(id, { id, productId, itemGroupId, words: Float64Array.from(words) });
      feed.postings = undefined;
      feed.dirty = true;
    }
  }

  async deleteProducts(feedId: string, productIds: string[]): Promise<void> {
    const feed = await this.feed(feedId);
    const doomed = new Set(productIds);
    for (const [id, row] of feed.rows) {
      if (!doomed.has(row.productId)) continue;
      feed.rows.delete(id);
      feed.postings = undefined;
      feed.dirty = true;
    }
  }

  async deleteFeed(feedId: string): Promise<void> {
    this.feeds.delete(feedId);
    await rm(this.file(feedId), { force: true });
  }

  async search(query: VisualWordQuery): Promise<VisualWordHit[]> {
    const feed = await this.feed(query.feedId);
    if (feed.rows.size === 0 || query.k <= 0) return [];
    feed.postings ??= buildPostings(feed.rows);
    const { rows, slices } = feed.postings;
    const scores = new Float64Array(rows.length);
    for (const word of query.words) {
      const slice = Math.floor(word / SLICE_SPAN);
      const postings = slices[slice];
      if (!postings) continue;
      const base = (word - slice * SLICE_SPAN) * ORDINAL_BITS;
      const start = lowerBound(postings, base);
      const end = lowerBound(postings, base + ORDINAL_BITS);
      if (end === start) continue;
      // idf: a word most images have says little about which one the query shows.
      const weight = Math.log(1 + rows.length / (end - start));
      for (let i = start; i < end; i += 1) scores[postings[i]! - base]! += weight;
    }
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    const hits: VisualWordHit[] = [];
    scores.forEach((score, ordinal) => {
      const row = rows[ordinal]!;
      if (score > 0 && !excluded.has(row.itemGroupId))
        hits.push({ id: row.id, productId: row.productId, itemGroupId: row.itemGroupId, score });
    });
    return hits
      .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .slice(0, query.k);
  }

  async flush(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    for (const [feedId, loading] of this.feeds) {
      const feed = await loading;
      if (!feed.dirty) continue;
      feed.dirty = false;
      const rows = [...feed.rows.values()];
      const meta: PersistedRow[] = rows.map((row) => [
        row.id,
        row.productId,
        row.itemGroupId,
        row.words.length,
      ]);
      const words = new Float64Array(rows.reduce((sum, row) => sum + row.words.length, 0));
      let offset = 0;
      for (const row of rows) {
        words.set(row.words, offset);
        offset += row.words.length;
      }
      const json = Buffer.from(JSON.stringify(meta), 'utf8');
      const header = Buffer.alloc(Math.ceil((4 + json.length) / 8) * 8);
      header.writeUInt32LE(json.length, 0);
      json.copy(header, 4);
      // One file renamed into place: a crash leaves either the old or the new state, never a mix.
      const file = this.file(feedId);
      await writeFile(`${file}.tmp`, Buffer.concat([header, Buffer.from(words.buffer, 0, words.byteLength)]));
      await rename(`${file}.tmp`, file);
    }
  }
}
