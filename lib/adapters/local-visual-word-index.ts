import { createReadStream } from 'node:fs';
import { mkdir, open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { createInterface } from 'node:readline';
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
 *
 * A flush does not rewrite that file each time (hundreds of MB at 10k images, so an import could not make
 * each chunk's words durable): the changes since the file was written are appended to a journal
 * (`<feed>.journal`, one JSON line per upsert or deletion, numbered, fsynced), which loading replays over
 * the file. The file is written again, and the journal emptied, once the journal passes a quarter of the
 * file (at least JOURNAL_MIN_BYTES), or when the changes not yet journaled hold too many words to keep
 * twice in memory. The file records the number of the last change it includes, so a crash between writing
 * the file and emptying the journal replays nothing twice.
 */
/** Ordinal span of format 2 files. */
const FORMAT_2_ORDINAL_SPAN = 2 ** 20;
const SLICES = 8;
/** Pending words an upsert may leave unmerged whatever the index's size (~16 MB, ~180 catalogue photos). */
const MERGE_PENDING_WORDS = 2 ** 21;
/** Below fs's largest single read or write (2 GiB − 1). */
const IO_CHUNK_BYTES = 2 ** 30;
/** The journal may grow to this size (or a quarter of the feed file, when larger) before a rewrite. */
const JOURNAL_MIN_BYTES = 64 * 2 ** 20;
/** ...but never past this, whatever the file's size (it is replayed at every load). */
const JOURNAL_MAX_BYTES = 256 * 2 ** 20;
/** Words of changes held in memory for the journal; past it, the next flush rewrites the file instead. */
const JOURNAL_HELD_WORDS = 2 ** 22;

/** One change of a feed, as a journal line: an image's words (float64, base64), or a deletion. */
type JournalEntry =
  | { s: number; u: [id: string, productId: string, itemGroupId: string, words: string] }
  | { s: number; d: [productIds: string[], except: string[]] };

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
  /** Number of the last change made (the file and journal lines carry these numbers). */
  seq: number;
  /** Changes not yet appended to the journal, and the words they hold. */
  unjournaled: JournalEntry[];
  unjournaledWords: number;
  /** The next flush rewrites the file (a journal would not restore the state: see `snapshotNeeded` uses). */
  snapshotNeeded: boolean;
  /** Sizes of the feed file and of its journal on disk. */
  fileBytes: number;
  journalBytes: number;
}

interface PersistedFeed {
  format: 3;
  /** The last journaled change this file includes (absent in files written before the journal). */
  journalSeq?: number;
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
  journalSeq: number;
  fileBytes: number;
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
    return { rows, slices, converted: true, journalSeq: 0, fileBytes: size };
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
  const { journalSeq } = meta as Partial<PersistedFeed>;
  return {
    rows,
    slices,
    converted: false,
    journalSeq: isCount(journalSeq) ? journalSeq : 0,
    fileBytes: size,
  };
}

/** The journal's entries in order; a line that does not parse (the last, cut by a crash) ends it. */
/**
 * The journal's entries in order, read line by line (it may pass the largest string). A line that does
 * not parse or is not an entry (the last, cut by a crash or a full disk) ends it: `damaged` then says the
 * journal must not be appended to (a new line would be glued to the cut one) but replaced.
 */
async function readJournal(
  path: string,
): Promise<{ entries: JournalEntry[]; bytes: number; damaged: boolean }> {
  const entries: JournalEntry[] = [];
  const size = await stat(path).then(
    (info) => info.size,
    (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    },
  );
  if (size === undefined) return { entries, bytes: 0, damaged: false };
  const lines = createInterface({ input: createReadStream(path, 'utf8'), crlfDelay: Infinity });
  let damaged = false;
  for await (const line of lines) {
    if (line === '') continue;
    const entry = parseEntry(line);
    if (!entry) {
      damaged = true;
      break;
    }
    entries.push(entry);
  }
  lines.close();
  return { entries, bytes: size, damaged };
}

function parseEntry(line: string): JournalEntry | undefined {
  let entry: unknown;
  try {
    entry = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof entry !== 'object' || entry === null || !isCount((entry as { s?: unknown }).s)) return undefined;
  const isText = (value: unknown) => typeof value === 'string';
  const isTexts = (value: unknown) => Array.isArray(value) && value.every(isText);
  const { u, d } = entry as { u?: unknown; d?: unknown };
  if (
    Array.isArray(u) &&
    u.length === 4 &&
    u.every(isText) &&
    Buffer.byteLength(u[3] as string, 'base64') % 8 === 0
  )
    return entry as JournalEntry;
  if (Array.isArray(d) && d.length === 2 && isTexts(d[0]) && isTexts(d[1])) return entry as JournalEntry;
  return undefined;
}

function encodeWords(words: Float64Array): string {
  return Buffer.from(words.buffer, words.byteOffset, words.byteLength).toString('base64');
}

function decodeWords(encoded: string): Float64Array {
  const bytes = Buffer.from(encoded, 'base64');
  const words = new Float64Array(bytes.length / 8);
  new Uint8Array(words.buffer).set(bytes.subarray(0, words.byteLength));
  return words;
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
    seq: 0,
    unjournaled: [],
    unjournaledWords: 0,
    snapshotNeeded: false,
    fileBytes: 0,
    journalBytes: 0,
  };
}

