import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
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
 *
 * Files are read and written slice by slice, in pieces of at most `ioChunkBytes`, straight from and into
 * the slices' own memory: a feed's file passes fs's 2 GiB limit on one read at ~40k real catalogue
 * images, and a copy of the whole index per flush or load would double its memory for that moment.
 */
const ORDINAL_SPAN = 2 ** 20;
const SLICES = 8;
/** Below fs's largest single read or write (2 GiB − 1). */
const IO_CHUNK_BYTES = 2 ** 30;

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

/** Reads exactly `target.byteLength` bytes at `position`, in pieces of at most `chunk` bytes. */
async function readFully(
  handle: FileHandle,
  target: Uint8Array,
  position: number,
  chunk: number,
): Promise<boolean> {
  for (let offset = 0; offset < target.byteLength;) {
    const length = Math.min(chunk, target.byteLength - offset);
    const { bytesRead } = await handle.read(target, offset, length, position + offset);
    if (bytesRead === 0) return false;
    offset += bytesRead;
  }
  return true;
}

async function writeFully(handle: FileHandle, source: Uint8Array, chunk: number): Promise<void> {
  for (let offset = 0; offset < source.byteLength;) {
    const length = Math.min(chunk, source.byteLength - offset);
    const { bytesWritten } = await handle.write(source, offset, length);
    offset += bytesWritten;
  }
}

/**
 * The rows and slices of a feed file; undefined when there is no file, 'unreadable' when it is not a
 * complete file of this format.
 */
async function readFeedFile(
  path: string,
  chunk: number,
): Promise<{ rows: PersistedFeed['rows']; slices: Float64Array[] } | 'unreadable' | undefined> {
  const handle = await open(path, 'r').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (!handle) return undefined;
  try {
    const { size } = await handle.stat();
    const length = Buffer.alloc(4);
    if (size < 4 || !(await readFully(handle, length, 0, chunk))) return 'unreadable';
    const metaLength = length.readUInt32LE(0);
    if (4 + metaLength > size) return 'unreadable';
    const metaBytes = Buffer.alloc(metaLength);
    if (!(await readFully(handle, metaBytes, 4, chunk))) return 'unreadable';
    let meta: PersistedFeed;
    try {
      meta = JSON.parse(metaBytes.toString('utf8')) as PersistedFeed;
    } catch {
      return 'unreadable';
    }
    const dataStart = Math.ceil((4 + metaLength) / 8) * 8;
    const lengths = Array.isArray(meta.slices) ? meta.slices : [];
    const total = lengths.reduce((sum, count) => sum + count, 0);
    if (
      meta.format !== 2 ||
      !Array.isArray(meta.rows) ||
      lengths.length !== SLICES ||
      size !== dataStart + total * 8
    )
      return 'unreadable';
    const slices: Float64Array[] = [];
    let position = dataStart;
    for (const count of lengths) {
      const slice = new Float64Array(count);
      if (!(await readFully(handle, new Uint8Array(slice.buffer), position, chunk))) return 'unreadable';
      slices.push(slice);
      position += slice.byteLength;
    }
    return { rows: meta.rows, slices };
  } finally {
    await handle.close();
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
  // Slice by slice, each old array dropped as soon as its successor exists: the index's memory grows by
  // one slice (an eighth) during a merge, not by a second copy of the whole.
  for (let slice = 0; slice < SLICES; slice += 1) {
    const old = feed.slices[slice]!;
    let kept = 0;
    if (feed.dead === 0) kept = old.length;
    else for (const entry of old) if (renumbered[entry % ORDINAL_SPAN]! >= 0) kept += 1;
    const next = new Float64Array(kept + added[slice]!);
    let length = 0;
    for (const entry of old) {
      const ordinal = entry % ORDINAL_SPAN;
      const now = renumbered[ordinal]!;
      if (now >= 0) next[length++] = entry - ordinal + now;
    }
    for (const [ordinal, words] of feed.pending) {
      const now = renumbered[ordinal]!;
      if (now < 0) continue;
      for (const word of words) {
        if (Math.floor(word / SLICE_SPAN) !== slice) continue;
        next[length++] = (word - slice * SLICE_SPAN) * ORDINAL_SPAN + now;
      }
    }
    // The kept entries are still sorted; only a slice with new entries needs sorting again.
    if (length > kept) next.sort();
    feed.slices[slice] = next;
  }
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

  private readonly ioChunkBytes: number;

  /** `options.ioChunkBytes`: the largest single read or write (fs's limit is 2 GiB − 1; tests set it small). */
  constructor(
    private readonly dir: string,
    options: { ioChunkBytes?: number } = {},
  ) {
    this.ioChunkBytes = options.ioChunkBytes ?? IO_CHUNK_BYTES;
  }

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
    const parsed = await readFeedFile(this.file(feedId), this.ioChunkBytes);
    const feed = emptyFeed();
    if (parsed === undefined) return feed;
    if (parsed === 'unreadable') {
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
      // The merged state as of now: a merge during the write below replaces these arrays with new ones and
      // never changes them, so the file stays consistent; changes made meanwhile mark the feed dirty again
      // and go to the next flush.
      const slices = [...feed.slices];
      const meta: PersistedFeed = {
        format: 2,
        rows: feed.rows.map((row) => [row.id, row.productId, row.itemGroupId]),
        slices: slices.map((slice) => slice.length),
      };
      feed.dirty = false;
      try {
        await this.writeFeedFile(this.file(feedId), meta, slices);
      } catch (error) {
        // A failed write leaves the feed dirty, so the next flush tries again.
        feed.dirty = true;
        throw error;
      }
    }
  }

  private async writeFeedFile(file: string, meta: PersistedFeed, slices: Float64Array[]): Promise<void> {
    const json = Buffer.from(JSON.stringify(meta), 'utf8');
    const header = Buffer.alloc(Math.ceil((4 + json.length) / 8) * 8);
    header.writeUInt32LE(json.length, 0);
    json.copy(header, 4);
    const handle = await open(`${file}.tmp`, 'w');
    try {
      await writeFully(handle, header, this.ioChunkBytes);
      for (const slice of slices)
        await writeFully(
          handle,
          new Uint8Array(slice.buffer, slice.byteOffset, slice.byteLength),
          this.ioChunkBytes,
        );
    } finally {
      await handle.close();
    }
    await rename(`${file}.tmp`, file);
  }
}
