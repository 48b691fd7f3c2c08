import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';

/**
 * Local visual-word index (one process, files under `dir`).
 *
 * Per feed, the words live in one structure that serves both search and persistence: per descriptor slice
 * (8), one sorted Float64Array of `bits · 2²⁰ + image ordinal` (exact in a double), so the postings of a
 * word are a binary search and a contiguous run, with no per-word objects (a Map per word would exceed
 * V8's Map size at a few thousand images). It is the only copy of the words: 8 bytes per (image, word),
 * ~40–55 KB per catalogue image (5,000–7,000 distinct words; docs/benchmarks.md).
 *
 * Writes are cheap and deferred: an upsert parks the image's words as pending and marks a replaced image
 * dead; a delete marks images dead. The next search or flush merges: dead entries are dropped, live
 * images renumbered in order (an order-preserving renumbering keeps each slice sorted), pending words
 * added and the slices re-sorted. Flush writes one file per feed (`<feed>.words`: a 4-byte length, JSON
 * with the rows and slice lengths, padding to 8 bytes, the slices as float64) to a temporary name and
 * renames it, so a crash leaves the old or the new state, never a mix.
 */
const ORDINAL_SPAN = 2 ** 20;
const SLICES = 8;

interface Row {
  id: string;
  productId: string;
  itemGroupId: string;
  live: boolean;
}

interface FeedWords {
  /** Index = ordinal in the slices. Dead rows stay until the next merge. */
  rows: Row[];
  /** Live rows by id. */
  byId: Map<string, number>;
  /** Per slice: sorted `bits * ORDINAL_SPAN + ordinal`, for the rows merged so far. */
  slices: Float64Array[];
  /** Words of rows added since the last merge, by ordinal. */
  pending: Map<number, Float64Array>;
  /** Rows marked dead since the last merge. */
  dead: number;
  /** Changed since the last flush. */
  dirty: boolean;
}

interface PersistedFeed {
  format: 2;
  rows: [id: string, productId: string, itemGroupId: string][];
  slices: number[];
}

/** The rows and slices of a feed file, or undefined when it is not a complete file of this format. */
function parseFeedFile(bytes: Buffer): { rows: PersistedFeed['rows']; slices: Float64Array[] } | undefined {
  try {
    const metaLength = bytes.readUInt32LE(0);
    const meta = JSON.parse(bytes.subarray(4, 4 + metaLength).toString('utf8')) as PersistedFeed;
    const dataStart = Math.ceil((4 + metaLength) / 8) * 8;
    const total = meta.slices.reduce((sum, length) => sum + length, 0);
    if (meta.format !== 2 || meta.slices.length !== SLICES || bytes.length !== dataStart + total * 8)
      return undefined;
    // Copy into an aligned buffer: a Float64Array view needs an offset that is a multiple of 8.
    const all = new Float64Array(new Uint8Array(bytes.subarray(dataStart)).buffer);
    let offset = 0;
    const slices = meta.slices.map((length) => all.subarray(offset, (offset += length)));
    return { rows: meta.rows, slices };
  } catch {
    return undefined;
  }
}

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

function emptyFeed(): FeedWords {
  return {
    rows: [],
    byId: new Map(),
    slices: Array.from({ length: SLICES }, () => new Float64Array(0)),
    pending: new Map(),
    dead: 0,
    dirty: false,
  };
}