function kill(feed: FeedWords, ordinal: number): void {
  feed.rows[ordinal]!.live = false;
  feed.byId.delete(feed.rows[ordinal]!.id);
  feed.pendingWords -= feed.pending.get(ordinal)?.length ?? 0;
  feed.pending.delete(ordinal);
  feed.dead += 1;
  feed.dirty = true;
}

/** Adds (or replaces) an image's words as pending; answers them sorted. */
function upsertRow(feed: FeedWords, document: VisualWordDocument): Float64Array {
  const { id, productId, itemGroupId, words } = document;
  const existing = feed.byId.get(id);
  if (existing !== undefined) kill(feed, existing);
  const ordinal = feed.rows.length;
  feed.rows.push({ id, productId, itemGroupId, live: true });
  feed.byId.set(id, ordinal);
  const sorted = Float64Array.from(words);
  // Image words come sorted (visualWords); the typed array's sort costs ~2 ms per image.
  if (!isSorted(sorted)) sorted.sort();
  feed.pending.set(ordinal, sorted);
  feed.pendingWords += sorted.length;
  feed.dirty = true;
  return sorted;
}

/** Marks dead every image of these products but those in `except`. */
function deleteRows(feed: FeedWords, productIds: readonly string[], except: readonly string[]): void {
  const doomed = new Set(productIds);
  const kept = new Set(except);
  for (const ordinal of [...feed.byId.values()]) {
    const row = feed.rows[ordinal]!;
    if (doomed.has(row.productId) && !kept.has(row.id)) kill(feed, ordinal);
  }
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
  private readonly journalMinBytes: number;

  /**
   * `options.ioChunkBytes`: the largest single read or write (fs's limit is 2 GiB − 1);
   * `options.mergePendingWords`: the pending words an upsert leaves unmerged whatever the index's size;
   * `options.journalMinBytes`: the journal's size that makes a flush rewrite the file (or a quarter of the
   * file when larger); `options.journal`: false makes every flush rewrite the file. Tests set them small.
   */
  constructor(
    private readonly dir: string,
    options: {
      ioChunkBytes?: number;
      mergePendingWords?: number;
      journalMinBytes?: number;
      journal?: boolean;
    } = {},
  ) {
    this.ioChunkBytes = options.ioChunkBytes ?? IO_CHUNK_BYTES;
    this.mergePendingWords = options.mergePendingWords ?? MERGE_PENDING_WORDS;
    this.journalMinBytes = options.journal === false ? -1 : (options.journalMinBytes ?? JOURNAL_MIN_BYTES);
  }

  private file(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.words`);
  }

  private journalFile(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.journal`);
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
    const journal = await readJournal(this.journalFile(feedId));
    const feed = emptyFeed();
    let journalSeq = 0;
    if (parsed === 'unreadable') {
      // Unreadable (truncated by a crash before the rename reached the disk, or a foreign format): the
      // feed starts from the journal alone and the file is rewritten at the next flush, rather than every
      // later write and flush failing; images it lacks are found again once they are re-imported.
      feed.dirty = true;
      feed.snapshotNeeded = true;
    } else if (parsed !== undefined) {
      feed.slices = parsed.slices;
      feed.dirty = parsed.converted;
      feed.snapshotNeeded = parsed.converted;
      feed.fileBytes = parsed.fileBytes;
      journalSeq = parsed.journalSeq;
      feed.rows = parsed.rows.map(([id, productId, itemGroupId]) => ({
        id,
        productId,
        itemGroupId,
        live: true,
      }));
      feed.byId = new Map(feed.rows.map((row, ordinal) => [row.id, ordinal]));
    }
    feed.seq = journalSeq;
    feed.journalBytes = journal.bytes;
    if (journal.damaged) feed.snapshotNeeded = true;
    // Changes after the file was written (one already in it is not applied twice).
    for (const entry of journal.entries) {
      if (entry.s <= journalSeq) continue;
      if ('u' in entry) {
        const [id, productId, itemGroupId, words] = entry.u;
        upsertRow(feed, { id, feedId, productId, itemGroupId, words: decodeWords(words) });
      } else deleteRows(feed, entry.d[0], entry.d[1]);
      feed.seq = Math.max(feed.seq, entry.s);
    }
    // What was replayed is on disk already.
    feed.dirty = feed.snapshotNeeded;
    return feed;
  }

  /** Records a change for the journal (nothing to keep when the next flush rewrites the file anyway). */
  private static journal(feed: FeedWords, entry: () => Omit<JournalEntry, 's'>, words: number): void {
    feed.seq += 1;
    if (feed.snapshotNeeded) return;
    feed.unjournaled.push({ ...entry(), s: feed.seq } as JournalEntry);
    feed.unjournaledWords += words;
    if (feed.unjournaledWords > JOURNAL_HELD_WORDS) {
      feed.snapshotNeeded = true;
      feed.unjournaled = [];
      feed.unjournaledWords = 0;
    }
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    const touched = new Set<FeedWords>();
    for (const document of documents) {
      const feed = await this.feed(document.feedId);
      const sorted = upsertRow(feed, document);
      const { id, productId, itemGroupId } = document;
      LocalVisualWordIndex.journal(
        feed,
        () => ({ u: [id, productId, itemGroupId, encodeWords(sorted)] }),
        sorted.length,
      );
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
    if (productIds.length === 0) return;
    const feed = await this.feed(feedId);
    deleteRows(feed, productIds, except);
    LocalVisualWordIndex.journal(feed, () => ({ d: [[...productIds], [...except]] }), 0);
  }

  async deleteFeed(feedId: string): Promise<void> {
    // An empty feed in place (not a missing entry) so that a search meanwhile cannot load the old file.
    const emptied = emptyFeed();
    // Whatever is written to the feed from now on goes to a new file, not to a journal of the old one.
    emptied.snapshotNeeded = true;
    this.feeds.set(feedId, Promise.resolve(emptied));
    await this.serially(async () => {
      // The journal first: a crash in between leaves the file, whose feed the caller deletes again.
      await rm(this.journalFile(feedId), { force: true });
      await rm(this.file(feedId), { force: true });
      // A flush queued before this removal may have written (and marked clean) images added to the
      // feed since the deletion: the removal has just deleted them from disk, so they are written again.
      const current = await this.feeds.get(feedId)?.catch(() => undefined);
      if (current && current.rows.length > 0) {
        current.dirty = true;
        current.snapshotNeeded = true;
      }
    });
  }

  /** Loads the feed's file and journal now (and merges), as its first search would. */
  async preload(feedId: string): Promise<void> {
    merge(await this.feed(feedId));
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
      const journalLimit =
        this.journalMinBytes < 0
          ? 0
          : Math.min(JOURNAL_MAX_BYTES, Math.max(this.journalMinBytes, feed.fileBytes / 4));
      if (!feed.snapshotNeeded && feed.journalBytes < journalLimit) {
        await this.appendJournal(feedId, feed);
        continue;
      }
      merge(feed);
      // The merged state as of now: a merge during the write below replaces these arrays with new ones and
      // never changes them, so the file stays consistent; changes made meanwhile mark the feed dirty again
      // and go to the next flush.
      const slices = [...feed.slices];
      const meta: PersistedFeed = {
        format: 3,
        journalSeq: feed.seq,
        ordinalBits: slices[0]!.ordinalBits,
        rows: feed.rows.map((row) => [row.id, row.productId, row.itemGroupId]),
        slices: slices.map((slice) => slice.entries.length),
      };
      feed.dirty = false;
      feed.snapshotNeeded = false;
      feed.unjournaled = [];
      feed.unjournaledWords = 0;
      try {
        feed.fileBytes = await this.writeFeedFile(this.file(feedId), meta, slices);
        // Every change in the journal is in the file now (and one left by a crash here is skipped by
        // its number at the next load).
        await rm(this.journalFile(feedId), { force: true });
        feed.journalBytes = 0;
      } catch (error) {
        // A failed write leaves the feed dirty, to be written whole by the next flush.
        feed.dirty = true;
        feed.snapshotNeeded = true;
        throw error;
      }
    }
  }

  /** Appends the feed's changes since the last flush to its journal, durably (see the class comment). */
  private async appendJournal(feedId: string, feed: FeedWords): Promise<void> {
    const entries = feed.unjournaled;
    const words = feed.unjournaledWords;
    feed.unjournaled = [];
    feed.unjournaledWords = 0;
    feed.dirty = false;
    if (entries.length === 0) return;
    const text = Buffer.from(entries.map((entry) => `${JSON.stringify(entry)}\n`).join(''), 'utf8');
    try {
      const handle = await open(this.journalFile(feedId), 'a');
      try {
        await writeFully(handle, text, this.ioChunkBytes);
        await handle.sync();
      } finally {
        await handle.close();
      }
      feed.journalBytes += text.length;
    } catch (error) {
      // Not written (or not known to be): the next flush writes the whole file instead.
      feed.unjournaled = [...entries, ...feed.unjournaled];
      feed.unjournaledWords += words;
      feed.dirty = true;
      feed.snapshotNeeded = true;
      throw error;
    }
  }

  /** Writes the feed file (to a temporary name, renamed once complete); answers its size. */
  private async writeFeedFile(file: string, meta: PersistedFeed, slices: Postings[]): Promise<number> {
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
      // On disk before it replaces the old file, and the rename before the journal is removed (a power
      // loss must not leave a renamed but empty file and no journal).
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(`${file}.tmp`, file);
    const folder = await open(this.dir, 'r');
    try {
      await folder.sync();
    } finally {
      await folder.close();
    }
    return (
      header.length +
      slices.reduce((sum, slice) => sum + slice.buckets.byteLength + slice.entries.byteLength, 0)
    );
  }
}
