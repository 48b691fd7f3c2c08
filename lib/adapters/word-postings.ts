/**
 * The postings of one descriptor slice of the local visual-word index, in 4 bytes per (image, word).
 *
 * A word's 32 bits are split: the top `ordinalBits` bits pick a bucket, and each entry holds the remaining
 * low bits followed by the image's ordinal (`low · 2^ordinalBits + ordinal`, < 2³²). Entries are sorted,
 * so the postings of a word are a binary search inside its bucket and a contiguous run. The bucket table
 * costs 4 · (2^ordinalBits + 1) bytes, and `ordinalBits` grows with the number of images (every ordinal
 * must fit), so the table holds at most about two offsets per image, against thousands of entries.
 * Sorted `bits · 2²⁰ + ordinal` doubles did the same in 8 bytes; the index is most of a large local
 * catalogue's memory (docs/benchmarks.md "Memory").
 *
 * Changes are merged in linear time: the new entries are radix-sorted (three counting passes) and merged
 * with the kept ones, which are already in order. Sorting the whole slice again with the typed array's
 * own sort, as before, made a search after a 32-image change to a 5,000-image feed take 7.7–7.9 s
 * (140 ms now), growing with the feed (docs/benchmarks.md "Memory").
 */
export interface Postings {
  /** Every ordinal is below 2^ordinalBits; buckets are the words' top `ordinalBits` bits. */
  ordinalBits: number;
  /** Start of each bucket's entries: 2^ordinalBits + 1 offsets, the last one the entry count. */
  buckets: Uint32Array;
  /** Ascending within each bucket: `low bits · 2^ordinalBits + ordinal`. */
  entries: Uint32Array;
}

/**
 * An entry and its bucket are the key `bits · 2^ordinalBits + ordinal` split at bit 32: the key is
 * `bucket · 2³² + entry` (the bucket being the word's top `ordinalBits` bits). Keys are exact in a double,
 * and split with a division and a floor, not `% 2³²`: a double's remainder is a call to fmod, which made
 * most of a large merge's time (docs/benchmarks.md "Words on disk").
 */
const ENTRY_SPAN = 2 ** 32;
const MIN_ORDINAL_BITS = 8;
/** Images per feed: 2^20 (the limit of the earlier layout too). */
export const MAX_ORDINAL_BITS = 20;

/** The ordinal width for `count` images (at least 8 bits, so small feeds keep a 1 KB bucket table). */
export function ordinalBitsFor(count: number): number {
  let bits = MIN_ORDINAL_BITS;
  while (2 ** bits < count) bits += 1;
  if (bits > MAX_ORDINAL_BITS)
    throw new Error(`visual-word index: more than ${2 ** MAX_ORDINAL_BITS} images in a feed`);
  return bits;
}

export function emptyPostings(ordinalBits: number): Postings {
  return { ordinalBits, buckets: new Uint32Array(2 ** ordinalBits + 1), entries: new Uint32Array(0) };
}

/** Every entry as (word bits, ordinal), in order. */
export function forEachEntry(postings: Postings, visit: (bits: number, ordinal: number) => void): void {
  const { buckets, entries } = postings;
  const ordinalSpan = 2 ** postings.ordinalBits;
  for (let bucket = 0; bucket + 1 < buckets.length; bucket += 1) {
    for (let i = buckets[bucket]!; i < buckets[bucket + 1]!; i += 1) {
      const key = bucket * ENTRY_SPAN + entries[i]!;
      const bits = Math.floor(key / ordinalSpan);
      visit(bits, key - bits * ordinalSpan);
    }
  }
}

/**
 * The entries of a word's bits: indices `start` to `end` (exclusive) of `entries`, whose ordinals are
 * `entries[i] − first`.
 */
export function postingsOf(postings: Postings, bits: number): { start: number; end: number; first: number } {
  const { buckets, entries } = postings;
  const { bucket, first } = bucketOf(bits, postings.ordinalBits);
  return runOf(entries, buckets[bucket]!, buckets[bucket + 1]!, first, postings.ordinalBits);
}

