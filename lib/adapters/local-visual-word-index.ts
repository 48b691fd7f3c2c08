import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';
import {
  emptyPostings,
  mergePostings,
  ordinalBitsFor,
  type Postings,
  postingsFromKeys,
  postingsOf,
} from '#lib/adapters/word-postings.ts';

/**
 * Local visual-word index (one process, files under `dir`).
 *
 * Per feed, the words live in one structure that serves both search and persistence: per descriptor slice
 * (8), sorted postings of 4 bytes per (image, word) (word-postings.ts), so the postings of a word are a
 * binary search and a contiguous run, with no per-word objects (a Map per word would exceed V8's Map
 * size at a few thousand images). It is the only copy of the words: ~38–46 KB per catalogue image
 * (9,850 distinct words on average over the benchmark's packshots, 11,681 over the demo photos, with
 * keypoint recipe 2; docs/benchmarks.md "Memory").
 *
 * Writes are cheap and deferred: an upsert parks the image's words as pending and marks a replaced image
 * dead; a delete marks images dead. The next search or flush merges (so does an upsert that leaves many
 * words pending): dead entries are dropped, live images renumbered in order (an order-preserving
 * renumbering keeps each slice sorted), pending words sorted in and merged (word-postings.ts). Flush
 * writes one file per feed (`<feed>.words`: a 4-byte length, JSON with the rows, ordinal width and slice
 * lengths, padding to 4 bytes, then per slice its bucket table and entries as uint32) to a temporary
 * name and renames it, so a crash leaves the old or the new state, never a mix. Files of the earlier
 * layout (format 2: sorted float64 `bits · 2²⁰ + ordinal`) are read too.
 *
 * Files are read and written slice by slice, in pieces of at most `ioChunkBytes`, straight from and into
 * the slices' own memory: a feed's file passes fs's 2 GiB limit on one read at ~40k real catalogue
 * images, and a copy of the whole index per flush or load would double its memory for that moment.
 */
/** Ordinal span of format 2 files. */
const FORMAT_2_ORDINAL_SPAN = 2 ** 20;
const SLICES = 8;
/** Pending words an upsert may leave unmerged whatever the index's size (~16 MB, ~180 catalogue photos). */
const MERGE_PENDING_WORDS = 2 ** 21;
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
  /** Per slice, the postings of the rows merged so far. */
  slices: Postings[];
  /** Words of rows added since the last merge, by ordinal, sorted. */
  pending: Map<number, Float64Array>;
  /** Words in `pending`. */
  pendingWords: number;
  /** Rows marked dead since the last merge. */
  dead: number;
  /** Changed since the last flush. */
  dirty: boolean;
}

interface PersistedFeed {
  format: 3;
  rows: [id: string, productId: string, itemGroupId: string][];
  ordinalBits: number;
  /** Entries per slice. */
  slices: number[];
}

