import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';
import {
  emptyPostings,
  type KeyStream,
  MAX_ORDINAL_BITS,
  mergePostings,
  ordinalBitsFor,
  type Postings,
  postingsOf,
  postingsStream,
} from '#lib/adapters/word-postings.ts';
import {
  DiskPostings,
  type FeedFileMeta,
  type FeedManifest,
  type FileRow,
  isCount,
  type LoadedFeedFile,
  readFeedFile,
  readManifest,
  SLICES,
  writeFeedFile,
  writeFully,
  writeManifest,
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
 * bucket is read from the file (word-file.ts `DiskPostings`). At 100k products the words were 4.5 GB of
 * the server's 5.3 GB, and loading them took the first search 8.8–14.3 s (docs/benchmarks.md "Memory").
 * Its changes are held in memory as for a small feed (the rows after the file's, with postings of their
 * own; the file's rows deleted are marked dead and left out of the scores).
 *
 * Such a feed is log-structured: its base file (`<feed>.words`), then segments (`<feed>.words.<n>`, the
 * same format, each with its rows and ordinals), then the rows in memory. Rows are numbered in that order
 * (`DiskPart.offset`), and a search reads each word's bucket from the base and from every segment and
 * scores the union as one feed. When the held changes are to be written (below), the rows in memory go to
 * a new segment, and the rows of the files deleted since are listed in the manifest (`<feed>.manifest`,
 * JSON: the base's generation, the segments, each file's dead rows, the last journaled change), written
 * to a temporary name and renamed after the segment: the manifest is what commits the change, so a crash
 * leaves the old state (the new segment unlisted, removed later) or the new one. That write costs the
 * changes, not the feed: rewriting the 4.5 GB file of 100k images took ~28 s, once per ~2,000 images.
 * Compaction keeps searches and the disk in bounds:
 * - past MAX_SEGMENTS segments, the two adjacent ones with the fewest entries together are merged (their
 *   dead rows left out), again while there are too many: similar sizes are merged first, so segments grow
 *   by doublings, like a binary counter, and each entry is rewritten about log₂(segments written / 4)
 *   times before the base absorbs it; searches read at most 1 + MAX_SEGMENTS files per word;
 * - once the segments, the changes to write and the base's dead rows pass REWRITE_SHARE of the base's
 *   entries, the base is rewritten instead (the whole feed, merged; the manifest and segments removed). At
 *   a share s a rewrite comes once per s · base of changes and costs (1 + s) · base: (1 + s) / s of the
 *   changes' size per change (3 at 0.5, 5 at 0.25), on top of the segments' own writes; a larger share
 *   would keep more dead rows and segment entries for searches to read.
 * Modelled for an import of 100k images onto the 100k feed, in flushes of 2,000 (.cache/diag-words/
 * segment-policy.py), 4 segments and a half write ~5.6 flushes' worth of entries per flush, against ~73 for
 * a rewrite at each: 13× less (2 segments: 5.6×; 8: 18×, for more files read per searched word; a quarter
 * instead of a half: 9.6×). A base rewritten gets the next generation (`FeedFileMeta.generation`, above
 * the manifest's), so a manifest left by a crash before its removal names another and is ignored.
 * A base written before segments (no generation) is rewritten at its first such write.
 *
 * Files are read and written slice by slice, in pieces of at most `ioChunkBytes`: a feed's file passes
 * fs's 2 GiB limit on one read at ~40k real catalogue images.
 *
 * A flush does not rewrite that file each time (hundreds of MB at 10k images, so an import could not make
 * each chunk's words durable): the changes since the file was written are appended to a journal
 * (`<feed>.journal`, one JSON line per upsert or deletion, numbered, fsynced), which loading replays over
 * the file. The file is written again (or, on disk, a segment), and the journal emptied, once the journal
 * passes a quarter of the file (at least JOURNAL_MIN_BYTES), or when the changes not yet journaled hold
 * too many words to keep twice in memory. The file (or the manifest) records the number of the last change
 * it includes, so a crash between writing it and emptying the journal replays nothing twice.
 */
/** Pending words an upsert may leave unmerged whatever the index's size (~16 MB, ~180 catalogue photos). */
const MERGE_PENDING_WORDS = 2 ** 21;
/** Below fs's largest single read or write (2 GiB − 1). */
const IO_CHUNK_BYTES = 2 ** 30;
/** A feed's entries up to this size are held in memory; a larger feed's stay in its file (word-file.ts). */
export const DEFAULT_MEMORY_BYTES = 256 * 2 ** 20;
/** The journal may grow to this size (or a quarter of the feed file, when larger) before a state write. */
const JOURNAL_MIN_BYTES = 64 * 2 ** 20;
/** ...but never past this, whatever the file's size (it is replayed at every load). */
const JOURNAL_MAX_BYTES = 256 * 2 ** 20;
/** Words of changes held in memory for the journal; past it, the next flush writes the state instead. */
const JOURNAL_HELD_WORDS = 2 ** 22;
/** Entries per block when the postings in memory are streamed to a file. */
const MEMORY_STREAM_BLOCK = 2 ** 18;
/** Segments of a feed on disk past which the smallest adjacent two are merged (see the class comment). */
const MAX_SEGMENTS = 4;
/** Segments, changes and dead rows, as a share of the base's entries, past which the base is rewritten. */
const REWRITE_SHARE = 0.5;
/**
 * Entries per bucket a segment's ordinal width aims at: a segment of 2,000 images at the width its rows
 * need (11 bits) has ~1,400 entries per bucket, against ~1,070 in the base of 100k (17 bits), and each
 * searched word reads its bucket from every segment. With 4 such segments on the 100k feed, the word
 * search p50 was 27 ms at the rows' width, 15–18 ms widened (base alone: 11 ms; docs/benchmarks.md
 * "Segments instead of rewrites").
 */
const SEGMENT_BUCKET_ENTRIES = 256;

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

/** A file of a feed on disk: its base file (segment 0) or a segment, its rows being `rows[offset…)`. */
interface DiskPart {
  segment: number;
  postings: DiskPostings;
  offset: number;
  rows: number;
  /** Its rows dead in the manifest (as on disk: the rows marked dead since are in the journal). */
  dead: number[];
}

/** A file of a feed on disk as a manifest lists it, and its rows. */
interface PartState {
  segment: number;
  postings: DiskPostings;
  rows: readonly Pick<Row, 'id' | 'productId' | 'itemGroupId'>[];
  dead: number[];
}

interface FeedWords {
  /**
   * Index = ordinal: the rows of the files whose postings stay on disk (`disk`), then the rows held in
   * memory, whose ordinal in `slices` is their index − `diskRows`. Dead rows stay until the next merge (in
   * memory) or the next write of their file's segment or base (on disk).
   */
  rows: Row[];
  /** Live rows by id. */
  byId: Map<string, number>;
  /** The base file and segments whose postings stay on disk, in row order (none: the feed is held). */
  disk: DiskPart[];
  /** Rows whose words are on disk (0 without `disk`), and how many of them are dead. */
  diskRows: number;
  diskDead: number;
  /** The base file's generation (on disk), and the next segment's number. */
  baseGeneration?: number;
  nextSegment: number;
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
  /**
   * The next flush writes the state (a segment or the file; a journal would not restore the state: see
   * `snapshotNeeded` uses), and the whole file (`rewriteNeeded`: a base without id, a failed rewrite).
   */
  snapshotNeeded: boolean;
  rewriteNeeded: boolean;
  /** Sizes of the feed (base) file and of its journal on disk. */
  fileBytes: number;
  journalBytes: number;
  /**
   * While a file or segment is written: the changes made since the state it holds, to be replayed over
   * it (a segment merge keeps the state, so the recording goes on over the merges after a segment).
   */
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
  // A last line complete but for its newline (an append cut just before it) reads as an entry, and the
  // next append would glue its first line to it, losing both at the load after: appended to no more.
  if (!damaged && size > 0) damaged = (await lastByte(path, size)) !== 0x0a;
  return { entries, bytes: size, damaged };
}

async function lastByte(path: string, size: number): Promise<number | undefined> {
  const handle = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(1), 0, 1, size - 1);
    return bytesRead === 1 ? buffer[0] : undefined;
  } finally {
    await handle.close();
  }
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
    disk: [],
    diskRows: 0,
    diskDead: 0,
    nextSegment: 1,
    slices: Array.from({ length: SLICES }, () => emptyPostings(ordinalBitsFor(0))),
    pending: new Map(),
    pendingWords: 0,
    dead: 0,
    dirty: false,
    seq: 0,
    unjournaled: [],
    unjournaledWords: 0,
    snapshotNeeded: false,
    rewriteNeeded: false,
    fileBytes: 0,
    journalBytes: 0,
  };
}

const rowsOf = (rows: readonly FileRow[]) =>
  rows.map(([id, productId, itemGroupId]) => ({ id, productId, itemGroupId }));

/** A feed as its file holds it (clean: nothing to write). */
function feedOfFile(file: LoadedFeedFile): FeedWords {
  if (file.postings instanceof DiskPostings) {
    const feed = feedOfParts([{ segment: 0, postings: file.postings, rows: rowsOf(file.rows), dead: [] }]);
    feed.baseGeneration = file.generation;
    feed.rewriteNeeded = file.generation === undefined;
    feed.seq = file.journalSeq;
    feed.fileBytes = file.fileBytes;
    return feed;
  }
  const feed = emptyFeed();
  feed.rows = file.rows.map(([id, productId, itemGroupId]) => ({ id, productId, itemGroupId, live: true }));
  feed.byId = new Map(feed.rows.map((row, ordinal) => [row.id, ordinal]));
  feed.slices = file.postings;
  feed.seq = file.journalSeq;
  feed.fileBytes = file.fileBytes;
  return feed;
}

/** A feed as its files on disk hold it (base and segments, with their dead rows; nothing in memory). */
function feedOfParts(parts: readonly PartState[]): FeedWords {
  const feed = emptyFeed();
  for (const { segment, postings, rows, dead } of parts) {
    const offset = feed.rows.length;
    for (const { id, productId, itemGroupId } of rows) {
      feed.byId.set(id, feed.rows.length);
      feed.rows.push({ id, productId, itemGroupId, live: true });
    }
    for (const ordinal of dead) {
      const row = feed.rows[offset + ordinal]!;
      row.live = false;
      if (feed.byId.get(row.id) === offset + ordinal) feed.byId.delete(row.id);
    }
    feed.diskDead += dead.length;
    feed.disk.push({ segment, postings, offset, rows: rows.length, dead });
  }
  feed.diskRows = feed.rows.length;
  return feed;
}

/** A file's rows dead now (its ordinals, ascending). */
function deadRowsOf(feed: FeedWords, part: DiskPart): number[] {
  const dead: number[] = [];
  for (let ordinal = 0; ordinal < part.rows; ordinal += 1)
    if (!feed.rows[part.offset + ordinal]!.live) dead.push(ordinal);
  return dead;
}

/** The files of a feed on disk as they are now (each file's dead rows those of this moment). */
function partStates(feed: FeedWords): PartState[] {
  return feed.disk.map((part) => ({
    segment: part.segment,
    postings: part.postings,
    rows: feed.rows.slice(part.offset, part.offset + part.rows),
    dead: deadRowsOf(feed, part),
  }));
}

/** The manifest of these files. */
function manifestOf(
  baseGeneration: number,
  journalSeq: number,
  next: number,
  parts: readonly PartState[],
): FeedManifest {
  return {
    base: baseGeneration,
    journalSeq,
    next,
    parts: parts.map(({ segment, rows, dead }) => ({ segment, rows: rows.length, dead })),
  };
}

/**
 * The ordinal width of a segment of `rows` rows whose fullest slice has `entries` entries: wide enough
 * for its buckets to hold about SEGMENT_BUCKET_ENTRIES entries each.
 */
function segmentOrdinalBits(rows: number, entries: number): number {
  const wanted = Math.ceil(Math.log2(Math.max(1, entries / SEGMENT_BUCKET_ENTRIES)));
  return Math.min(MAX_ORDINAL_BITS, Math.max(ordinalBitsFor(rows), wanted));
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

const fileRowOf = (row: Pick<Row, 'id' | 'productId' | 'itemGroupId'>): FileRow => [
  row.id,
  row.productId,
  row.itemGroupId,
];

/** The whole feed (on disk and in memory, merged) as each slice's key streams, for its next file. */
function snapshotStreams(feed: FeedWords): { meta: Omit<FeedFileMeta, 'journalSeq'>; slices: KeyStream[][] } {
  merge(feed);
  const { rows, diskRows, disk } = feed;
  const live = rows.filter((row) => row.live);
  const ordinalBits = ordinalBitsFor(live.length);
  // Ordinals of the next file: live rows on disk first (base, then segments), then the rows in memory (all
  // live after the merge).
  let next = 0;
  const onDiskNow = disk.map((part) => {
    const now = new Int32Array(part.rows).fill(-1);
    for (let ordinal = 0; ordinal < part.rows; ordinal += 1)
      if (rows[part.offset + ordinal]!.live) now[ordinal] = next++;
    return now;
  });
  const inMemoryNow = Int32Array.from({ length: rows.length - diskRows }, (_, ordinal) => next + ordinal);
  // The arrays of this moment: a merge while the file is written replaces them and never changes them.
  // (The base first: mergeKeyStreams merges the others together before it.)
  const slices = feed.slices.map((postings, slice) => [
    ...disk.map((part, index) => part.postings.stream(slice, onDiskNow[index]!, ordinalBits)),
    postingsStream(postings, inMemoryNow, ordinalBits, MEMORY_STREAM_BLOCK),
  ]);
  return { meta: { ordinalBits, rows: live.map(fileRowOf) }, slices };
}

/**
 * The feed's state as of now is being written (a file or a segment): nothing is left to journal, and the
 * changes made from now on are recorded, to be replayed over what the write holds.
 */
function beginStateWrite(feed: FeedWords): void {
  feed.dirty = false;
  feed.snapshotNeeded = false;
  feed.unjournaled = [];
  feed.unjournaledWords = 0;
  feed.recording = [];
}

export class LocalVisualWordIndex implements VisualWordIndex {
  private readonly feeds = new Map<string, Promise<FeedWords>>();
  /** Flushes and feed deletions run one at a time (they write and remove the same files). */
  private fileWork: Promise<unknown> = Promise.resolve();

  private readonly ioChunkBytes: number;
  private readonly mergePendingWords: number;
  private readonly journalMinBytes: number;
  private readonly memoryBytes: number;
  private readonly maxSegments: number;
  private readonly rewriteShare: number;

  /**
   * `options.memoryBytes`: the size of a feed's entries up to which they are held in memory (above it
   * they are read from the feed's files at each search); `options.ioChunkBytes`: the largest single read
   * or write (fs's limit is 2 GiB − 1); `options.mergePendingWords`: the pending words an upsert leaves
   * unmerged whatever the index's size; `options.journalMinBytes`: the journal's size that makes a flush
   * write the state (or a quarter of the file when larger); `options.journal`: false makes every flush
   * write the state (file or segment); `options.maxSegments` and `options.rewriteShare`: the compaction
   * of a feed on disk (MAX_SEGMENTS, REWRITE_SHARE). Tests set them small.
   */
  constructor(
    private readonly dir: string,
    options: {
      memoryBytes?: number;
      ioChunkBytes?: number;
      mergePendingWords?: number;
      journalMinBytes?: number;
      journal?: boolean;
      maxSegments?: number;
      rewriteShare?: number;
    } = {},
  ) {
    this.memoryBytes = options.memoryBytes ?? DEFAULT_MEMORY_BYTES;
    this.ioChunkBytes = options.ioChunkBytes ?? IO_CHUNK_BYTES;
    this.mergePendingWords = options.mergePendingWords ?? MERGE_PENDING_WORDS;
    this.journalMinBytes = options.journal === false ? -1 : (options.journalMinBytes ?? JOURNAL_MIN_BYTES);
    // (At least one: a merge takes two.)
    this.maxSegments = Math.max(1, options.maxSegments ?? MAX_SEGMENTS);
    this.rewriteShare = options.rewriteShare ?? REWRITE_SHARE;
  }

  private file(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.words`);
  }

  /** (No other file of the folder ends in `.words.<digits>`: feed names end in `.words`.) */
  private segmentFile(feedId: string, segment: number): string {
    return segment === 0 ? this.file(feedId) : `${this.file(feedId)}.${segment}`;
  }

  private manifestFile(feedId: string): string {
    return join(this.dir, `${encodeURIComponent(feedId)}.manifest`);
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
    const files = await this.loadFiles(feedId);
    const journal = await readJournal(this.journalFile(feedId)).catch(async (error: unknown) => {
      if (typeof files === 'object') for (const part of files.disk) await part.postings.close();
      throw error;
    });
    let feed: FeedWords;
    if (files === 'unreadable') {
      // Unreadable (truncated by a crash before the rename reached the disk, or a foreign format): the
      // feed starts from the journal alone and the file is rewritten at the next flush, rather than every
      // later write and flush failing; images it lacks are found again once they are re-imported.
      feed = emptyFeed();
      feed.snapshotNeeded = true;
    } else feed = files ?? emptyFeed();
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

  /**
   * The feed as its files hold it: the base file alone, or with the segments and dead rows its manifest
   * lists. A manifest naming another base is older than the base (see the class comment) and ignored; an
   * unreadable one, or one whose segments do not read, leaves the base alone, to be written again.
   */
  private async loadFiles(feedId: string): Promise<FeedWords | 'unreadable' | undefined> {
    const manifest = await readManifest(this.manifestFile(feedId));
    // With a manifest, the base stays on disk whatever its size (segments are searched on disk only).
    const parsed = await readFeedFile(this.file(feedId), this.ioChunkBytes, manifest ? -1 : this.memoryBytes);
    if (typeof parsed !== 'object') return parsed;
    if (typeof manifest === 'object' && manifest.base === parsed.generation) {
      const layered = await this.openSegments(feedId, manifest, parsed);
      if (layered) return layered;
    }
    let base = parsed;
    if (manifest && parsed.postings instanceof DiskPostings) {
      // Read again with the budget (it may fit in memory without the manifest's segments).
      await parsed.postings.close();
      const again = await readFeedFile(this.file(feedId), this.ioChunkBytes, this.memoryBytes);
      if (typeof again !== 'object') return again;
      base = again;
    }
    const feed = feedOfFile(base);
    // (A manifest of this base whose segments do not read is damaged: what it held is lost, as with an
    // unreadable file, and the state is written again.)
    const damaged =
      manifest === 'unreadable' || (typeof manifest === 'object' && manifest.base === parsed.generation);
    feed.snapshotNeeded = base.converted || damaged;
    // ...as a new base, not a segment: the manifest on disk still lists segments by number, and the next
    // segment's (1 again) would be renamed over one of them, a file a crash before the new manifest would
    // leave that manifest naming (found by review).
    if (damaged) feed.rewriteNeeded = true;
    return feed;
  }

  /** The feed of a base file (on disk) and its manifest's segments; undefined if one does not read. */
  private async openSegments(
    feedId: string,
    manifest: FeedManifest,
    base: LoadedFeedFile,
  ): Promise<FeedWords | undefined> {
    const [basePart, ...segments] = manifest.parts;
    if (!(base.postings instanceof DiskPostings) || basePart?.rows !== base.rows.length) return undefined;
    const parts: PartState[] = [
      { segment: 0, postings: base.postings, rows: rowsOf(base.rows), dead: basePart.dead },
    ];
    for (const { segment, rows, dead } of segments) {
      const file = await readFeedFile(this.segmentFile(feedId, segment), this.ioChunkBytes, -1).catch(
        async (error: unknown) => {
          // (the base too: the load fails)
          for (const part of parts) await part.postings.close();
          throw error;
        },
      );
      if (typeof file !== 'object' || !(file.postings instanceof DiskPostings) || file.rows.length !== rows) {
        if (typeof file === 'object' && file.postings instanceof DiskPostings) await file.postings.close();
        for (const part of parts.slice(1)) await part.postings.close();
        return undefined;
      }
      parts.push({ segment, postings: file.postings, rows: rowsOf(file.rows), dead });
    }
    const feed = feedOfParts(parts);
    feed.baseGeneration = manifest.base;
    feed.nextSegment = manifest.next;
    feed.seq = manifest.journalSeq;
    feed.fileBytes = base.fileBytes;
    return feed;
  }

  /** Records a change for the journal (nothing to keep when the next flush writes the state anyway). */
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
    const placeholder = Promise.resolve(emptied);
    this.feeds.set(feedId, placeholder);
    await this.serially(async () => {
      // After any flush queued before: the files it may have swapped in are the ones to close.
      const old = await previous?.catch(() => undefined);
      for (const part of old?.disk ?? []) await part.postings.close();
      // The journal first, then the manifest: a crash in between leaves the base file (with or without its
      // segments), whose feed the caller deletes again.
      await rm(this.journalFile(feedId), { force: true });
      await rm(this.manifestFile(feedId), { force: true });
      await this.removeSegments(feedId, []);
      await rm(this.file(feedId), { force: true });
      // A flush queued before this removal may have written (and marked clean) images added to the
      // feed since the deletion: the removal has just deleted them from disk, so they are written again.
      const current = await this.feeds.get(feedId)?.catch(() => undefined);
      if (current && current.rows.length > 0) {
        current.dirty = true;
        current.snapshotNeeded = true;
        // (whole: the files it may continue from are gone)
        current.rewriteNeeded = true;
      } else if (this.feeds.get(feedId) === placeholder && !emptied.dirty) {
        // Nothing written since, and the files are gone: the entry goes too (a later use loads the feed
        // afresh, from no files). Kept, every deleted feed id held ~12 KB for the life of the process.
        this.feeds.delete(feedId);
      }
    });
  }

  /**
   * Removes the feed's segment files but `kept` (and temporary ones): those a crash left unlisted, and
   * those a merge or a rewrite of the base has replaced (once the manifest says so).
   */
  private async removeSegments(feedId: string, kept: readonly number[]): Promise<void> {
    const prefix = `${encodeURIComponent(feedId)}.words.`;
    const names = await readdir(this.dir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    });
    for (const name of names) {
      if (!name.startsWith(prefix)) continue;
      // (`tmp` alone: a base file a crash left half written, as large as the base; every write of it is
      // over by now, as this runs in the index's serial queue.)
      const match = /^(?:(\d+)(\.tmp)?|tmp)$/.exec(name.slice(prefix.length));
      if (match && (match[1] === undefined || match[2] || !kept.includes(Number(match[1]))))
        await rm(join(this.dir, name), { force: true });
    }
  }

  /** Loads the feed's files and journal now (and merges), as its first search would. */
  async preload(feedId: string): Promise<void> {
    merge(await this.feed(feedId));
  }

  async search(query: VisualWordQuery): Promise<VisualWordHit[]> {
    // As `current`, but checked in the same step as the reading below: returned through `current`, the
    // feed reached the search a few microtasks later, by when `close` could have closed its files ("a
    // feed file read after it was closed", found by review). The rest of the search is synchronous.
    let feed: FeedWords;
    for (;;) {
      const loading = this.feed(query.feedId);
      feed = await loading;
      if (this.feeds.get(query.feedId) === loading) break;
    }
    merge(feed);
    const { rows, slices, disk, diskRows } = feed;
    const live = rows.length - feed.diskDead;
    if (live === 0 || query.k <= 0) return [];
    const scores = new Float64Array(rows.length);
    // Per word, its run in each file on disk (each file's run is in a buffer of its own).
    const runs: ReturnType<DiskPostings['run']>[] = [];
    for (const word of query.words) {
      const slice = Math.floor(word / SLICE_SPAN);
      const postings = slices[slice];
      if (!postings) continue;
      const bits = word - slice * SLICE_SPAN;
      const inMemory = postings.entries.length > 0 ? postingsOf(postings, bits) : undefined;
      // Images with the word: those in memory, and the live ones of the files.
      let count = inMemory ? inMemory.end - inMemory.start : 0;
      for (let part = 0; part < disk.length; part += 1) {
        const { postings: file, offset, rows: fileRows } = disk[part]!;
        const run = file.run(slice, bits);
        runs[part] = run;
        // (An ordinal past the file's rows is a damaged entry, left out as a search in memory leaves it.)
        for (let i = run.start; i < run.end; i += 1) {
          const ordinal = run.entries[i]! - run.first;
          if (ordinal < fileRows && rows[offset + ordinal]!.live) count += 1;
        }
      }
      if (count === 0) continue;
      // idf: a word most images have says little about which one the query shows.
      const weight = Math.log(1 + live / count);
      if (inMemory) {
        const { entries } = postings;
        for (let i = inMemory.start; i < inMemory.end; i += 1)
          scores[diskRows + entries[i]! - inMemory.first]! += weight;
      }
      for (let part = 0; part < disk.length; part += 1) {
        const { offset, rows: fileRows } = disk[part]!;
        const run = runs[part]!;
        for (let i = run.start; i < run.end; i += 1) {
          const ordinal = run.entries[i]! - run.first;
          if (ordinal < fileRows) scores[offset + ordinal]! += weight;
        }
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
        for (const { feed } of loaded) for (const part of feed?.disk ?? []) await part.postings.close();
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
      if (this.segmentFits(feed)) await this.writeSegment(feedId, feed);
      else await this.rewrite(feedId, feed);
    }
  }

  /**
   * Whether the feed's changes go to a segment rather than a rewrite of its base: the feed is on disk, its
   * base has a generation, and the segments, the changes and the base's dead rows stay within the share
   * of the base's entries (see the class comment; entries, not bytes: they are what a rewrite moves).
   */
  private segmentFits(feed: FeedWords): boolean {
    const [base, ...segments] = feed.disk;
    if (!base || feed.rewriteNeeded || feed.baseGeneration === undefined) return false;
    const baseEntries = base.postings.entries;
    const held = feed.slices.reduce((sum, slice) => sum + slice.entries.length, 0) + feed.pendingWords;
    const deadShare = base.rows === 0 ? 0 : deadRowsOf(feed, base).length / base.rows;
    const segmentEntries = segments.reduce((sum, part) => sum + part.postings.entries, 0);
    return segmentEntries + held + deadShare * baseEntries <= this.rewriteShare * baseEntries;
  }

  /**
   * Writes the feed's whole state to its file, then removes its manifest, journal and segments (a crash in
   * between leaves a manifest of an older generation, ignored). A feed whose postings are on disk
   * afterwards (they were, or they no longer fit in memory) continues from the new file: it is read
   * back, and the changes made while it was written are applied over it.
   */
  private async rewrite(feedId: string, feed: FeedWords): Promise<void> {
    const { meta, slices } = snapshotStreams(feed);
    const journalSeq = feed.seq;
    beginStateWrite(feed);
    feed.rewriteNeeded = false;
    try {
      // A generation no manifest on disk names (one left by a crash before its removal names an older base).
      const manifest = await readManifest(this.manifestFile(feedId));
      const generation =
        Math.max(feed.baseGeneration ?? 0, typeof manifest === 'object' ? manifest.base : 0) + 1;
      feed.fileBytes = await writeFeedFile(
        this.file(feedId),
        { ...meta, journalSeq, generation },
        slices,
        this.ioChunkBytes,
      );
      await rm(this.manifestFile(feedId), { force: true });
      // Every change in the journal is in the file now (and one left by a crash here is skipped by
      // its number at the next load).
      await rm(this.journalFile(feedId), { force: true });
      feed.journalBytes = 0;
      // (The file's size bounds its entries' size from above; reading it back decides where they are held.)
      if (feed.disk.length > 0 || feed.fileBytes > this.memoryBytes)
        await this.continueFromFile(feedId, feed);
      await this.removeSegments(feedId, []);
    } catch (error) {
      // A failed write leaves the feed dirty, to be written whole by the next flush (not as a segment:
      // the base file on disk may be the new one already).
      feed.dirty = true;
      feed.snapshotNeeded = true;
      feed.rewriteNeeded = true;
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
    const previous = feed.disk;
    this.continueFrom(feed, feedOfFile(file));
    for (const part of previous) await part.postings.close();
  }

  /**
   * Makes `fresh` (the state a file or segment just written holds) the feed's, with the changes recorded
   * since replayed over it. What is still to be written stays so: the changes made meanwhile and their
   * journal lines.
   */
  private continueFrom(feed: FeedWords, fresh: FeedWords): void {
    for (const change of feed.recording ?? []) apply(fresh, change);
    Object.assign(feed, {
      ...fresh,
      seq: feed.seq,
      dirty: feed.dirty,
      snapshotNeeded: feed.snapshotNeeded,
      rewriteNeeded: feed.rewriteNeeded,
      unjournaled: feed.unjournaled,
      unjournaledWords: feed.unjournaledWords,
      journalBytes: feed.journalBytes,
      // (named: a file read back into memory leaves `fresh` without the key, and the closed ones must go)
      baseGeneration: fresh.baseGeneration,
      fileBytes: feed.fileBytes,
      recording: feed.recording,
    });
  }

  /**
   * Writes the rows in memory as a new segment and the files' dead rows into the manifest (the state as
   * of now), empties the journal, continues from the files, and merges segments past MAX_SEGMENTS.
   */
  private async writeSegment(feedId: string, feed: FeedWords): Promise<void> {
    merge(feed);
    const journalSeq = feed.seq;
    const baseGeneration = feed.baseGeneration!;
    const parts = partStates(feed);
    // The rows in memory, all live after the merge, and their postings of this moment (a merge while the
    // segment is written replaces the arrays and never changes them).
    const held = feed.rows.slice(feed.diskRows);
    const heldSlices = feed.slices;
    beginStateWrite(feed);
    try {
      try {
        if (held.length > 0) {
          // (A number never used again by this feed, even if this write fails: a manifest that reached the
          // disk although its write failed may list it, and the next write must not replace that file.)
          const segment = feed.nextSegment++;
          const postings = await this.writeSegmentFile(
            feedId,
            segment,
            held,
            (ordinalBits) => {
              const identity = Int32Array.from({ length: held.length }, (_, ordinal) => ordinal);
              return heldSlices.map((slice) => [
                postingsStream(slice, identity, ordinalBits, MEMORY_STREAM_BLOCK),
              ]);
            },
            Math.max(...heldSlices.map((slice) => slice.entries.length)),
          );
          parts.push({ segment, postings, rows: held, dead: [] });
        }
        await writeManifest(
          this.manifestFile(feedId),
          manifestOf(baseGeneration, journalSeq, feed.nextSegment, parts),
          this.ioChunkBytes,
        );
      } catch (error) {
        if (parts.length > feed.disk.length) await parts.at(-1)!.postings.close();
        // The next flush writes the state again (the manifest on disk is the old one, or lists what the
        // feed's files and memory hold now: either way nothing is listed twice).
        feed.dirty = true;
        feed.snapshotNeeded = true;
        throw error;
      }
      // Committed: the segment holds the rows that were in memory.
      this.continueFrom(feed, this.feedOf(parts, baseGeneration, feed.nextSegment));
      await rm(this.journalFile(feedId), { force: true });
      feed.journalBytes = 0;
      await this.mergeSegments(feedId, feed, parts, journalSeq);
    } finally {
      feed.recording = undefined;
    }
  }

  /** A feed whose state is these files (a manifest just written). */
  private feedOf(parts: readonly PartState[], baseGeneration: number, next: number): FeedWords {
    const fresh = feedOfParts(parts);
    fresh.baseGeneration = baseGeneration;
    fresh.nextSegment = next;
    return fresh;
  }

  /**
   * Writes a segment file of these rows (the streams its slices' entries at the ordinal width given) and
   * opens it; `entries`: its fullest slice's entries (they decide the width, `segmentOrdinalBits`).
   */
  private async writeSegmentFile(
    feedId: string,
    segment: number,
    rows: readonly Pick<Row, 'id' | 'productId' | 'itemGroupId'>[],
    streams: (ordinalBits: number) => KeyStream[][],
    entries: number,
  ): Promise<DiskPostings> {
    const file = this.segmentFile(feedId, segment);
    const ordinalBits = segmentOrdinalBits(rows.length, entries);
    await writeFeedFile(
      file,
      { journalSeq: 0, ordinalBits, rows: rows.map(fileRowOf) },
      streams(ordinalBits),
      this.ioChunkBytes,
    );
    const written = await readFeedFile(file, this.ioChunkBytes, -1);
    // (Read with a memory budget of -1, a file that reads has its postings on disk: nothing to close here.)
    if (typeof written !== 'object' || !(written.postings instanceof DiskPostings))
      throw new Error(`visual-word index: the segment just written for ${feedId} does not read back`);
    return written.postings;
  }

  /**
   * While the feed has more than `maxSegments` segments, merges the two adjacent ones with the fewest
   * entries together into one (the rows dead in the manifest left out), lists it in their place, and
   * continues from the files. The state stays the same (the manifest keeps its journal number), so the
   * changes recorded since the segment was written are replayed over each new layout.
   */
  private async mergeSegments(
    feedId: string,
    feed: FeedWords,
    parts: PartState[],
    journalSeq: number,
  ): Promise<void> {
    while (parts.length - 1 > this.maxSegments) {
      let at = 1;
      const size = (index: number) => parts[index]!.postings.entries + parts[index + 1]!.postings.entries;
      for (let index = 2; index + 1 < parts.length; index += 1) if (size(index) < size(at)) at = index;
      const pair = parts.slice(at, at + 2);
      // Ordinals of the merged segment: the first one's live rows, then the second's (−1: dead, left out).
      let now = 0;
      const renumbered = pair.map(({ rows, dead }) => {
        const gone = new Set(dead);
        return Int32Array.from(rows, (_, ordinal) => (gone.has(ordinal) ? -1 : now++));
      });
      const kept = pair.flatMap(({ rows }, index) =>
        rows.filter((_, ordinal) => renumbered[index]![ordinal]! >= 0),
      );
      const segment = feed.nextSegment++;
      const next = feed.nextSegment;
      const postings = await this.writeSegmentFile(
        feedId,
        segment,
        kept,
        (ordinalBits) =>
          Array.from({ length: SLICES }, (_, slice) =>
            pair.map((part, index) => part.postings.stream(slice, renumbered[index]!, ordinalBits)),
          ),
        // (The fullest slice, estimated: twice the average of both files' entries over the slices.)
        Math.ceil(size(at) / SLICES) * 2,
      );
      const merged = [
        ...parts.slice(0, at),
        { segment, postings, rows: kept, dead: [] },
        ...parts.slice(at + 2),
      ];
      try {
        await writeManifest(
          this.manifestFile(feedId),
          manifestOf(feed.baseGeneration!, journalSeq, next, merged),
          this.ioChunkBytes,
        );
      } catch (error) {
        await postings.close();
        throw error;
      }
      this.continueFrom(feed, this.feedOf(merged, feed.baseGeneration!, next));
      for (const part of pair) await part.postings.close();
      parts.splice(0, parts.length, ...merged);
    }
    await this.removeSegments(
      feedId,
      parts.map((part) => part.segment),
    );
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
      // Not written (or not known to be): the next flush writes the whole state instead.
      feed.unjournaled = [...entries, ...feed.unjournaled];
      feed.unjournaledWords += words;
      feed.dirty = true;
      feed.snapshotNeeded = true;
      throw error;
    }
  }
}