/** The bucket of a word's bits at `ordinalBits`, and the entry of its run's ordinal 0 in that bucket. */
export function bucketOf(bits: number, ordinalBits: number): { bucket: number; first: number } {
  const key = bits * 2 ** ordinalBits;
  const bucket = Math.floor(key / ENTRY_SPAN);
  return { bucket, first: key - bucket * ENTRY_SPAN };
}

/**
 * The run of entries from `first` (a word's ordinal 0) inside one bucket's entries `from`…`to` of
 * `entries`: indices `start` to `end` (exclusive), whose ordinals are `entries[i] − first`.
 */
export function runOf(
  entries: Uint32Array,
  from: number,
  to: number,
  first: number,
  ordinalBits: number,
): { start: number; end: number; first: number } {
  let low = from;
  let high = to;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (entries[middle]! < first) low = middle + 1;
    else high = middle;
  }
  // A word's run is short (the images that have it), so its end is found by scanning.
  const limit = first + 2 ** ordinalBits;
  let end = low;
  while (end < to && entries[end]! < limit) end += 1;
  return { start: low, end, first };
}

/** Entries of (word bits, ordinal) pairs in any order, to be merged into postings. */
export interface AddedEntries {
  bits: Uint32Array;
  ordinals: Uint32Array;
}

/**
 * New postings at `ordinalBits`: the entries of `old` whose ordinal `renumbered` maps to a new one (≥ 0;
 * the renumbering must keep the ordinals' order), and the added entries (ordinals already new ones).
 */
export function mergePostings(
  old: Postings,
  renumbered: Int32Array,
  added: AddedEntries,
  ordinalBits: number,
): Postings {
  const kept = keptEntries(old, renumbered, ordinalBits);
  if (kept === old && added.bits.length === 0) return old;
  const fresh = sortedEntries(added, ordinalBits);
  const bucketCount = 2 ** ordinalBits;
  const buckets = new Uint32Array(bucketCount + 1);
  const entries = new Uint32Array(kept.entries.length + fresh.entries.length);
  // Per bucket: where a few new entries go into many kept ones (a small change to a large slice), the kept
  // ones are moved in runs by typed-array copies between the new ones' places; otherwise entry by entry.
  let out = 0;
  for (let bucket = 0; bucket < bucketCount; bucket += 1) {
    buckets[bucket] = out;
    let k = kept.buckets[bucket]!;
    const kEnd = kept.buckets[bucket + 1]!;
    let f = fresh.buckets[bucket]!;
    const fEnd = fresh.buckets[bucket + 1]!;
    if ((fEnd - f) * 8 < kEnd - k) {
      for (; f < fEnd; f += 1) {
        const until = upperBound(kept.entries, fresh.entries[f]!, k, kEnd);
        entries.set(kept.entries.subarray(k, until), out);
        out += until - k;
        k = until;
        entries[out++] = fresh.entries[f]!;
      }
    } else {
      while (k < kEnd && f < fEnd)
        entries[out++] = kept.entries[k]! <= fresh.entries[f]! ? kept.entries[k++]! : fresh.entries[f++]!;
      while (f < fEnd) entries[out++] = fresh.entries[f++]!;
    }
    entries.set(kept.entries.subarray(k, kEnd), out);
    out += kEnd - k;
  }
  buckets[bucketCount] = out;
  return { ordinalBits, buckets, entries };
}