/** The earlier file layout: per slice, sorted float64 `bits · 2²⁰ + ordinal`, the data 8-byte aligned. */
interface PersistedFeedFormat2 {
  format: 2;
  rows: PersistedFeed['rows'];
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

interface LoadedFeed {
  rows: PersistedFeed['rows'];
  slices: Postings[];
  /** Read from the earlier layout: the file is rewritten at the next flush. */
  converted: boolean;
}

/**
 * The rows and slices of a feed file; undefined when there is no file, 'unreadable' when it is not a
 * complete, consistent file of a known format. Only I/O errors are thrown.
 */
async function readFeedFile(path: string, chunk: number): Promise<LoadedFeed | 'unreadable' | undefined> {
  const handle = await open(path, 'r').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (!handle) return undefined;
  try {
    return (await parseFeedFile(handle, chunk)) ?? 'unreadable';
  } catch (error) {
    // A failed system call (EIO, EMFILE…) may pass: the next load tries again. Anything else means the
    // content is not what it claims (a length no array can have, a feed over 2²⁰ images…).
    if (error instanceof Error && 'syscall' in error) throw error;
    return 'unreadable';
  } finally {
    await handle.close();
  }
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

async function parseFeedFile(handle: FileHandle, chunk: number): Promise<LoadedFeed | undefined> {
  const { size } = await handle.stat();
  const length = Buffer.alloc(4);
  if (size < 4 || !(await readFully(handle, length, 0, chunk))) return undefined;
  const metaLength = length.readUInt32LE(0);
  if (4 + metaLength > size) return undefined;
  const metaBytes = Buffer.alloc(metaLength);
  if (!(await readFully(handle, metaBytes, 4, chunk))) return undefined;
  const meta = JSON.parse(metaBytes.toString('utf8')) as Partial<PersistedFeed | PersistedFeedFormat2> | null;
  if (typeof meta !== 'object' || meta === null) return undefined;
  const { rows, slices: lengths } = meta;
  if (
    !Array.isArray(rows) ||
    !rows.every((row) => Array.isArray(row) && row.length === 3 && row.every((v) => typeof v === 'string')) ||
    !Array.isArray(lengths) ||
    lengths.length !== SLICES ||
    !lengths.every(isCount)
  )
    return undefined;
  const total = lengths.reduce((sum, count) => sum + count, 0);
  const read = (target: ArrayBufferView, position: number) =>
    readFully(handle, new Uint8Array(target.buffer, target.byteOffset, target.byteLength), position, chunk);
  const slices: Postings[] = [];
  if (meta.format === 2) {
    let position = Math.ceil((4 + metaLength) / 8) * 8;
    if (size !== position + total * 8) return undefined;
    const ordinalBits = ordinalBitsFor(rows.length);
    for (const count of lengths) {
      // One slice of doubles at a time, re-keyed in place for the compact layout (same order).
      const keys = new Float64Array(count);
      if (!(await read(keys, position))) return undefined;
      position += keys.byteLength;
      let previous = 0;
      for (let i = 0; i < count; i += 1) {
        const key = keys[i]!;
        const ordinal = key % FORMAT_2_ORDINAL_SPAN;
        if (!(key >= previous) || ordinal >= rows.length || key >= SLICE_SPAN * FORMAT_2_ORDINAL_SPAN)
          return undefined;
        previous = key;
        keys[i] = ((key - ordinal) / FORMAT_2_ORDINAL_SPAN) * 2 ** ordinalBits + ordinal;
      }
      slices.push(postingsFromKeys(keys, ordinalBits));
    }
    return { rows, slices, converted: true };
  }
  const ordinalBits = (meta as Partial<PersistedFeed>).ordinalBits;
  if (meta.format !== 3 || ordinalBits !== ordinalBitsFor(rows.length)) return undefined;
  let position = Math.ceil((4 + metaLength) / 4) * 4;
  const bucketBytes = 4 * (2 ** ordinalBits + 1);
  if (size !== position + SLICES * bucketBytes + total * 4) return undefined;
  for (const count of lengths) {
    const postings: Postings = {
      ordinalBits,
      buckets: new Uint32Array(2 ** ordinalBits + 1),
      entries: new Uint32Array(count),
    };
    if (!(await read(postings.buckets, position))) return undefined;
    position += bucketBytes;
    if (!(await read(postings.entries, position))) return undefined;
    position += postings.entries.byteLength;
    // A bucket table that starts at 0, never falls and ends at the entry count (a damaged one would send
    // lookups and merges outside the entries).
    const { buckets } = postings;
    if (buckets[0] !== 0 || buckets[buckets.length - 1] !== count) return undefined;
    for (let bucket = 1; bucket < buckets.length; bucket += 1)
      if (buckets[bucket]! < buckets[bucket - 1]!) return undefined;
    slices.push(postings);
  }
  return { rows, slices, converted: false };
}

function isSorted(values: Float64Array): boolean {
  for (let i = 1; i < values.length; i += 1) if (values[i - 1]! > values[i]!) return false;
  return true;
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
    slices: Array.from({ length: SLICES }, () => emptyPostings(ordinalBitsFor(0))),
    pending: new Map(),
    pendingWords: 0,
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
  const ordinalBits = ordinalBitsFor(rows.length);
  // Pending words are sorted (upsert), so each slice's words of an image are one run: its bounds per slice.
  const pending = [...feed.pending].flatMap(([ordinal, words]) => {
    const now = renumbered[ordinal]!;
    if (now < 0) return [];
    const bounds = Array.from({ length: SLICES + 1 }, (_, slice) => lowerBound(words, slice * SLICE_SPAN));
    return [{ now, words, bounds }];
  });
  const counts = Array.from({ length: SLICES }, (_, slice) =>
    pending.reduce((sum, { bounds }) => sum + bounds[slice + 1]! - bounds[slice]!, 0),
  );
  // Slice by slice, each old slice dropped as soon as its successor exists: during a merge the index's
  // memory grows by one to two slices (the output, and a renumbered copy of the kept entries after a
  // deletion or a wider ordinal), not by a copy of the whole.
  for (let slice = 0; slice < SLICES; slice += 1) {
    const added = { bits: new Uint32Array(counts[slice]!), ordinals: new Uint32Array(counts[slice]!) };
    let length = 0;
    const sliceStart = slice * SLICE_SPAN;
    for (const { now, words, bounds } of pending)
      for (let i = bounds[slice]!; i < bounds[slice + 1]!; i += 1) {
        added.bits[length] = words[i]! - sliceStart;
        added.ordinals[length++] = now;
      }
    feed.slices[slice] = mergePostings(feed.slices[slice]!, renumbered, added, ordinalBits);
  }
  feed.rows = rows;
  feed.byId = new Map(rows.map((row, ordinal) => [row.id, ordinal]));
  feed.pending = new Map();
  feed.pendingWords = 0;
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
  private readonly mergePendingWords: number;

  /**
   * `options.ioChunkBytes`: the largest single read or write (fs's limit is 2 GiB − 1);
   * `options.mergePendingWords`: the pending words an upsert leaves unmerged whatever the index's size.
   * Tests set them small.
   */
  constructor(
    private readonly dir: string,
    options: { ioChunkBytes?: number; mergePendingWords?: number } = {},
  ) {
    this.ioChunkBytes = options.ioChunkBytes ?? IO_CHUNK_BYTES;
    this.mergePendingWords = options.mergePendingWords ?? MERGE_PENDING_WORDS;
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
    feed.dirty = parsed.converted;
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
    feed.pendingWords -= feed.pending.get(ordinal)?.length ?? 0;
    feed.pending.delete(ordinal);
    feed.dead += 1;
    feed.dirty = true;
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    const touched = new Set<FeedWords>();
    for (const document of documents) {
      const feed = await this.feed(document.feedId);
      const { id, productId, itemGroupId, words } = document;
      const existing = feed.byId.get(id);
      if (existing !== undefined) LocalVisualWordIndex.kill(feed, existing);
      const ordinal = feed.rows.length;
      feed.rows.push({ id, productId, itemGroupId, live: true });
      feed.byId.set(id, ordinal);
      const sorted = Float64Array.from(words);
      // Image words come sorted (visualWords); the typed array's sort costs ~2 ms per image.
      if (!isSorted(sorted)) sorted.sort();
      feed.pending.set(ordinal, sorted);
      feed.pendingWords += sorted.length;
      feed.dirty = true;
      touched.add(feed);
    }
    // A large import (or the bench's growth) would otherwise hold every new word as a double until the
    // next search or flush: past a quarter of the merged entries (and 2M words), merge now. The index
    // grows by a quarter or more per merge, so each entry is moved a bounded number of times in all.
    for (const feed of touched) {
      const merged = feed.slices.reduce((sum, slice) => sum + slice.entries.length, 0);
      if (feed.pendingWords > Math.max(this.mergePendingWords, merged / 4)) merge(feed);
    }
  }

  async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []): Promise<void> {
    const feed = await this.feed(feedId);
    const doomed = new Set(productIds);
    const kept = new Set(except);
    for (const ordinal of [...feed.byId.values()]) {
      const row = feed.rows[ordinal]!;
      if (doomed.has(row.productId) && !kept.has(row.id)) LocalVisualWordIndex.kill(feed, ordinal);
    }
  }

  async deleteFeed(feedId: string): Promise<void> {
    // An empty feed in place (not a missing entry) so that a search meanwhile cannot load the old file.
    this.feeds.set(feedId, Promise.resolve(emptyFeed()));
    await this.serially(async () => {
      await rm(this.file(feedId), { force: true });
      // A flush queued before this removal may have written (and marked clean) images added to the
      // feed since the deletion: the removal has just deleted them from disk, so they are written again.
      const current = await this.feeds.get(feedId)?.catch(() => undefined);
      if (current && current.rows.length > 0) current.dirty = true;
    });
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
      const { start, end, first } = postingsOf(postings, word - slice * SLICE_SPAN);
      if (end === start) continue;
      // idf: a word most images have says little about which one the query shows.
      const weight = Math.log(1 + rows.length / (end - start));
      const { entries } = postings;
      for (let i = start; i < end; i += 1) scores[entries[i]! - first]! += weight;
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
        format: 3,
        ordinalBits: slices[0]!.ordinalBits,
        rows: feed.rows.map((row) => [row.id, row.productId, row.itemGroupId]),
        slices: slices.map((slice) => slice.entries.length),
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

  private async writeFeedFile(file: string, meta: PersistedFeed, slices: Postings[]): Promise<void> {
    const json = Buffer.from(JSON.stringify(meta), 'utf8');
    const header = Buffer.alloc(Math.ceil((4 + json.length) / 4) * 4);
    header.writeUInt32LE(json.length, 0);
    json.copy(header, 4);
    const bytes = (array: Uint32Array) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    const handle = await open(`${file}.tmp`, 'w');
    try {
      await writeFully(handle, header, this.ioChunkBytes);
      for (const slice of slices) {
        await writeFully(handle, bytes(slice.buckets), this.ioChunkBytes);
        await writeFully(handle, bytes(slice.entries), this.ioChunkBytes);
      }
    } finally {
      await handle.close();
    }
    await rename(`${file}.tmp`, file);
  }
}
