import { createReadStream } from 'node:fs';
import { mkdir, open, rm, stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';
import {
  emptyPostings,
  type KeyStream,
  mergePostings,
  ordinalBitsFor,
  type Postings,
  postingsOf,
  postingsStream,
} from '#lib/adapters/word-postings.ts';
import {
  DiskPostings,
  type FeedFileMeta,
  isCount,
  type LoadedFeedFile,
  readFeedFile,
  SLICES,
  writeFeedFile,
  writeFully,
} from '#lib/adapters/word-file.ts';

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
 * writes one file per feed (`<feed>.words`, word-file.ts: per slice its bucket table and entries, then
 * JSON with the rows, ordinal width and slice lengths) to a temporary name and renames it, so a crash
 * leaves the old or the new state, never a mix. Files of the earlier layouts are read too.
 *
 * A feed whose entries pass `memoryBytes` (256 MB by default: ~6,000 real catalogue images) is not held
 * in memory: its postings stay in its file, whose bucket tables alone are read, and each searched word's
 * bucket is read from the file (word-file.ts `DiskPostings`). Its changes are held in memory as for a
 * small feed (the rows after the file's, with postings of their own; the file's rows deleted are marked
 * dead and left out of the scores), until the file is rewritten: the rewrite streams the file's live
 * entries and the ones in memory, merged, into the new file, then continues from it. At 100k products
 * the words were 4.5 GB of the server's 5.3 GB, and loading them took the first search 8.8–14.3 s
 * (docs/benchmarks.md "Memory").
 *
 * Files are read and written slice by slice, in pieces of at most `ioChunkBytes`: a feed's file passes
 * fs's 2 GiB limit on one read at ~40k real catalogue images.
 *
 * A flush does not rewrite that file each time (hundreds of MB at 10k images, so an import could not make
 * each chunk's words durable): the changes since the file was written are appended to a journal
 * (`<feed>.journal`, one JSON line per upsert or deletion, numbered, fsynced), which loading replays over
 * the file. The file is written again, and the journal emptied, once the journal passes a quarter of the
 * file (at least JOURNAL_MIN_BYTES), or when the changes not yet journaled hold too many words to keep
 * twice in memory. The file records the number of the last change it includes, so a crash between writing
 * the file and emptying the journal replays nothing twice.
 */
/** Pending words an upsert may leave unmerged whatever the index's size (~16 MB, ~180 catalogue photos). */
const MERGE_PENDING_WORDS = 2 ** 21;
/** Below fs's largest single read or write (2 GiB − 1). */
const IO_CHUNK_BYTES = 2 ** 30;
/** A feed's entries up to this size are held in memory; a larger feed's stay in its file (word-file.ts). */
export const DEFAULT_MEMORY_BYTES = 256 * 2 ** 20;
/** The journal may grow to this size (or a quarter of the feed file, when larger) before a rewrite. */
const JOURNAL_MIN_BYTES = 64 * 2 ** 20;
/** ...but never past this, whatever the file's size (it is replayed at every load). */
const JOURNAL_MAX_BYTES = 256 * 2 ** 20;
/** Words of changes held in memory for the journal; past it, the next flush rewrites the file instead. */
const JOURNAL_HELD_WORDS = 2 ** 22;
/** Entries per block when the postings in memory are streamed to a file. */
const MEMORY_STREAM_BLOCK = 2 ** 18;

/** One change of a feed, as a journal line: an image's words (float64, base64), or a deletion. */
type JournalEntry =
  | { s: number; u: [id: string, productId: string, itemGroupId: string, words: string] }
  | { s: number; d: [productIds: string[], except: string[]] };

/** One change of a feed as made: an image's words (sorted), or a deletion. */
type Change = { upsert: VisualWordDocument } | { delete: [productIds: string[], except: string[]] };

interface Row {
  id: string;
  productId: string;
  itemGroupId: string;
  live: boolean;
}

interface FeedWords {
  /**
   * Index = ordinal: the rows of the file's postings when they stay on disk (`onDisk`), then the rows
   * held in memory, whose ordinal in `slices` is their index − `diskRows`. Dead rows stay until the next
   * merge (in memory) or the next rewrite of the file (on disk).
   */
  rows: Row[];
  /** Live rows by id. */
  byId: Map<string, number>;
  /** The feed file's postings, when the feed is too large to hold (word-file.ts). */
  onDisk?: DiskPostings;
  /** Rows whose words are on disk (0 without `onDisk`), and how many of them are dead. */
  diskRows: number;
  diskDead: number;
  /** Per slice, the postings of the rows in memory merged so far. */
  slices: Postings[];
  /** Words of rows added since the last merge, by ordinal, sorted. */
  pending: Map<number, Float64Array>;
  /** Words in `pending`. */
  pendingWords: number;
  /** Rows in memory marked dead since the last merge. */
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
  /** While the file is rewritten: the changes made since the state it holds, to be replayed over it. */
  recording?: Change[];
}

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
    diskRows: 0,
    diskDead: 0,
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

/** A feed as its file holds it (clean: nothing to write). */
function feedOfFile(file: LoadedFeedFile): FeedWords {
  const feed = emptyFeed();
  feed.rows = file.rows.map(([id, productId, itemGroupId]) => ({ id, productId, itemGroupId, live: true }));
  feed.byId = new Map(feed.rows.map((row, ordinal) => [row.id, ordinal]));
  if (file.postings instanceof DiskPostings) {
    feed.onDisk = file.postings;
    feed.diskRows = feed.rows.length;
  } else feed.slices = file.postings;
  feed.seq = file.journalSeq;
  feed.fileBytes = file.fileBytes;
  return feed;
}

function kill(feed: FeedWords, ordinal: number): void {
  feed.rows[ordinal]!.live = false;
  feed.byId.delete(feed.rows[ordinal]!.id);
  feed.pendingWords -= feed.pending.get(ordinal)?.length ?? 0;
  feed.pending.delete(ordinal);
  if (ordinal < feed.diskRows) feed.diskDead += 1;
  else feed.dead += 1;
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

/** The change a journal line records. */
function changeOf(entry: JournalEntry, feedId: string): Change {
  if ('d' in entry) return { delete: entry.d };
  const [id, productId, itemGroupId, words] = entry.u;
  return { upsert: { id, feedId, productId, itemGroupId, words: decodeWords(words) } };
}

function apply(feed: FeedWords, change: Change): void {
  if ('upsert' in change) upsertRow(feed, change.upsert);
  else deleteRows(feed, ...change.delete);
}

/**
 * Drops the dead rows held in memory, renumbers the live ones in order and adds the pending words (see
 * the class comment). Rows on disk keep their ordinals (the dead ones are left out when searched).
 */
function merge(feed: FeedWords): void {
  if (feed.dead === 0 && feed.pending.size === 0) return;
  const offset = feed.diskRows;
  const renumbered = new Int32Array(feed.rows.length - offset).fill(-1);
  const rows: Row[] = [];
  for (let ordinal = offset; ordinal < feed.rows.length; ordinal += 1) {
    const row = feed.rows[ordinal]!;
    if (!row.live) continue;
    renumbered[ordinal - offset] = rows.length;
    rows.push(row);
  }
  const ordinalBits = ordinalBitsFor(rows.length);
  // Pending words are sorted (upsert), so each slice's words of an image are one run: its bounds per slice.
  const pending = [...feed.pending].flatMap(([ordinal, words]) => {
    const now = renumbered[ordinal - offset]!;
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
  feed.rows.length = offset;
  for (const row of rows) {
    feed.byId.set(row.id, feed.rows.length);
    feed.rows.push(row);
  }
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

/** The whole feed (on disk and in memory, merged) as each slice's key streams, for its next file. */
function snapshotStreams(feed: FeedWords): { meta: Omit<FeedFileMeta, 'journalSeq'>; slices: KeyStream[][] } {
  merge(feed);
  const { rows, diskRows, onDisk } = feed;
  const live = rows.filter((row) => row.live);
  const ordinalBits = ordinalBitsFor(live.length);
  // Ordinals of the next file: live rows on disk first, then the rows in memory (all live after the merge).
  const onDiskNow = new Int32Array(diskRows).fill(-1);
  let next = 0;
  for (let ordinal = 0; ordinal < diskRows; ordinal += 1)
    if (rows[ordinal]!.live) onDiskNow[ordinal] = next++;
  const inMemoryNow = Int32Array.from({ length: rows.length - diskRows }, (_, ordinal) => next + ordinal);
  // The arrays of this moment: a merge while the file is written replaces them and never changes them.
  const slices = feed.slices.map((postings, slice) => [
    ...(onDisk ? [onDisk.stream(slice, onDiskNow, ordinalBits)] : []),
    postingsStream(postings, inMemoryNow, ordinalBits, MEMORY_STREAM_BLOCK),
  ]);
  return {
    meta: { ordinalBits, rows: live.map((row) => [row.id, row.productId, row.itemGroupId]) },
    slices,
  };
}

export class LocalVisualWordIndex implements VisualWordIndex {
  private readonly feeds = new Map<string, Promise<FeedWords>>();
  /** Flushes and feed deletions run one at a time (they write and remove the same files). */
  private fileWork: Promise<unknown> = Promise.resolve();

  private readonly ioChunkBytes: number;
  private readonly mergePendingWords: number;
  private readonly journalMinBytes: number;
  private readonly memoryBytes: number;

  /**
   * `options.memoryBytes`: the size of a feed's entries up to which they are held in memory (above it
   * they are read from the feed's file at each search); `options.ioChunkBytes`: the largest single read
   * or write (fs's limit is 2 GiB − 1); `options.mergePendingWords`: the pending words an upsert leaves
   * unmerged whatever the index's size; `options.journalMinBytes`: the journal's size that makes a flush
   * rewrite the file (or a quarter of the file when larger); `options.journal`: false makes every flush
   * rewrite the file. Tests set them small.
   */
  constructor(
    private readonly dir: string,
    options: {
      memoryBytes?: number;
      ioChunkBytes?: number;
      mergePendingWords?: number;
      journalMinBytes?: number;
      journal?: boolean;
    } = {},
  ) {
    this.memoryBytes = options.memoryBytes ?? DEFAULT_MEMORY_BYTES;
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

  /**
   * The feed as loaded when this resolves: a `close` while it was awaited dropped the object it awaited,
   * and a change made to that one would be lost, so it is loaded again.
   */
  private async current(feedId: string): Promise<FeedWords> {
    for (;;) {
      const loading = this.feed(feedId);
      const feed = await loading;
      if (this.feeds.get(feedId) === loading) return feed;
    }
  }

  private serially<T>(work: () => Promise<T>): Promise<T> {
    const next = this.fileWork.then(work, work);
    this.fileWork = next.catch(() => undefined);
    return next;
  }

  private async load(feedId: string): Promise<FeedWords> {
    const parsed = await readFeedFile(this.file(feedId), this.ioChunkBytes, this.memoryBytes);
    const journal = await readJournal(this.journalFile(feedId)).catch(async (error: unknown) => {
      if (typeof parsed === 'object' && parsed.postings instanceof DiskPostings)
        await parsed.postings.close();
      throw error;
    });
    let feed: FeedWords;
    if (parsed === 'unreadable') {
      // Unreadable (truncated by a crash before the rename reached the disk, or a foreign format): the
      // feed starts from the journal alone and the file is rewritten at the next flush, rather than every
      // later write and flush failing; images it lacks are found again once they are re-imported.
      feed = emptyFeed();
      feed.snapshotNeeded = true;
    } else if (parsed !== undefined) {
      feed = feedOfFile(parsed);
      feed.snapshotNeeded = parsed.converted;
    } else feed = emptyFeed();
    const journalSeq = feed.seq;
    feed.journalBytes = journal.bytes;
    if (journal.damaged) feed.snapshotNeeded = true;
    // Changes after the file was written (one already in it is not applied twice).
    for (const entry of journal.entries) {
      if (entry.s <= journalSeq) continue;
      apply(feed, changeOf(entry, feedId));
      feed.seq = Math.max(feed.seq, entry.s);
    }
    // What was replayed is on disk already.
    feed.dirty = feed.snapshotNeeded;
    return feed;
  }

  /** Records a change for the journal (nothing to keep when the next flush rewrites the file anyway). */
  private static record(feed: FeedWords, change: Change): void {
    feed.seq += 1;
    feed.recording?.push(change);
    if (feed.snapshotNeeded) return;
    let entry: JournalEntry;
    let words = 0;
    if ('upsert' in change) {
      const { id, productId, itemGroupId, words: sorted } = change.upsert;
      entry = { s: feed.seq, u: [id, productId, itemGroupId, encodeWords(sorted)] };
      words = sorted.length;
    } else entry = { s: feed.seq, d: change.delete };
    feed.unjournaled.push(entry);
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
      const feed = await this.current(document.feedId);
      const sorted = upsertRow(feed, document);
      LocalVisualWordIndex.record(feed, { upsert: { ...document, words: sorted } });
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
    const feed = await this.current(feedId);
    deleteRows(feed, productIds, except);
    LocalVisualWordIndex.record(feed, { delete: [[...productIds], [...except]] });
  }

  async deleteFeed(feedId: string): Promise<void> {
    const previous = this.feeds.get(feedId);
    // An empty feed in place (not a missing entry) so that a search meanwhile cannot load the old file.
    const emptied = emptyFeed();
    // Whatever is written to the feed from now on goes to a new file, not to a journal of the old one.
    emptied.snapshotNeeded = true;
    this.feeds.set(feedId, Promise.resolve(emptied));
    await this.serially(async () => {
      // After any flush queued before: the file it may have swapped in is the one to close.
      await (await previous?.catch(() => undefined))?.onDisk?.close();
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
    const feed = await this.current(query.feedId);
    merge(feed);
    const { rows, slices, onDisk, diskRows } = feed;
    const live = rows.length - feed.diskDead;
    if (live === 0 || query.k <= 0) return [];
    const scores = new Float64Array(rows.length);
    for (const word of query.words) {
      const slice = Math.floor(word / SLICE_SPAN);
      const postings = slices[slice];
      if (!postings) continue;
      const bits = word - slice * SLICE_SPAN;
      const inMemory = postings.entries.length > 0 ? postingsOf(postings, bits) : undefined;
      const run = onDisk?.run(slice, bits);
      // Images with the word: those in memory, and the live ones of the file.
      let count = inMemory ? inMemory.end - inMemory.start : 0;
      // (An ordinal past the file's rows is a damaged entry, left out as a search in memory leaves it.)
      if (run)
        for (let i = run.start; i < run.end; i += 1) {
          const ordinal = run.entries[i]! - run.first;
          if (ordinal < diskRows && rows[ordinal]!.live) count += 1;
        }
      if (count === 0) continue;
      // idf: a word most images have says little about which one the query shows.
      const weight = Math.log(1 + live / count);
      if (inMemory) {
        const { entries } = postings;
        for (let i = inMemory.start; i < inMemory.end; i += 1)
          scores[diskRows + entries[i]! - inMemory.first]! += weight;
      }
      if (run)
        for (let i = run.start; i < run.end; i += 1) {
          const ordinal = run.entries[i]! - run.first;
          if (ordinal < diskRows) scores[ordinal]! += weight;
        }
    }
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    return bestOf(scores, query.k, rows, (row) => row.live && !excluded.has(row.itemGroupId)).map(
      (ordinal) => {
        const { id, productId, itemGroupId } = rows[ordinal]!;
        return { id, productId, itemGroupId, score: scores[ordinal]! };
      },
    );
  }

  flush(): Promise<void> {
    return this.serially(() => this.writeDirtyFeeds());
  }

  /** Writes what is not yet durable, then closes the feed files held open; a later call loads them again. */
  close(): Promise<void> {
    return this.serially(async () => {
      for (;;) {
        await this.writeDirtyFeeds();
        const loaded = await Promise.all(
          [...this.feeds].map(async ([feedId, loading]) => ({
            feedId,
            loading,
            feed: await loading.catch(() => undefined),
          })),
        );
        // Checked and dropped in one synchronous step (a change made while the files were written is
        // written first; one made after loads the feed again, `current`).
        if (loaded.some(({ feed }) => feed?.dirty)) continue;
        for (const { feedId, loading } of loaded)
          if (this.feeds.get(feedId) === loading) this.feeds.delete(feedId);
        for (const { feed } of loaded) await feed?.onDisk?.close();
        return;
      }
    });
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
      await this.rewrite(feedId, feed);
    }
  }

  /**
   * Writes the feed's whole state to its file and empties its journal. A feed whose postings are on disk
   * afterwards (they were, or they no longer fit in memory) continues from the new file: it is read
   * back, and the changes made while it was written are applied over it.
   */
  private async rewrite(feedId: string, feed: FeedWords): Promise<void> {
    const { meta, slices } = snapshotStreams(feed);
    const journalSeq = feed.seq;
    feed.dirty = false;
    feed.snapshotNeeded = false;
    feed.unjournaled = [];
    feed.unjournaledWords = 0;
    feed.recording = [];
    try {
      feed.fileBytes = await writeFeedFile(
        this.file(feedId),
        { ...meta, journalSeq },
        slices,
        this.ioChunkBytes,
      );
      // Every change in the journal is in the file now (and one left by a crash here is skipped by
      // its number at the next load).
      await rm(this.journalFile(feedId), { force: true });
      feed.journalBytes = 0;
      // (The file's size bounds its entries' size from above; reading it back decides where they are held.)
      if (feed.onDisk || feed.fileBytes > this.memoryBytes) await this.continueFromFile(feedId, feed);
    } catch (error) {
      // A failed write leaves the feed dirty, to be written whole by the next flush.
      feed.dirty = true;
      feed.snapshotNeeded = true;
      throw error;
    } finally {
      feed.recording = undefined;
    }
  }

  /** Replaces the feed's state by its file's (just written) and the changes recorded since. */
  private async continueFromFile(feedId: string, feed: FeedWords): Promise<void> {
    const file = await readFeedFile(this.file(feedId), this.ioChunkBytes, this.memoryBytes);
    if (typeof file !== 'object')
      throw new Error(`visual-word index: the file just written for ${feedId} does not read back`);
    const fresh = feedOfFile(file);
    for (const change of feed.recording ?? []) apply(fresh, change);
    const previous = feed.onDisk;
    // What is still to be written stays so: the changes made meanwhile and their journal lines.
    Object.assign(feed, {
      ...fresh,
      // (named: a file read back into memory leaves `fresh` without the key, and the closed one must go)
      onDisk: fresh.onDisk,
      seq: feed.seq,
      dirty: feed.dirty,
      snapshotNeeded: feed.snapshotNeeded,
      unjournaled: feed.unjournaled,
      unjournaledWords: feed.unjournaledWords,
      journalBytes: feed.journalBytes,
    });
    await previous?.close();
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
}