/** Drops dead rows, renumbers the live ones in order and adds the pending words (see the class comment). */
function merge(feed: FeedWords): void {
  if (feed.dead === 0 && feed.pending.size === 0) return;
  const renumbered = new Int32Array(feed.rows.length).fill(-1);
  const rows: Row[] = [];
  feed.rows.forEach((row, ordinal) => {
    if (!row.live) return;
    renumbered[ordinal] = rows.length;
    rows.push(row);
  });
  if (rows.length > ORDINAL_SPAN)
    throw new Error(`visual-word index: more than ${ORDINAL_SPAN} images in a feed`);
  const added = new Array<number>(SLICES).fill(0);
  for (const [ordinal, words] of feed.pending) {
    if (!feed.rows[ordinal]!.live) continue;
    for (const word of words) added[Math.floor(word / SLICE_SPAN)]! += 1;
  }
  feed.slices = feed.slices.map((old, slice) => {
    const next = new Float64Array(old.length + added[slice]!);
    let length = 0;
    for (const entry of old) {
      const ordinal = entry % ORDINAL_SPAN;
      const now = renumbered[ordinal]!;
      if (now >= 0) next[length++] = entry - ordinal + now;
    }
    const kept = length;
    for (const [ordinal, words] of feed.pending) {
      const now = renumbered[ordinal]!;
      if (now < 0) continue;
      for (const word of words) {
        if (Math.floor(word / SLICE_SPAN) !== slice) continue;
        next[length++] = (word - slice * SLICE_SPAN) * ORDINAL_SPAN + now;
      }
    }
    const merged = next.subarray(0, length);
    // The kept entries are still sorted; only a slice with new entries needs sorting again.
    if (length > kept) merged.sort();
    return merged.length === next.length ? next : merged.slice();
  });
  feed.rows = rows;
  feed.byId = new Map(rows.map((row, ordinal) => [row.id, ordinal]));
  feed.pending = new Map();
  feed.dead = 0;
}

/**
 * Ordinals of the k best positive scores, best first, ties by id. A selection, not a sort of every
 * scored image: most images of a feed share a few common words with any query, and sorting ~10k hit
 * objects cost more than the word lookup itself.
 */
function bestOf(
  scores: Float64Array,
  k: number,
  rows: readonly Row[],
  keep: (row: Row) => boolean,
): number[] {
  const byRank = (a: number, b: number) =>
    scores[b]! - scores[a]! || (rows[a]!.id < rows[b]!.id ? -1 : rows[a]!.id > rows[b]!.id ? 1 : 0);
  // Candidates at or above the k-th best score seen so far; trimmed (ties kept) when the buffer fills.
  let floor = 0;
  let picked: number[] = [];
  for (let ordinal = 0; ordinal < scores.length; ordinal += 1) {
    const score = scores[ordinal]!;
    if (score <= 0 || score < floor || !keep(rows[ordinal]!)) continue;
    picked.push(ordinal);
    if (picked.length >= 4 * k + 64) {
      picked.sort(byRank);
      floor = scores[picked[k - 1]!]!;
      picked = picked.filter((candidate) => scores[candidate]! >= floor);
    }
  }
  return picked.sort(byRank).slice(0, k);
}

export class LocalVisualWordIndex implements VisualWordIndex {
  private readonly feeds = new Map<string, Promise<FeedWords>>();
  /** Flushes and feed deletions run one at a time (they write and remove the same files). */
  private fileWork: Promise<unknown> = Promise.resolve();

  constructor(private readonly dir: string) {}

