import { close, fstat, open as openFd, read, readSync } from 'node:fs';
import { open, rename, type FileHandle } from 'node:fs/promises';
import { promisify } from 'node:util';
import { dirname } from 'node:path';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';
import {
  bucketOf,
  type KeyStream,
  keyStream,
  MAX_ORDINAL_BITS,
  mergeKeyStreams,
  ordinalBitsFor,
  type Postings,
  postingsFromKeys,
  runOf,
  withinRows,
} from '#lib/adapters/word-postings.ts';

/**
 * The file of one feed of the local visual-word index (local-visual-word-index.ts), and lookups into it
 * without loading it.
 *
 * Format 4 (written): 8 bytes (a zero uint32, then `VPW4`); per descriptor slice its bucket table
 * (2^ordinalBits + 1 uint32) and its entries (uint32, word-postings.ts); the JSON metadata (rows, ordinal
 * width, entries per slice, the last journaled change included, a base file's generation); last, the
 * metadata's byte length (uint32) and `VPW4`. The metadata comes last so that a merge can stream the
 * entries out before it knows how many there are. Read too: format 3 (the same with the metadata first,
 * after its uint32 length) and format 2 (the metadata first, then per slice sorted float64
 * `bits · 2²⁰ + ordinal`, converted as read).
 *
 * A feed whose entries fit `memoryBytes` is read into memory; a larger one stays on disk: only its bucket
 * tables are read (4 · 2^ordinalBits bytes per slice, ~4 MB at 100k images against 4.5 GB of entries),
 * and each word's bucket is read from the file when searched (page cache; a few µs per word).
 *
 * A feed on disk is its base file and the segments written since (`<feed>.words.<n>`, the same format, with
 * their own rows and ordinals), which its manifest (`<feed>.manifest`, JSON) lists with the rows of each
 * file that are dead since; see local-visual-word-index.ts. A segment may have a wider ordinal than its
 * rows need: that makes its buckets as small as a large file's (more buckets, fewer entries each).
 */
export const SLICES = 8;
const MAGIC = 'VPW4';
const HEADER_BYTES = 8;
const TRAILER_BYTES = 8;
/** Ordinal span of format 2 files. */
const FORMAT_2_ORDINAL_SPAN = 2 ** 20;
/** Entries per block of a streamed merge (4 MB). */
const MERGE_BLOCK = 2 ** 20;

export type FileRow = [id: string, productId: string, itemGroupId: string];

export interface FeedFileMeta {
  /** The last journaled change this file includes (0 for files written before the journal). */
  journalSeq: number;
  rows: FileRow[];
  ordinalBits: number;
  /**
   * A base file's generation (≥ 1), which the manifest names: above the one before it and the one any
   * manifest on disk names, so a manifest naming another is older than the file (a crash came between the
   * file's rename and the manifest's removal). Undefined for files written before segments, and segments.
   */
  generation?: number;
}

interface PersistedMeta extends Partial<FeedFileMeta> {
  format: 2 | 3 | 4;
  rows: FileRow[];
  /** Entries per slice. */
  slices: number[];
}

/** A slice whose entries stay in the file: its bucket table in memory, where its entries start. */
interface DiskSlice {
  buckets: Uint32Array;
  entriesAt: number;
  count: number;
}

// A file whose postings stay on disk is held open by a plain descriptor: a FileHandle left to the garbage
// collector (an index nobody closes, as in tests) is closed with a deprecation warning.
const openFile = promisify(openFd);
const closeFile = promisify(close);
const statFile = promisify(fstat);
const readAt = promisify(read);

/** Reads exactly `target.byteLength` bytes at `position`, in pieces of at most `chunk` bytes. */
async function readFully(fd: number, target: Uint8Array, position: number, chunk: number): Promise<boolean> {
  for (let offset = 0; offset < target.byteLength;) {
    const length = Math.min(chunk, target.byteLength - offset);
    const { bytesRead } = await readAt(fd, target, offset, length, position + offset);
    if (bytesRead === 0) return false;
    offset += bytesRead;
  }
  return true;
}

/** Writes all of `source` at `position` (or at the file's current end with `null`), in pieces. */
export async function writeFully(
  handle: FileHandle,
  source: Uint8Array,
  chunk: number,
  position: number | null = null,
): Promise<void> {
  for (let offset = 0; offset < source.byteLength;) {
    const length = Math.min(chunk, source.byteLength - offset);
    const { bytesWritten } = await handle.write(
      source,
      offset,
      length,
      position === null ? null : position + offset,
    );
    offset += bytesWritten;
  }
}

const bytesOf = (array: ArrayBufferView) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);