/** First index in `from`…`to` of `sorted` whose value is > `value`. */
function upperBound(sorted: Uint32Array, value: number, from: number, to: number): number {
  let low = from;
  let high = to;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (sorted[middle]! <= value) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** The old entries that stay, renumbered and re-encoded at `ordinalBits` (still in order). */
function keptEntries(old: Postings, renumbered: Int32Array, ordinalBits: number): Postings {
  const identity = old.ordinalBits === ordinalBits && renumbered.every((now, ordinal) => now === ordinal);
  return identity ? old : renumberedEntries(old, renumbered, ordinalBits);
}

/**
 * Postings read from a file of `rows` rows, without the entries whose ordinal is past them (a damaged
 * file's; searches of postings on disk skip them). Left in memory, a merge that renumbers nothing kept
 * them, and an image added later at that ordinal got the damaged entry's word. The same object when
 * every entry is in range (one pass over the entries).
 */
export function withinRows(postings: Postings, rows: number): Postings {
  const ordinalMask = 2 ** postings.ordinalBits - 1;
  const { entries } = postings;
  let inRange = true;
  for (let i = 0; i < entries.length && inRange; i += 1) inRange = (entries[i]! & ordinalMask) < rows;
  if (inRange) return postings;
  const unchanged = Int32Array.from({ length: rows }, (_, ordinal) => ordinal);
  return renumberedEntries(postings, unchanged, postings.ordinalBits);
}

/** `old`'s entries renumbered by `renumbered` (below 0 or past its end: left out) at `ordinalBits`. */
function renumberedEntries(old: Postings, renumbered: Int32Array, ordinalBits: number): Postings {
  const ordinalSpan = 2 ** ordinalBits;
  const buckets = new Uint32Array(2 ** ordinalBits + 1);
  const entries = new Uint32Array(old.entries.length);
  let count = 0;
  forEachEntry(old, (bits, ordinal) => {
    // (An ordinal past the renumbering is a damaged file's entry: left out, as searches leave it out.)
    const now = renumbered[ordinal] ?? -1;
    if (now < 0) return;
    const key = bits * ordinalSpan + now;
    const bucket = Math.floor(key / ENTRY_SPAN);
    entries[count++] = key - bucket * ENTRY_SPAN;
    buckets[bucket + 1]! += 1;
  });
  for (let bucket = 1; bucket < buckets.length; bucket += 1) buckets[bucket]! += buckets[bucket - 1]!;
  return { ordinalBits, buckets, entries: entries.subarray(0, count) };
}

/** The added entries as sorted postings: LSD radix sort, 16 + 16 bits of the entry, then the bucket. */
function sortedEntries(added: AddedEntries, ordinalBits: number): Postings {
  const count = added.bits.length;
  const ordinalSpan = 2 ** ordinalBits;
  let entries = new Uint32Array(count);
  let bucketOf = new Uint32Array(count);
  for (let i = 0; i < count; i += 1) {
    const key = added.bits[i]! * ordinalSpan + added.ordinals[i]!;
    bucketOf[i] = Math.floor(key / ENTRY_SPAN);
    entries[i] = key - bucketOf[i]! * ENTRY_SPAN;
  }
  let nextEntries = new Uint32Array(count);
  let nextBucketOf = new Uint32Array(count);
  const counts = new Uint32Array(65_536 + 1);
  for (const shift of [0, 16]) {
    counts.fill(0);
    for (let i = 0; i < count; i += 1) counts[((entries[i]! >>> shift) & 0xffff) + 1]! += 1;
    for (let digit = 1; digit < counts.length; digit += 1) counts[digit]! += counts[digit - 1]!;
    for (let i = 0; i < count; i += 1) {
      const at = counts[(entries[i]! >>> shift) & 0xffff]!++;
      nextEntries[at] = entries[i]!;
      nextBucketOf[at] = bucketOf[i]!;
    }
    [entries, nextEntries] = [nextEntries, entries];
    [bucketOf, nextBucketOf] = [nextBucketOf, bucketOf];
  }
  // Last, stable pass by bucket: its counts are the bucket table.
  const buckets = new Uint32Array(2 ** ordinalBits + 1);
  for (let i = 0; i < count; i += 1) buckets[bucketOf[i]! + 1]! += 1;
  for (let bucket = 1; bucket < buckets.length; bucket += 1) buckets[bucket]! += buckets[bucket - 1]!;
  const cursor = buckets.slice(0, -1);
  for (let i = 0; i < count; i += 1) nextEntries[cursor[bucketOf[i]!]!++] = entries[i]!;
  return { ordinalBits, buckets, entries: nextEntries };
}

/**
 * Postings of sorted keys `bits · 2^ordinalBits + ordinal` (bits < 2³², ordinal < 2^ordinalBits: exact in
 * a double), as files of the earlier layout hold them.
 */
export function postingsFromKeys(keys: Float64Array, ordinalBits: number): Postings {
  const buckets = new Uint32Array(2 ** ordinalBits + 1);
  const entries = new Uint32Array(keys.length);
  for (let i = 0; i < keys.length; i += 1) {
    const bucket = Math.floor(keys[i]! / ENTRY_SPAN);
    entries[i] = keys[i]! - bucket * ENTRY_SPAN;
    buckets[bucket + 1]! += 1;
  }
  for (let bucket = 1; bucket < buckets.length; bucket += 1) buckets[bucket]! += buckets[bucket - 1]!;
  return { ordinalBits, buckets, entries };
}

/**
 * The next block of a slice's keys in ascending order, `bits · 2^ordinalBits + ordinal` at the output's
 * ordinal width; undefined once every entry was read. A block is valid until the next call.
 */
export type KeyStream = () => Promise<Float64Array | undefined>;

/** Copies entries `from`… of a slice into `target` (the whole of it). */
export type EntryReader = (from: number, target: Uint32Array) => Promise<void> | void;

/**
 * The entries of a slice (its bucket table, entry count and a reader of its entries) as a key stream at
 * `toBits`, ordinals renumbered by `renumbered` (an order-preserving renumbering; entries mapped below 0
 * or past its end left out), read `block` entries at a time: one side of a merge too large to hold in
 * memory.
 */
export function keyStream(
  slice: { buckets: Uint32Array; count: number; ordinalBits: number },
  read: EntryReader,
  renumbered: Int32Array,
  toBits: number,
  block: number,
): KeyStream {
  const { buckets, count } = slice;
  const fromSpan = 2 ** slice.ordinalBits;
  const toSpan = 2 ** toBits;
  const ordinalMask = fromSpan - 1;
  const sameWidth = slice.ordinalBits === toBits;
  const window = new Uint32Array(Math.max(1, Math.min(block, count)));
  const keys = new Float64Array(window.length);
  let index = 0;
  let bucket = 0;
  return async () => {
    while (index < count) {
      const length = Math.min(window.length, count - index);
      const entries = length === window.length ? window : window.subarray(0, length);
      await read(index, entries);
      let out = 0;
      for (let i = 0; i < length; i += 1, index += 1) {
        while (buckets[bucket + 1]! <= index) bucket += 1;
        const entry = entries[i]!;
        // The ordinal is the entry's low bits (the ordinal span divides 2³²).
        const ordinal = entry & ordinalMask;
        // (Past the renumbering, a damaged file's entry: left out, or it would make an invalid key.)
        const now = renumbered[ordinal] ?? -1;
        if (now < 0) continue;
        // At the same width an entry keeps its bucket and word bits: only the ordinal changes.
        if (sameWidth) keys[out++] = bucket * ENTRY_SPAN + (entry - ordinal + now);
        else keys[out++] = Math.floor((bucket * ENTRY_SPAN + entry) / fromSpan) * toSpan + now;
      }
      if (out > 0) return keys.subarray(0, out);
    }
    return undefined;
  };
}

/** In-memory postings as a key stream (see `keyStream`). */
export function postingsStream(
  postings: Postings,
  renumbered: Int32Array,
  toBits: number,
  block: number,
): KeyStream {
  const { buckets, entries, ordinalBits } = postings;
  return keyStream(
    { buckets, count: entries.length, ordinalBits },
    (from, target) => target.set(entries.subarray(from, from + target.length)),
    renumbered,
    toBits,
    block,
  );
}

/**
 * Two key streams (their keys disjoint) as one, in ascending order, `block` keys at a time (the block is
 * valid until the next call, as any key stream's).
 */
export function mergedStream(first: KeyStream, second: KeyStream, block: number): KeyStream {
  const out = new Float64Array(block);
  let started = false;
  let a: Float64Array | undefined;
  let b: Float64Array | undefined;
  let i = 0;
  let j = 0;
  return async () => {
    if (!started) {
      [a, b, started] = [await first(), await second(), true];
    }
    let length = 0;
    while (length < block && (a || b)) {
      if (a && b) {
        while (length < block && i < a.length && j < b.length)
          out[length++] = a[i]! < b[j]! ? a[i++]! : b[j++]!;
      } else {
        // One side is used up: the other's keys are copied a run at a time.
        const rest = (a ?? b)!;
        const at = a ? i : j;
        const n = Math.min(block - length, rest.length - at);
        out.set(rest.subarray(at, at + n), length);
        length += n;
        if (a) i += n;
        else j += n;
      }
      // (A block is read again only once the previous one is used up: it is valid until then.)
      while (a && i === a.length) [a, i] = [await first(), 0];
      while (b && j === b.length) [b, j] = [await second(), 0];
    }
    return length > 0 ? out.subarray(0, length) : undefined;
  };
}

/** Key streams as one, merged pairwise in a balanced tree (each key passes ⌈log₂ n⌉ comparisons). */
function mergedStreams(streams: KeyStream[], block: number): KeyStream | undefined {
  if (streams.length <= 1) return streams[0];
  const half = streams.length >> 1;
  return mergedStream(
    mergedStreams(streams.slice(0, half), block)!,
    mergedStreams(streams.slice(half), block)!,
    block,
  );
}

/**
 * Merges key streams (their keys disjoint) into postings at `ordinalBits` without holding them: the
 * entries are handed to `write` in order, `block` at a time (the block is reused once `write` has
 * settled). Answers the bucket table and the entry count. The first stream is merged last, in the loop
 * below, and the others together before it: a feed's base file, the largest, passes one comparison per
 * key and no copy however many segments join it (local-visual-word-index.ts).
 */
export async function mergeKeyStreams(
  streams: KeyStream[],
  ordinalBits: number,
  write: (entries: Uint32Array) => Promise<void>,
  block: number,
): Promise<{ buckets: Uint32Array; count: number }> {
  const first = streams[0];
  const second = mergedStreams(streams.slice(1), block);
  const buckets = new Uint32Array(2 ** ordinalBits + 1);
  const out = new Uint32Array(block);
  let length = 0;
  let count = 0;
  let a = first ? await first() : undefined;
  let b = second ? await second() : undefined;
  let i = 0;
  let j = 0;
  while (a || b) {
    // Synchronously, until the output block is full or an input block is used up (no await per key).
    while (length < block) {
      let key: number;
      if (a && (!b || a[i]! < b[j]!)) key = a[i++]!;
      else if (b) key = b[j++]!;
      else break;
      const bucket = Math.floor(key / ENTRY_SPAN);
      buckets[bucket + 1]! += 1;
      out[length++] = key - bucket * ENTRY_SPAN;
      if ((a && i === a.length) || (b && j === b.length)) break;
    }
    if (length === block) {
      await write(out);
      count += length;
      length = 0;
    }
    if (a && i === a.length) [a, i] = [await first!(), 0];
    if (b && j === b.length) [b, j] = [await second!(), 0];
  }
  if (length > 0) await write(out.subarray(0, length));
  count += length;
  for (let bucket = 1; bucket < buckets.length; bucket += 1) buckets[bucket]! += buckets[bucket - 1]!;
  // A key outside the bucket table (NaN from a damaged entry, or too large for the width) was written but
  // counted in no bucket: a file that would not read back. Refused here, before the file replaces the one
  // it was written from (the old one and its journal stay, the state is still in memory).
  if (buckets[buckets.length - 1] !== count)
    throw new Error(
      `visual-word index: ${count - buckets[buckets.length - 1]!} keys fall outside the bucket table`,
    );
  return { buckets, count };
}