  private file(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.words`);
  }

  private feed(feedId: string): Promise<FeedWords> {
    let loaded = this.feeds.get(feedId);
    if (!loaded) {
      loaded = this.load(feedId);
      // A failed read (e.g. too many open files) is not remembered: the next call tries again.
      const attempt = loaded;
      attempt.catch(() => {
        if (this.feeds.get(feedId) === attempt) this.feeds.delete(feedId);
      });
      this.feeds.set(feedId, loaded);
    }
    return loaded;
  }

  private serially<T>(work: () => Promise<T>): Promise<T> {
    const next = this.fileWork.then(work, work);
    this.fileWork = next.catch(() => undefined);
    return next;
  }

  private async load(feedId: string): Promise<FeedWords> {
    const bytes = await readFile(this.file(feedId)).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    const feed = emptyFeed();
    if (bytes === undefined) return feed;
    const parsed = parseFeedFile(bytes);
    if (!parsed) {
      // Unreadable (truncated by a crash before the rename reached the disk, or a foreign format): the
      // feed starts empty and the file is rewritten at the next flush, rather than every later write and
      // flush failing; its images are found again by the keypoint shortlist once they are re-imported.
      feed.dirty = true;
      return feed;
    }
    feed.slices = parsed.slices;
    feed.rows = parsed.rows.map(([id, productId, itemGroupId]) => ({
      id,
      productId,
      itemGroupId,
      live: true,
    }));
    feed.byId = new Map(feed.rows.map((row, ordinal) => [row.id, ordinal]));
    return feed;
  }

  private static kill(feed: FeedWords, ordinal: number): void {
    feed.rows[ordinal]!.live = false;
    feed.byId.delete(feed.rows[ordinal]!.id);
    feed.pending.delete(ordinal);
    feed.dead += 1;
    feed.dirty = true;
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    for (const document of documents) {
      const feed = await this.feed(document.feedId);
      const { id, productId, itemGroupId, words } = document;
      const existing = feed.byId.get(id);
      if (existing !== undefined) LocalVisualWordIndex.kill(feed, existing);
      const ordinal = feed.rows.length;
      feed.rows.push({ id, productId, itemGroupId, live: true });
      feed.byId.set(id, ordinal);
      feed.pending.set(ordinal, Float64Array.from(words));
      feed.dirty = true;
    }
  }

  async deleteProducts(feedId: string, productIds: string[]): Promise<void> {
    const feed = await this.feed(feedId);
    const doomed = new Set(productIds);
    for (const ordinal of [...feed.byId.values()])
      if (doomed.has(feed.rows[ordinal]!.productId)) LocalVisualWordIndex.kill(feed, ordinal);
  }

  async deleteFeed(feedId: string): Promise<void> {
    // An empty feed in place (not a missing entry) so that a search meanwhile cannot load the old file.
    this.feeds.set(feedId, Promise.resolve(emptyFeed()));
    await this.serially(() => rm(this.file(feedId), { force: true }));
  }

  async search(query: VisualWordQuery): Promise<VisualWordHit[]> {
    const feed = await this.feed(query.feedId);
    merge(feed);
    const { rows, slices } = feed;
    if (rows.length === 0 || query.k <= 0) return [];
    const scores = new Float64Array(rows.length);
    for (const word of query.words) {
      const slice = Math.floor(word / SLICE_SPAN);
      const postings = slices[slice];
      if (!postings) continue;
      const base = (word - slice * SLICE_SPAN) * ORDINAL_SPAN;
      const start = lowerBound(postings, base);
      // Postings runs are short (a word's images), so the end is found by scanning, not a second search.
      const limit = base + ORDINAL_SPAN;
      let end = start;
      while (end < postings.length && postings[end]! < limit) end += 1;
      if (end === start) continue;
      // idf: a word most images have says little about which one the query shows.
      const weight = Math.log(1 + rows.length / (end - start));
      for (let i = start; i < end; i += 1) scores[postings[i]! - base]! += weight;
    }
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    return bestOf(scores, query.k, rows, (row) => !excluded.has(row.itemGroupId)).map((ordinal) => {
      const { id, productId, itemGroupId } = rows[ordinal]!;
      return { id, productId, itemGroupId, score: scores[ordinal]! };
    });
  }

  flush(): Promise<void> {
    return this.serially(() => this.writeDirtyFeeds());
  }

  private async writeDirtyFeeds(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    for (const [feedId, loading] of this.feeds) {
      const feed = await loading.catch(() => undefined);
      // A feed whose file could not be read has nothing in memory to write.
      if (!feed?.dirty) continue;
      merge(feed);
      const meta: PersistedFeed = {
        format: 2,
        rows: feed.rows.map((row) => [row.id, row.productId, row.itemGroupId]),
        slices: feed.slices.map((slice) => slice.length),
      };
      const json = Buffer.from(JSON.stringify(meta), 'utf8');
      const header = Buffer.alloc(Math.ceil((4 + json.length) / 8) * 8);
      header.writeUInt32LE(json.length, 0);
      json.copy(header, 4);
      const file = this.file(feedId);
      await writeFile(
        `${file}.tmp`,
        Buffer.concat([
          header,
          ...feed.slices.map((slice) => Buffer.from(slice.buffer, slice.byteOffset, slice.byteLength)),
        ]),
      );
      await rename(`${file}.tmp`, file);
      // Only now: a failed write leaves the feed dirty, so the next flush tries again.
      feed.dirty = false;
    }
  }
}