/**
 * The postings of a feed file that stay on disk. Lookups read synchronously (a search's lookups are a
 * tight loop over thousands of words; a promise per word would cost more than the read), so the JS thread
 * waits on the page cache, as it waits on memory for a feed held in memory.
 */
export class DiskPostings {
  private scratch = new Uint32Array(1024);
  private closed = false;
  /** Entries of every slice. */
  readonly entries: number;

  constructor(
    private readonly fd: number,
    readonly ordinalBits: number,
    private readonly slices: DiskSlice[],
    private readonly chunk: number,
  ) {
    this.entries = slices.reduce((sum, slice) => sum + slice.count, 0);
  }

  /**
   * The run of a word's bits in a slice: `entries[start…end)`, whose ordinals are `entries[i] − first`.
   * `entries` is a buffer the next lookup reuses.
   */
  run(slice: number, bits: number): { entries: Uint32Array; start: number; end: number; first: number } {
    if (this.closed) throw new Error('visual-word index: a feed file read after it was closed');
    const { buckets, entriesAt } = this.slices[slice]!;
    const { bucket, first } = bucketOf(bits, this.ordinalBits);
    const from = buckets[bucket]!;
    const length = buckets[bucket + 1]! - from;
    if (length === 0) return { entries: this.scratch, start: 0, end: 0, first };
    if (this.scratch.length < length) this.scratch = new Uint32Array(2 ** Math.ceil(Math.log2(length)));
    const target = new Uint8Array(this.scratch.buffer, 0, length * 4);
    for (let offset = 0; offset < target.length;) {
      const read = readSync(this.fd, target, offset, target.length - offset, entriesAt + from * 4 + offset);
      if (read === 0) throw new Error('visual-word index: feed file shorter than its bucket table says');
      offset += read;
    }
    return { entries: this.scratch, ...runOf(this.scratch, 0, length, first, this.ordinalBits) };
  }

  /** A slice's entries as a key stream (word-postings.ts `keyStream`), read from the file block by block. */
  stream(slice: number, renumbered: Int32Array, toBits: number): KeyStream {
    const { buckets, entriesAt, count } = this.slices[slice]!;
    return keyStream(
      { buckets, count, ordinalBits: this.ordinalBits },
      async (from, target) => {
        if (!(await readFully(this.fd, bytesOf(target), entriesAt + from * 4, this.chunk)))
          throw new Error('visual-word index: feed file shorter than its bucket table says');
      },
      renumbered,
      toBits,
      MERGE_BLOCK,
    );
  }

  /** Closes the file once (a descriptor number closed twice could be another file's by then). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await closeFile(this.fd);
  }
}

export interface LoadedFeedFile extends FeedFileMeta {
  /** The postings in memory, or on disk (a feed over the memory budget). */
  postings: Postings[] | DiskPostings;
  fileBytes: number;
  /** Read from an earlier layout: the file is rewritten at the next flush. */
  converted: boolean;
}

/**
 * A feed file's rows and postings; undefined when there is no file, 'unreadable' when it is not a
 * complete, consistent file of a known format. Only I/O errors are thrown. Entries of more than
 * `memoryBytes` stay on disk (the answer then holds the file open until its `close`).
 */
export async function readFeedFile(
  path: string,
  chunk: number,
  memoryBytes: number,
): Promise<LoadedFeedFile | 'unreadable' | undefined> {
  const fd = await openFile(path, 'r').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (fd === undefined) return undefined;
  let kept = false;
  try {
    const loaded = await parseFeedFile(fd, chunk, memoryBytes);
    kept = loaded?.postings instanceof DiskPostings;
    return loaded ?? 'unreadable';
  } catch (error) {
    // A failed system call (EIO, EMFILE…) may pass: the next load tries again. Anything else means the
    // content is not what it claims (a length no array can have, a feed over 2²⁰ images…).
    if (error instanceof Error && 'syscall' in error) throw error;
    return 'unreadable';
  } finally {
    if (!kept) await closeFile(fd);
  }
}

export const isCount = (value: unknown): value is number =>
  Number.isSafeInteger(value) && (value as number) >= 0;

/** The metadata of a file of any known format, and where its slices start. */
async function readMeta(
  fd: number,
  size: number,
  chunk: number,
): Promise<{ meta: PersistedMeta; slicesAt: number; slicesEnd: number } | undefined> {
  const head = Buffer.alloc(HEADER_BYTES);
  if (size < HEADER_BYTES || !(await readFully(fd, head, 0, chunk))) return undefined;
  let metaAt: number;
  let metaLength: number;
  let slicesAt: number;
  let slicesEnd: number;
  const trailed = head.readUInt32LE(0) === 0 && head.toString('latin1', 4, 8) === MAGIC;
  if (trailed) {
    const trailer = Buffer.alloc(TRAILER_BYTES);
    if (size < HEADER_BYTES + TRAILER_BYTES || !(await readFully(fd, trailer, size - TRAILER_BYTES, chunk)))
      return undefined;
    if (trailer.toString('latin1', 4, 8) !== MAGIC) return undefined;
    metaLength = trailer.readUInt32LE(0);
    metaAt = size - TRAILER_BYTES - metaLength;
    if (metaAt < HEADER_BYTES) return undefined;
    slicesAt = HEADER_BYTES;
    slicesEnd = metaAt;
  } else {
    metaLength = head.readUInt32LE(0);
    metaAt = 4;
    if (4 + metaLength > size) return undefined;
    slicesAt = 4 + metaLength;
    slicesEnd = size;
  }
  const metaBytes = Buffer.alloc(metaLength);
  if (!(await readFully(fd, metaBytes, metaAt, chunk))) return undefined;
  const meta = JSON.parse(metaBytes.toString('utf8')) as Partial<PersistedMeta> | null;
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
  const format = meta.format;
  if ((format === 4) !== trailed) return undefined;
  if (format === 2) slicesAt = Math.ceil(slicesAt / 8) * 8;
  else if (format === 3) slicesAt = Math.ceil(slicesAt / 4) * 4;
  else if (format !== 4) return undefined;
  return { meta: meta as PersistedMeta, slicesAt, slicesEnd };
}

async function parseFeedFile(
  fd: number,
  chunk: number,
  memoryBytes: number,
): Promise<LoadedFeedFile | undefined> {
  const { size } = await statFile(fd);
  const found = await readMeta(fd, size, chunk);
  if (!found) return undefined;
  const { meta, slicesEnd } = found;
  const { rows, slices: lengths } = meta;
  const total = lengths.reduce((sum, count) => sum + count, 0);
  const read = (target: ArrayBufferView, position: number) => readFully(fd, bytesOf(target), position, chunk);
  let position = found.slicesAt;
  const journalSeq = isCount(meta.journalSeq) ? meta.journalSeq : 0;
  if (meta.format === 2) {
    if (slicesEnd !== position + total * 8) return undefined;
    const ordinalBits = ordinalBitsFor(rows.length);
    const slices: Postings[] = [];
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
    return { rows, ordinalBits, journalSeq: 0, postings: slices, converted: true, fileBytes: size };
  }
  const { ordinalBits } = meta;
  // (At least the width its rows need; a segment's may be wider, see the file comment.)
  if (!isCount(ordinalBits) || ordinalBits < ordinalBitsFor(rows.length) || ordinalBits > MAX_ORDINAL_BITS)
    return undefined;
  const bucketBytes = 4 * (2 ** ordinalBits + 1);
  if (slicesEnd !== position + SLICES * bucketBytes + total * 4) return undefined;
  const inMemory = total * 4 <= memoryBytes;
  const slices: Postings[] = [];
  const onDisk: DiskSlice[] = [];
  for (const count of lengths) {
    const buckets = new Uint32Array(2 ** ordinalBits + 1);
    if (!(await read(buckets, position))) return undefined;
    position += bucketBytes;
    // A bucket table that starts at 0, never falls and ends at the entry count (a damaged one would send
    // lookups and merges outside the entries).
    if (buckets[0] !== 0 || buckets[buckets.length - 1] !== count) return undefined;
    for (let bucket = 1; bucket < buckets.length; bucket += 1)
      if (buckets[bucket]! < buckets[bucket - 1]!) return undefined;
    if (inMemory) {
      const entries = new Uint32Array(count);
      if (!(await read(entries, position))) return undefined;
      slices.push(withinRows({ ordinalBits, buckets, entries }, rows.length));
    } else onDisk.push({ buckets, entriesAt: position, count });
    position += count * 4;
  }
  return {
    rows,
    ordinalBits,
    journalSeq,
    ...(isCount(meta.generation) && meta.generation > 0 ? { generation: meta.generation } : {}),
    postings: inMemory ? slices : new DiskPostings(fd, ordinalBits, onDisk, chunk),
    converted: false,
    fileBytes: size,
  };
}

/**
 * Writes a feed file (format 4) to a temporary name and renames it once complete and on disk: per slice,
 * the merge of its key streams (at `meta.ordinalBits`), streamed to the file. Answers the file's size.
 */
export async function writeFeedFile(
  file: string,
  meta: FeedFileMeta,
  slices: KeyStream[][],
  chunk: number,
): Promise<number> {
  const bucketBytes = 4 * (2 ** meta.ordinalBits + 1);
  const handle = await open(`${file}.tmp`, 'w');
  let position = HEADER_BYTES;
  const counts: number[] = [];
  try {
    const head = Buffer.alloc(HEADER_BYTES);
    head.write(MAGIC, 4, 'latin1');
    await writeFully(handle, head, chunk, 0);
    for (const streams of slices) {
      const bucketsAt = position;
      let at = position + bucketBytes;
      const { buckets, count } = await mergeKeyStreams(
        streams,
        meta.ordinalBits,
        async (entries) => {
          await writeFully(handle, bytesOf(entries), chunk, at);
          at += entries.byteLength;
        },
        MERGE_BLOCK,
      );
      await writeFully(handle, bytesOf(buckets), chunk, bucketsAt);
      counts.push(count);
      position = at;
    }
    const json = Buffer.from(JSON.stringify({ format: 4, ...meta, slices: counts } satisfies PersistedMeta));
    const trailer = Buffer.alloc(TRAILER_BYTES);
    trailer.writeUInt32LE(json.length, 0);
    trailer.write(MAGIC, 4, 'latin1');
    await writeFully(handle, Buffer.concat([json, trailer]), chunk, position);
    position += json.length + TRAILER_BYTES;
    // On disk before it replaces the old file, and the rename before the journal is removed (a power
    // loss must not leave a renamed but empty file and no journal).
    await handle.sync();
  } finally {
    await handle.close();
  }
  await commit(file);
  return position;
}

/** Renames `<file>.tmp` (complete and synced) to `file`, and makes the rename durable. */
async function commit(file: string): Promise<void> {
  await rename(`${file}.tmp`, file);
  const folder = await open(dirname(file), 'r');
  try {
    await folder.sync();
  } finally {
    await folder.close();
  }
}

/** One file of a feed on disk, as its manifest lists it. */
export interface ManifestPart {
  /** 0 for the base file (`<feed>.words`), n for the segment `<feed>.words.<n>`. */
  segment: number;
  /** The file's rows (checked against the file's own). */
  rows: number;
  /** The file's rows deleted or replaced since it was written (its ordinals, ascending). */
  dead: number[];
}

/** A feed's manifest: its files on disk, in the order of their rows, the base file first. */
export interface FeedManifest {
  /** The base file's generation (`FeedFileMeta.generation`). */
  base: number;
  /** The last journaled change the files and these dead rows include. */
  journalSeq: number;
  /** The next segment's number (above every segment listed). */
  next: number;
  parts: ManifestPart[];
}

function isManifest(value: unknown): value is FeedManifest {
  if (typeof value !== 'object' || value === null) return false;
  const { base, journalSeq, next, parts } = value as Partial<FeedManifest>;
  if (!isCount(base) || !isCount(journalSeq) || !isCount(next) || !Array.isArray(parts)) return false;
  const numbers = new Set(parts.map((part: Partial<ManifestPart> | null) => part?.segment));
  return (
    numbers.size === parts.length &&
    parts.every(
      (part: Partial<ManifestPart>, index) =>
        typeof part === 'object' &&
        part !== null &&
        isCount(part.segment) &&
        // The base first, then segments of distinct numbers below `next` (in the order of their rows, not of
        // their numbers: a merged segment takes the place of the two it replaces).
        (index === 0 ? part.segment === 0 : part.segment > 0 && part.segment < next) &&
        isCount(part.rows) &&
        Array.isArray(part.dead) &&
        part.dead.every(
          (ordinal, i) =>
            isCount(ordinal) && ordinal < part.rows! && (i === 0 || ordinal > part.dead![i - 1]!),
        ),
    )
  );
}

/** A feed's manifest; undefined when there is none, 'unreadable' when it is not one. */
export async function readManifest(path: string): Promise<FeedManifest | 'unreadable' | undefined> {
  let text: string;
  try {
    const handle = await open(path, 'r');
    try {
      text = await handle.readFile('utf8');
    } finally {
      await handle.close();
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  try {
    const manifest: unknown = JSON.parse(text);
    return isManifest(manifest) ? manifest : 'unreadable';
  } catch {
    return 'unreadable';
  }
}

/** Writes a feed's manifest as a feed file is written: to a temporary name, synced, renamed. */
export async function writeManifest(path: string, manifest: FeedManifest, chunk: number): Promise<void> {
  const handle = await open(`${path}.tmp`, 'w');
  try {
    await writeFully(handle, Buffer.from(JSON.stringify(manifest)), chunk, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await commit(path);
}
