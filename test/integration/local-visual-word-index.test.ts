import { mkdir, mkdtemp, readdir, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';
import { ordinalBitsFor, postingsFromKeys } from '#lib/adapters/word-postings.ts';
import { describeVisualWordIndexContract } from './visual-word-index.contract.ts';

/** An image document of feed f. */
const doc = (id: string, words: number[], group = id) => ({
  id: `f/${id}/0`,
  feedId: 'f',
  productId: id,
  itemGroupId: group,
  words: Float64Array.from(words),
});

/** A feed file as the previous version wrote it (format 2): per slice, sorted `bits · 2²⁰ + ordinal`. */
async function writeFormat2(file: string, rows: string[][], slices: number[][]): Promise<void> {
  const json = Buffer.from(JSON.stringify({ format: 2, rows, slices: slices.map((slice) => slice.length) }));
  const header = Buffer.alloc(Math.ceil((4 + json.length) / 8) * 8);
  header.writeUInt32LE(json.length, 0);
  json.copy(header, 4);
  const data = Float64Array.from(slices.flat());
  await writeFile(file, Buffer.concat([header, Buffer.from(data.buffer)]));
}

/**
 * A feed file as the version before format 4 wrote it (format 3): the JSON first, then per slice its bucket
 * table and uint32 entries; `slices` as for `writeFormat2` (`bits · 2²⁰ + ordinal`).
 */
async function writeFormat3(file: string, rows: string[][], slices: number[][]): Promise<void> {
  const ordinalBits = ordinalBitsFor(rows.length);
  const postings = slices.map((keys) =>
    postingsFromKeys(
      Float64Array.from(keys, (key) => Math.floor(key / 2 ** 20) * 2 ** ordinalBits + (key % 2 ** 20)),
      ordinalBits,
    ),
  );
  const meta = { format: 3, journalSeq: 0, rows, ordinalBits, slices: postings.map((p) => p.entries.length) };
  const json = Buffer.from(JSON.stringify(meta));
  const header = Buffer.alloc(Math.ceil((4 + json.length) / 4) * 4);
  header.writeUInt32LE(json.length, 0);
  json.copy(header, 4);
  const bytes = (array: Uint32Array) => Buffer.from(array.buffer, array.byteOffset, array.byteLength);
  await writeFile(
    file,
    Buffer.concat([header, ...postings.flatMap((p) => [bytes(p.buckets), bytes(p.entries)])]),
  );
}

/** The JSON metadata of a feed file (format 4: at the end, before its length and `VPW4`). */
async function headerOf(file: string): Promise<Record<string, unknown>> {
  const bytes = await readFile(file);
  expect(bytes.toString('latin1', bytes.length - 4)).toBe('VPW4');
  const length = bytes.readUInt32LE(bytes.length - 8);
  return JSON.parse(bytes.subarray(bytes.length - 8 - length, bytes.length - 8).toString('utf8')) as Record<
    string,
    unknown
  >;
}

/** Tests of the feed file itself: every flush writes it (no journal). */
const FILE_EVERY_FLUSH = { journal: false };

async function withTempDir(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
  try {
    await test(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Every test runs twice: with the default memory budget (these feeds are held in memory) and with none
 * (every feed with a file searches its postings in the file, and continues from it after each rewrite).
 */
describe.each([
  { where: 'in memory', memoryBytes: undefined },
  { where: 'on disk', memoryBytes: 0 },
])('postings $where', ({ memoryBytes }) => {
  const wordIndex = (dir: string, options: ConstructorParameters<typeof LocalVisualWordIndex>[1] = {}) =>
    new LocalVisualWordIndex(dir, { memoryBytes, ...options });

  describeVisualWordIndexContract(
    'local files',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
      return {
        index: wordIndex(dir),
        reopen: async () => wordIndex(dir),
        close: () => rm(dir, { recursive: true, force: true }),
      };
    },
    { persistent: true },
  );

  describe('local visual-word index: writes after a search, and what a reopen sees', () => {
    const ids = (hits: { productId: string }[]) => hits.map((hit) => hit.productId);

    it('merges replacements and deletions into the searched structure and persists the merged state', async () => {
      // Prepare: three images, searched once (so they are merged into the sorted slices)
      await withTempDir(async (dir) => {
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1, 2, 3]), doc('b', [2, 3, 4]), doc('c', [5, 6, 7 * 2 ** 32 + 9])]);
        expect(ids(await index.search({ feedId: 'f', words: Float64Array.from([2, 3]), k: 10 }))).toEqual([
          'a',
          'b',
        ]);
        // Act: b gets other words, a goes, d arrives; then flush and reopen
        await index.upsert([doc('b', [5, 6], 'g'), doc('d', [7 * 2 ** 32 + 9])]);
        await index.deleteProducts('f', ['a']);
        const before = await index.search({ feedId: 'f', words: Float64Array.from([2, 3, 5, 6]), k: 10 });
        await index.flush();
        const reopened = wordIndex(dir);
        const after = await reopened.search({ feedId: 'f', words: Float64Array.from([2, 3, 5, 6]), k: 10 });
        const slice7 = await reopened.search({
          feedId: 'f',
          words: Float64Array.from([7 * 2 ** 32 + 9]),
          k: 10,
        });
        // Assess
        expect(ids(before)).toEqual(['b', 'c']);
        expect(before.find((hit) => hit.productId === 'b')?.itemGroupId).toBe('g');
        expect(after).toEqual(before);
        expect(ids(slice7)).toEqual(['c', 'd']);
      });
    });

    it('writes its changes at close, and loads the feed again when used after it', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a written feed (on disk, held open), then a change not yet written
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        await index.upsert([doc('a', [1, 2])]);
        await index.flush();
        await index.upsert([doc('b', [2])]);
        // Act
        await index.close();
        const reopened = await wordIndex(dir).search({ feedId: 'f', words: Float64Array.from([2]), k: 10 });
        const again = await index.search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 10 });
        // Assess
        expect(ids(reopened)).toEqual(['a', 'b']);
        expect(ids(again)).toEqual(['a', 'b']);
      });
    });

    it('keeps a change made to a written feed while close is still writing another one', async () => {
      await withTempDir(async (dir) => {
        // Prepare: feed a (one image) and feed b (50 images, written in thousands of 16-byte pieces)
        const index = wordIndex(dir, { journal: false, ioChunkBytes: 16 });
        const docOf = (feedId: string, id: string, words: number[]) => ({
          ...doc(id, words),
          id: `${feedId}/${id}/0`,
          feedId,
        });
        await index.upsert([docOf('a', 'one', [1])]);
        await index.upsert(Array.from({ length: 50 }, (_, i) => docOf('b', `p${i}`, [i])));
        // Act: a second image of a while close writes b
        const closing = index.close();
        for (let i = 0; i < 20; i += 1) await new Promise((resolve) => setImmediate(resolve));
        await index.upsert([docOf('a', 'two', [1])]);
        await closing;
        await index.flush();
        const hits = await wordIndex(dir).search({ feedId: 'a', words: Float64Array.from([1]), k: 5 });
        // Assess
        expect(hits.map((hit) => hit.id)).toEqual(['a/one/0', 'a/two/0']);
      });
    });

    it('weighs words by the live images only, after deletions and replacements of written images', async () => {
      // Prepare: a, b and c share word 1, a and b word 2; written (on disk, the feed continues from its file)
      await withTempDir(async (dir) => {
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        await index.upsert([doc('a', [1, 2]), doc('b', [1, 2]), doc('c', [1, 3])]);
        await index.flush();
        // Act: b goes, c now has word 2 instead of 1
        await index.deleteProducts('f', ['b']);
        await index.upsert([doc('c', [2, 3])]);
        const hits = await index.search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 10 });
        // Assess: two live images; word 1 is a's alone (idf ln 3), word 2 a's and c's (ln 2)
        expect(hits.map(({ productId, score }) => [productId, score])).toEqual([
          ['a', Math.log(3) + Math.log(2)],
          ['c', Math.log(2)],
        ]);
        await index.flush();
        expect(await wordIndex(dir).search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 10 })).toEqual(
          hits,
        );
      });
    });
  });

  describe('local visual-word index: preload', () => {
    it('reads a feed from disk at preload, so its first search needs the files no more', async () => {
      await withTempDir(async (dir) => {
        const written = wordIndex(dir);
        await written.upsert([doc('a', [1, 2, 3]), doc('b', [2, 3, 4])]);
        await written.flush();
        // Act: a restarted index preloads the feed, then its files go away
        const restarted = wordIndex(dir);
        await restarted.preload('f');
        await restarted.preload('no-such-feed');
        await rm(dir, { recursive: true, force: true });
        await mkdir(dir);
        // Assess: the words were in memory already
        const hits = await restarted.search({ feedId: 'f', words: Float64Array.from([2, 3]), k: 10 });
        expect(hits.map((hit) => hit.productId)).toEqual(['a', 'b']);
        expect(
          await restarted.search({ feedId: 'no-such-feed', words: Float64Array.from([2]), k: 10 }),
        ).toEqual([]);
      });
    });
  });

  describe('local visual-word index: damaged files and failed writes', () => {
    /** Writes feed f's file of `docs`, then damages its first entry (first doc, first word): ordinal 128. */
    async function writeWithEntryPastRows(dir: string, docs: ReturnType<typeof doc>[]): Promise<void> {
      const written = wordIndex(dir, FILE_EVERY_FLUSH);
      await written.upsert(docs);
      await written.close();
      const bytes = await readFile(join(dir, 'f.words'));
      // (format 4: 8 header bytes, then slice 0's 257 bucket offsets; an entry's low byte is its ordinal)
      bytes[8 + 4 * 257] = bytes[8 + 4 * 257]! | 0x80;
      await writeFile(join(dir, 'f.words'), bytes);
    }

    it('leaves out an entry whose ordinal is past the rows, as it reads in memory', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a written feed, a and b, whose first entry (word 1 of a) gets ordinal 128 of 2 rows
        await writeWithEntryPastRows(dir, [doc('a', [1, 2]), doc('b', [2, 3])]);
        // Act
        const hits = await wordIndex(dir).search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 5 });
        // Assess: word 2 only (a's word 1 is the damaged entry), a and b tied
        expect(hits.map(({ productId, score }) => [productId, score])).toEqual([
          ['a', Math.log(2)],
          ['b', Math.log(2)],
        ]);
      });
    });

    it('leaves an entry whose ordinal is past the rows out of the file written after it', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a, b and c written, a's word 1 damaged to ordinal 128 of 3 rows
        await writeWithEntryPastRows(dir, [doc('a', [1, 2]), doc('b', [2, 3]), doc('c', [2, 4])]);
        // Act: b goes (its row renumbered away), d arrives, and the whole file is written again (a share of
        // 0: on disk too, a rewrite rather than a segment)
        const index = wordIndex(dir, { ...FILE_EVERY_FLUSH, rewriteShare: 0 });
        await index.deleteProducts('f', ['b']);
        await index.upsert([doc('d', [1, 2])]);
        const before = await index.search({ feedId: 'f', words: Float64Array.from([1, 2, 4]), k: 5 });
        await index.flush();
        const reopened = await wordIndex(dir).search({
          feedId: 'f',
          words: Float64Array.from([1, 2, 4]),
          k: 5,
        });
        // Assess: the damaged entry is gone, and the rest of the feed read back as it was searched
        expect(before.map((hit) => hit.productId)).toEqual(['c', 'd', 'a']);
        expect(reopened).toEqual(before);
      });
    });

    it('credits an entry whose ordinal is past the rows to no image added later at that ordinal', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a and b written, a's word 1 damaged to ordinal 128 of 2 rows
        await writeWithEntryPastRows(dir, [doc('a', [1, 2]), doc('b', [2, 3])]);
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        const wordOne = { feedId: 'f', words: Float64Array.from([1]), k: 5 };
        // Act: 127 images without word 1 and no deletion (a merge that renumbers nothing), the 127th at
        // row 128
        await index.upsert(Array.from({ length: 127 }, (_, i) => doc(`c${i}`, [1000 + i])));
        const after = await index.search(wordOne);
        await index.flush();
        const reopened = await wordIndex(dir).search(wordOne);
        // Assess: nobody has word 1 (a's was the damaged entry), c126 neither
        expect(after).toEqual([]);
        expect(reopened).toEqual([]);
      });
    });

    it('starts a feed with an unreadable file empty, keeps accepting writes and rewrites the file', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a truncated file, as a crash could leave
        await writeFile(join(dir, 'f.words'), Buffer.from([7, 0, 0, 0, 123]));
        const index = wordIndex(dir);
        // Act
        const before = await index.search({ feedId: 'f', words: Float64Array.from([1]), k: 5 });
        await index.upsert([doc('a', [1, 2])]);
        await index.flush();
        const reopened = await wordIndex(dir).search({
          feedId: 'f',
          words: Float64Array.from([1]),
          k: 5,
        });
        // Assess
        expect(before).toEqual([]);
        expect(reopened.map((hit) => hit.productId)).toEqual(['a']);
      });
    });

    it('keeps unwritten changes after a failed flush and writes them at the next one', async () => {
      await withTempDir(async (dir) => {
        // Prepare: the temporary file's name is taken by a folder, so the write fails
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        await index.upsert([doc('a', [1, 2])]);
        await mkdir(join(dir, 'f.words.tmp'));
        // Act
        await expect(index.flush()).rejects.toThrow();
        await rm(join(dir, 'f.words.tmp'), { recursive: true });
        await index.flush();
        const reopened = await wordIndex(dir).search({
          feedId: 'f',
          words: Float64Array.from([2]),
          k: 5,
        });
        // Assess
        expect(reopened.map((hit) => hit.productId)).toEqual(['a']);
      });
    });
  });

  describe('local visual-word index: top k among many scored images', () => {
    it('returns the k best of hundreds of matches, ties at the k-th place by id', async () => {
      await withTempDir(async (dir) => {
        // Prepare: 300 images share word 1; i7 and i150 also share the rarer word 2
        const index = wordIndex(dir);
        await index.upsert(
          Array.from({ length: 300 }, (_, i) => ({
            id: `f/i${String(i).padStart(3, '0')}/0`,
            feedId: 'f',
            productId: `i${i}`,
            itemGroupId: `i${i}`,
            words: Float64Array.from(i === 7 || i === 150 ? [1, 2] : [1, 3 + i]),
          })),
        );
        // Act
        const hits = await index.search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 5 });
        // Assess: the two with the rare word, then the smallest ids among the 298 equal ones
        expect(hits.map((hit) => hit.productId)).toEqual(['i7', 'i150', 'i0', 'i1', 'i2']);
      });
    });
  });

  describe('local visual-word index: files read and written in pieces', () => {
    // Words in every slice (slice = ⌊word / 2³²⌋), several per image, so each slice spans several pieces.
    const wordsOf = (i: number) => Array.from({ length: 24 }, (_, j) => (j % 8) * 2 ** 32 + i * 31 + j);

    it('gives the same file and the same answers whatever the largest single read or write', async () => {
      await withTempDir(async (dir) => {
        // Prepare: the same 50 images flushed by an index writing whole slices and by one writing 24-byte pieces
        const documents = Array.from({ length: 50 }, (_, i) => doc(`i${i}`, wordsOf(i)));
        await mkdir(join(dir, 'whole'));
        await mkdir(join(dir, 'pieces'));
        const whole = wordIndex(join(dir, 'whole'), FILE_EVERY_FLUSH);
        const pieces = wordIndex(join(dir, 'pieces'), { ioChunkBytes: 24, ...FILE_EVERY_FLUSH });
        await whole.upsert(documents);
        await pieces.upsert(documents);
        // Act
        await whole.flush();
        await pieces.flush();
        const reread = wordIndex(join(dir, 'whole'), { ioChunkBytes: 40 });
        const query = {
          feedId: 'f',
          words: Float64Array.from([...wordsOf(7), ...wordsOf(30).slice(0, 5)]),
          k: 3,
        };
        // Assess: byte-identical files (over 50 × 24 entries of 4 bytes), read back in 40-byte pieces
        const [wholeBytes, pieceBytes] = await Promise.all([
          readFile(join(dir, 'whole', 'f.words')),
          readFile(join(dir, 'pieces', 'f.words')),
        ]);
        expect(wholeBytes.length).toBeGreaterThan(50 * 24 * 4);
        expect(pieceBytes.equals(wholeBytes)).toBe(true);
        expect((await reread.search(query)).map((hit) => hit.productId)).toEqual(['i7', 'i30']);
        expect(await reread.search(query)).toEqual(await whole.search(query));
      });
    });

    it('treats a file shorter than its header says as unreadable', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a complete file, then cut inside its slices
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        await index.upsert([doc('a', wordsOf(1))]);
        await index.flush();
        const file = join(dir, 'f.words');
        const bytes = await readFile(file);
        await writeFile(file, bytes.subarray(0, bytes.length - 8));
        // Act
        const hits = await wordIndex(dir, { ioChunkBytes: 16 }).search({
          feedId: 'f',
          words: Float64Array.from(wordsOf(1)),
          k: 5,
        });
        // Assess
        expect(hits).toEqual([]);
      });
    });

    it('keeps changes made while a flush is writing for the next flush, and the written file consistent', async () => {
      await withTempDir(async (dir) => {
        // Prepare: 200 images; 8-byte pieces make the write take many turns of the event loop
        const index = wordIndex(dir, { ioChunkBytes: 8, ...FILE_EVERY_FLUSH });
        await index.upsert(Array.from({ length: 200 }, (_, i) => doc(`i${i}`, wordsOf(i))));
        // Act: once the first flush has its temporary file open (its state taken), one image is replaced,
        // one deleted and a search merges them
        let settled = false;
        const flushing = index.flush().finally(() => {
          settled = true;
        });
        const opened = () =>
          stat(join(dir, 'f.words.tmp')).then(
            () => true,
            () => false,
          );
        while (!settled && !(await opened())) await new Promise((resolve) => setTimeout(resolve, 1));
        const changedDuringWrite = !settled;
        await index.upsert([doc('i3', wordsOf(1000))]);
        await index.deleteProducts('f', ['i5']);
        const during = await index.search({ feedId: 'f', words: Float64Array.from(wordsOf(1000)), k: 1 });
        await flushing;
        const firstFile = await wordIndex(dir).search({
          feedId: 'f',
          words: Float64Array.from([...wordsOf(3), ...wordsOf(5)]),
          k: 2,
        });
        await index.flush();
        const reopened = wordIndex(dir);
        const replaced = await reopened.search({
          feedId: 'f',
          words: Float64Array.from(wordsOf(1000)),
          k: 1,
        });
        const deleted = await reopened.search({ feedId: 'f', words: Float64Array.from(wordsOf(5)), k: 5 });
        // Assess: the first file holds the state it started from; the second one the changes
        expect(changedDuringWrite).toBe(true);
        expect(during.map((hit) => hit.productId)).toEqual(['i3']);
        expect(firstFile.map((hit) => hit.productId)).toEqual(['i3', 'i5']);
        expect(replaced.map((hit) => hit.productId)).toEqual(['i3']);
        expect(deleted.map((hit) => hit.productId)).not.toContain('i5');
        expect((await stat(join(dir, 'f.words'))).size).toBeGreaterThan(199 * 24 * 4);
      });
    });
  });

  describe('local visual-word index: layouts', () => {
    it.each([
      { layout: 'format 2 (float64 keys)', write: writeFormat2 },
      { layout: 'format 3 (metadata first)', write: writeFormat3 },
    ])('reads a file of an earlier layout, $layout, and rewrites it in format 4', async ({ write }) => {
      await withTempDir(async (dir) => {
        // Prepare: a file as an earlier version wrote it: a shares 5 in slice 0 and 9 in slice 3 with b; c
        // has 2³² − 1 in slice 7
        const rows = [
          ['f/a/0', 'a', 'ga'],
          ['f/b/0', 'b', 'gb'],
          ['f/c/0', 'c', 'gc'],
        ];
        const key = (bits: number, ordinal: number) => bits * 2 ** 20 + ordinal;
        const slices = Array.from({ length: 8 }, () => [] as number[]);
        slices[0]!.push(key(5, 0), key(5, 1), key(6, 0));
        slices[3]!.push(key(9, 0), key(9, 1));
        slices[7]!.push(key(2 ** 32 - 1, 2));
        await write(join(dir, 'f.words'), rows, slices);
        const words = (pairs: [slice: number, bits: number][]) =>
          Float64Array.from(pairs.map(([slice, bits]) => slice * 2 ** 32 + bits));
        // Act (format 2 is rewritten at the next flush in any case, format 3 when the file is)
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        const shared = await index.search({
          feedId: 'f',
          words: words([
            [0, 5],
            [3, 9],
            [0, 6],
          ]),
          k: 5,
        });
        const last = await index.search({ feedId: 'f', words: words([[7, 2 ** 32 - 1]]), k: 5 });
        await index.upsert([doc('d', [6])]);
        await index.flush();
        const reopened = await wordIndex(dir).search({
          feedId: 'f',
          words: words([[0, 6]]),
          k: 5,
        });
        // Assess
        expect(shared.map((hit) => [hit.productId, hit.itemGroupId])).toEqual([
          ['a', 'ga'],
          ['b', 'gb'],
        ]);
        expect(last.map((hit) => hit.productId)).toEqual(['c']);
        expect(reopened.map((hit) => hit.productId)).toEqual(['a', 'd']);
        expect(await headerOf(join(dir, 'f.words'))).toMatchObject({ format: 4, ordinalBits: 8 });
      });
    });

    it('keeps every word when the feed outgrows its ordinal width, and after deletions shrink it', async () => {
      await withTempDir(async (dir) => {
        // Prepare: 250 images (8-bit ordinals) merged by a search and written, then 250 more (9 bits), each
        // with a word of its own and the shared word 1 (on disk: a file at 8 bits and 250 images in memory)
        const index = wordIndex(dir, FILE_EVERY_FLUSH);
        const own = (i: number) => 1000 + i * 2 ** 24;
        await index.upsert(Array.from({ length: 250 }, (_, i) => doc(`i${i}`, [1, own(i)])));
        await index.search({ feedId: 'f', words: Float64Array.from([1]), k: 1 });
        await index.flush();
        await index.upsert(Array.from({ length: 250 }, (_, i) => doc(`i${250 + i}`, [1, own(250 + i)])));
        // Act
        const found = async (target: LocalVisualWordIndex, i: number) =>
          (await target.search({ feedId: 'f', words: Float64Array.from([own(i)]), k: 2 })).map(
            (hit) => hit.productId,
          );
        const wide = await Promise.all([0, 249, 250, 499].map((i) => found(index, i)));
        // (on disk: rewritten at 9 bits, then at 8 again after the deletion)
        await index.flush();
        await index.deleteProducts(
          'f',
          Array.from({ length: 300 }, (_, i) => `i${i}`),
        );
        const narrow = await Promise.all([299, 300, 499].map((i) => found(index, i)));
        await index.flush();
        const reopened = wordIndex(dir);
        const persisted = await Promise.all([300, 499].map((i) => found(reopened, i)));
        // Assess
        expect(wide).toEqual([['i0'], ['i249'], ['i250'], ['i499']]);
        expect(narrow).toEqual([[], ['i300'], ['i499']]);
        expect(persisted).toEqual([['i300'], ['i499']]);
      });
    });
  });

  describe('local visual-word index: merges during large writes', () => {
    it('answers the same when upserts merge as they go, replacements and deletions of unmerged images included', async () => {
      await withTempDir(async (dir) => {
        // Prepare: the same writes to an index that merges past 40 pending words and to one that never does
        // before a search: 120 images of 8 words (some shared), written 10 at a time; every 7th is replaced
        // right after its own batch (while pending, or merged), every 11th deleted
        const doc = (i: number, version: number) => ({
          id: `f/i${i}/0`,
          feedId: 'f',
          productId: `i${i}`,
          itemGroupId: `g${i % 30}`,
          words: Float64Array.from(
            { length: 8 },
            (_, j) => (j % 8) * 2 ** 32 + ((i * 7919 + j * 104_729 + version) % 5000),
          ),
        });
        const eager = wordIndex(join(dir, 'eager'), { mergePendingWords: 40 });
        const lazy = wordIndex(join(dir, 'lazy'));
        for (const index of [eager, lazy]) {
          for (let start = 0; start < 120; start += 10) {
            await index.upsert(Array.from({ length: 10 }, (_, j) => doc(start + j, 0)));
            await index.upsert(
              Array.from({ length: 10 }, (_, j) => start + j)
                .filter((i) => i % 7 === 0)
                .map((i) => doc(i, 1)),
            );
          }
          await index.deleteProducts(
            'f',
            Array.from({ length: 120 }, (_, i) => i)
              .filter((i) => i % 11 === 0)
              .map((i) => `i${i}`),
          );
        }
        // Act
        const queries = [doc(14, 1), doc(14, 0), doc(22, 0), doc(23, 0), doc(119, 0)].map((query) => ({
          feedId: 'f',
          words: query.words,
          k: 6,
        }));
        const eagerHits = await Promise.all(queries.map((query) => eager.search(query)));
        const lazyHits = await Promise.all(queries.map((query) => lazy.search(query)));
        // Assess
        expect(eagerHits).toEqual(lazyHits);
        expect(eagerHits[0]![0]!.productId).toBe('i14');
        expect(eagerHits[3]![0]!.productId).toBe('i23');
        expect(eagerHits.flat().map((hit) => hit.productId)).not.toContain('i22');
      });
    });
  });

  describe('local visual-word index: earlier files, foreign files and a deleted feed', () => {
    it('converts a format 2 file of more than 256 images and rewrites it at the next flush, unchanged', async () => {
      await withTempDir(async (dir) => {
        // Prepare: 300 images, image i with the word i in slice 2 (its ordinal needs 9 bits)
        const rows = Array.from({ length: 300 }, (_, i) => [`f/i${i}/0`, `i${i}`, `i${i}`]);
        const slices = Array.from({ length: 8 }, () => [] as number[]);
        slices[2] = Array.from({ length: 300 }, (_, i) => i * 2 ** 20 + i);
        await writeFormat2(join(dir, 'f.words'), rows, slices);
        // Act: a search loads it; a flush with no change rewrites it
        const index = wordIndex(dir);
        const found = await Promise.all(
          [0, 255, 256, 299].map(async (i) =>
            (await index.search({ feedId: 'f', words: Float64Array.from([2 * 2 ** 32 + i]), k: 2 })).map(
              (hit) => hit.productId,
            ),
          ),
        );
        await index.flush();
        const header = await headerOf(join(dir, 'f.words'));
        const reopened = await wordIndex(dir).search({
          feedId: 'f',
          words: Float64Array.from([2 * 2 ** 32 + 299]),
          k: 2,
        });
        // Assess
        expect(found).toEqual([['i0'], ['i255'], ['i256'], ['i299']]);
        expect(header).toMatchObject({ format: 4, ordinalBits: 9 });
        expect(reopened.map((hit) => hit.productId)).toEqual(['i299']);
      });
    });

    it.each([
      ['a null header', () => Buffer.concat([Buffer.from([4, 0, 0, 0]), Buffer.from('null')])],
      [
        'a negative slice length',
        () => {
          const json = Buffer.from(
            JSON.stringify({ format: 3, rows: [], ordinalBits: 8, slices: [-1, 0, 0, 0, 0, 0, 0, 1] }),
          );
          const header = Buffer.alloc(Math.ceil((4 + json.length) / 4) * 4);
          header.writeUInt32LE(json.length, 0);
          json.copy(header, 4);
          return Buffer.concat([header, Buffer.alloc(8 * 257 * 4)]);
        },
      ],
      [
        'a bucket table that falls',
        () => {
          const json = Buffer.from(
            JSON.stringify({
              format: 3,
              rows: [['f/a/0', 'a', 'a']],
              ordinalBits: 8,
              slices: [1, 0, 0, 0, 0, 0, 0, 0],
            }),
          );
          const header = Buffer.alloc(Math.ceil((4 + json.length) / 4) * 4);
          header.writeUInt32LE(json.length, 0);
          json.copy(header, 4);
          const tables = new Uint32Array(8 * 257 + 1);
          tables[1] = 5; // bucket 0 claims 5 entries of a slice that has 1
          tables[256] = 1;
          return Buffer.concat([header, Buffer.from(tables.buffer)]);
        },
      ],
      [
        'a format 2 file of more than 2²⁰ images',
        () => {
          const json = Buffer.from(
            `{"format":2,"rows":[${Array.from({ length: 2 ** 20 + 1 }, () => '["x","x","x"]').join(',')}],"slices":[0,0,0,0,0,0,0,0]}`,
          );
          const header = Buffer.alloc(Math.ceil((4 + json.length) / 8) * 8);
          header.writeUInt32LE(json.length, 0);
          json.copy(header, 4);
          return header;
        },
      ],
    ])('starts a feed whose file has %s empty, and keeps accepting writes', async (_, content) => {
      await withTempDir(async (dir) => {
        // Prepare
        await writeFile(join(dir, 'f.words'), content());
        const index = wordIndex(dir);
        // Act
        await index.upsert([doc('b', [7])]);
        const hits = await index.search({ feedId: 'f', words: Float64Array.from([7]), k: 5 });
        // Assess
        expect(hits.map((hit) => hit.productId)).toEqual(['b']);
      });
    });

    it('keeps a feed imported again after its deletion, even with a flush queued before the deletion', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a feed on disk, then a flush queued, the feed deleted and imported again meanwhile
        const index = wordIndex(dir);
        await index.upsert([doc('old', [1])]);
        await index.flush();
        await index.upsert([doc('old2', [2])]);
        // Act
        const flushing = index.flush();
        const deleting = index.deleteFeed('f');
        await index.upsert([doc('new', [3])]);
        await Promise.all([flushing, deleting]);
        await index.flush();
        const reopened = wordIndex(dir);
        const hits = await reopened.search({ feedId: 'f', words: Float64Array.from([1, 2, 3]), k: 5 });
        // Assess
        expect(hits.map((hit) => hit.productId)).toEqual(['new']);
      });
    });
  });

  describe('local visual-word index: the journal', () => {
    const search = (index: LocalVisualWordIndex, ...words: number[]) =>
      index.search({ feedId: 'f', words: Float64Array.from(words), k: 10 });
    const ids = (hits: { productId: string }[]) => hits.map((hit) => hit.productId).sort();
    const exists = (file: string) =>
      stat(file).then(
        () => true,
        () => false,
      );

    it('makes a flush durable by appending to the journal, which a reopen replays over the file', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a feed file with a and b, then changes that only the journal holds
        const index = wordIndex(dir, { journal: false });
        await index.upsert([doc('a', [1, 2]), doc('b', [1, 3])]);
        await index.flush();
        const file = await readFile(join(dir, 'f.words'));
        const journaled = wordIndex(dir);
        await journaled.upsert([doc('c', [1, 4]), doc('a', [5])]);
        await journaled.deleteProducts('f', ['b']);
        // Act
        await journaled.flush();
        // Assess: the file was not rewritten; a reopen sees every change
        expect(await readFile(join(dir, 'f.words'))).toEqual(file);
        expect(await exists(join(dir, 'f.journal'))).toBe(true);
        const reopened = wordIndex(dir);
        expect(ids(await search(reopened, 1))).toEqual(['c']);
        expect(ids(await search(reopened, 5))).toEqual(['a']);
      });
    });

    it('rewrites the file and empties the journal once the journal has grown past its limit', async () => {
      await withTempDir(async (dir) => {
        const index = wordIndex(dir, { journalMinBytes: 200 });
        await index.upsert([doc('a', [1, 2])]);
        await index.flush(); // journal empty: appended
        expect(await exists(join(dir, 'f.words'))).toBe(false);
        await index.upsert(Array.from({ length: 5 }, (_, i) => doc(`p${i}`, [1, 10 + i])));
        await index.flush(); // still under 200 bytes before it: appended
        await index.upsert([doc('z', [1, 99])]);
        await index.flush(); // past 200 bytes: the file is written, the journal removed

        expect(await exists(join(dir, 'f.words'))).toBe(true);
        expect(await exists(join(dir, 'f.journal'))).toBe(false);
        expect(ids(await search(wordIndex(dir), 1))).toEqual(['a', 'p0', 'p1', 'p2', 'p3', 'p4', 'z']);
      });
    });

    it('does not replay over a rewritten file a journal that a crash left behind', async () => {
      await withTempDir(async (dir) => {
        // Prepare: a's first words journaled; then a is replaced and the file rewritten; the crash comes
        // after the rename and before the journal's removal (restored here)
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1])]);
        await index.flush();
        const leftOver = await readFile(join(dir, 'f.journal'));
        const rewriting = wordIndex(dir, { journal: false });
        await rewriting.upsert([doc('a', [2])]);
        await rewriting.flush();
        await writeFile(join(dir, 'f.journal'), leftOver);
        // Act
        const reopened = wordIndex(dir);
        // Assess
        expect(ids(await search(reopened, 2))).toEqual(['a']);
        expect(await search(reopened, 1)).toEqual([]);
      });
    });

    it('keeps the entries before a journal line cut by a crash', async () => {
      await withTempDir(async (dir) => {
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1])]);
        await index.flush();
        await index.upsert([doc('b', [1])]);
        await index.flush();
        const journal = await readFile(join(dir, 'f.journal'));
        await writeFile(join(dir, 'f.journal'), journal.subarray(0, journal.length - 10));

        expect(ids(await search(wordIndex(dir), 1))).toEqual(['a']);
      });
    });

    it.each([
      // (The entry cut is lost; the next append used to follow the cut bytes, and the line it made was lost.)
      { cut: 10, damage: 'a cut line', afterRestart: ['a'] },
      // (The entry still reads; the next append used to glue its line to it, and both were lost.)
      { cut: 1, damage: 'a last line lacking only its newline', afterRestart: ['a', 'b'] },
    ])('replaces a journal with $damage instead of appending to it', async ({ cut, afterRestart }) => {
      await withTempDir(async (dir) => {
        // Prepare: the second append cut by a crash
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1])]);
        await index.flush();
        await index.upsert([doc('b', [1])]);
        await index.flush();
        const journal = await readFile(join(dir, 'f.journal'));
        await writeFile(join(dir, 'f.journal'), journal.subarray(0, journal.length - cut));
        // Act: a restart, a change, a flush, another restart
        const restarted = wordIndex(dir);
        const found = ids(await search(restarted, 1));
        await restarted.upsert([doc('c', [1])]);
        await restarted.flush();
        // Assess: nothing glued to the cut line, nothing acknowledged lost
        expect(found).toEqual(afterRestart);
        expect(ids(await search(wordIndex(dir), 1))).toEqual([...afterRestart, 'c']);
      });
    });

    it('stops at a journal line that parses but is not an entry', async () => {
      await withTempDir(async (dir) => {
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1])]);
        await index.flush();
        const journal = await readFile(join(dir, 'f.journal'), 'utf8');
        await writeFile(
          join(dir, 'f.journal'),
          `${journal}{"s":9,"u":null}\n{"s":10,"u":["f/y/0","y","y","AAA"]}\n`,
        );

        expect(ids(await search(wordIndex(dir), 1))).toEqual(['a']);
      });
    });

    it('keeps nothing of a deleted feed in memory, and serves the id again afterwards', async () => {
      await withTempDir(async (dir) => {
        // Prepare: three feeds with words on disk
        const index = wordIndex(dir);
        const feedsInMemory = () => (index as unknown as { feeds: Map<string, unknown> }).feeds;
        for (const feedId of ['f1', 'f2', 'f3'])
          await index.upsert([{ ...doc('a', [1]), id: `${feedId}/a/0`, feedId }]);
        await index.flush();
        // Act
        for (const feedId of ['f1', 'f2', 'f3']) await index.deleteFeed(feedId);
        // Assess: no entry left (each held ~12 KB for the process's life); the id works as a new feed
        expect(feedsInMemory().size).toBe(0);
        const find = (from: LocalVisualWordIndex) =>
          from.search({ feedId: 'f1', words: Float64Array.from([1]), k: 10 }).then(ids);
        expect(await find(index)).toEqual([]);
        await index.upsert([{ ...doc('b', [1]), id: 'f1/b/0', feedId: 'f1' }]);
        await index.flush();
        expect(await find(wordIndex(dir))).toEqual(['b']);
      });
    });

    it('removes the journal with the feed', async () => {
      await withTempDir(async (dir) => {
        const index = wordIndex(dir);
        await index.upsert([doc('a', [1])]);
        await index.flush();
        await index.deleteFeed('f');
        await index.upsert([doc('b', [1])]);
        await index.flush();

        expect(ids(await search(wordIndex(dir), 1))).toEqual(['b']);
      });
    });
  });
});

describe('local visual-word index: a feed moving between memory and its file', () => {
  it('searches a feed on disk that a rewrite brings under the memory budget, and one that grows past it', async () => {
    await withTempDir(async (dir) => {
      // Prepare: 200 images of 10 words (8,000 bytes of entries, over a 4,000-byte budget: on disk)
      const ten = (i: number) => Array.from({ length: 10 }, (_, w) => i * 10 + w);
      const index = new LocalVisualWordIndex(dir, { memoryBytes: 4000, journal: false });
      await index.upsert(Array.from({ length: 200 }, (_, i) => doc(`p${i}`, ten(i))));
      await index.flush();
      const search = (words: number[]) =>
        index
          .search({ feedId: 'f', words: Float64Array.from(words), k: 5 })
          .then((hits) => hits.map((h) => h.productId));
      const onDisk = await search([1990, 1991]);
      // Act: 150 go (2,000 bytes left: the rewrite reads the file back into memory), then 200 more come
      await index.deleteProducts(
        'f',
        Array.from({ length: 150 }, (_, i) => `p${i}`),
      );
      await index.flush();
      const inMemory = await search([1990, 1991, 0]);
      await index.upsert(Array.from({ length: 200 }, (_, i) => doc(`q${i}`, ten(1000 + i))));
      await index.flush();
      const onDiskAgain = await search([1990, 11_990]);
      await index.close();
      // Assess
      expect(onDisk).toEqual(['p199']);
      expect(inMemory).toEqual(['p199']);
      expect(onDiskAgain).toEqual(['p199', 'q199']);
    });
  });
});

describe('local visual-word index: segments of a feed on disk', () => {
  /** Every flush writes the state; segments are never merged nor the base rewritten unless a test says. */
  const SEGMENTS = { memoryBytes: 0, journal: false, maxSegments: 100, rewriteShare: 1000 };
  const search = (index: LocalVisualWordIndex, words: number[], k = 10) =>
    index.search({ feedId: 'f', words: Float64Array.from(words), k });
  const ids = (hits: { productId: string }[]) => hits.map((hit) => hit.productId);
  const segmentFiles = async (dir: string) =>
    (await readdir(dir)).filter((name) => /^f\.words\.\d+$/.test(name)).sort();
  const manifestOf = async (dir: string) =>
    JSON.parse(await readFile(join(dir, 'f.manifest'), 'utf8')) as {
      base: number;
      journalSeq: number;
      parts: { segment: number; rows: number; dead: number[] }[];
    };
  const exists = (file: string) =>
    stat(file).then(
      () => true,
      () => false,
    );

  it('writes the changes of a feed on disk as a segment and lists the dead rows, leaving its file as is', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a, b and c written to the base file
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      await index.upsert([doc('a', [1, 2]), doc('b', [1, 3]), doc('c', [1, 4])]);
      await index.flush();
      const base = await readFile(join(dir, 'f.words'));
      // Act: b goes, c is replaced, d arrives
      await index.deleteProducts('f', ['b']);
      await index.upsert([doc('c', [4, 5]), doc('d', [1, 5])]);
      await index.flush();
      const hits = await search(index, [1, 4, 5]);
      // Assess: the base file is untouched; segment 1 holds c and d, the manifest b's and c's old rows
      expect((await readFile(join(dir, 'f.words'))).equals(base)).toBe(true);
      expect(await segmentFiles(dir)).toEqual(['f.words.1']);
      expect((await manifestOf(dir)).parts).toEqual([
        { segment: 0, rows: 3, dead: [1, 2] },
        { segment: 1, rows: 2, dead: [] },
      ]);
      expect(ids(hits)).toEqual(['c', 'd', 'a']);
      expect(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1, 4, 5])).toEqual(hits);
    });
  });

  it('answers as the index in memory over random upserts, replacements, deletions, flushes and reopens', async () => {
    await withTempDir(async (dir) => {
      // Prepare: the same random changes to an index in memory and to one on disk that writes a segment
      // at every flush and merges past two (seeded: a failure replays)
      let seed = 42;
      const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
      const int = (n: number) => Math.floor(random() * n);
      const pool = Array.from({ length: 40 }, (_, i) => (i % 8) * 2 ** 32 + ((i * 2_654_435_761) % 2 ** 32));
      const words = () => [...new Set(Array.from({ length: 1 + int(8) }, () => pool[int(pool.length)]!))];
      const options = { ...SEGMENTS, maxSegments: 2 };
      const memory = new LocalVisualWordIndex(join(dir, 'memory'));
      let disk = new LocalVisualWordIndex(join(dir, 'disk'), options);
      let segmentsSeen = 0;
      let compared = 0;
      // Act
      for (let step = 0; step < 150; step += 1) {
        const roll = random();
        if (roll < 0.45) {
          const documents = Array.from({ length: 1 + int(6) }, () =>
            doc(`p${int(60)}`, words(), `g${int(5)}`),
          );
          await memory.upsert(documents);
          await disk.upsert(documents);
        } else if (roll < 0.65) {
          const products = Array.from({ length: 1 + int(4) }, () => `p${int(60)}`);
          await memory.deleteProducts('f', products);
          await disk.deleteProducts('f', products);
        } else if (roll < 0.8) {
          await disk.flush();
          segmentsSeen = Math.max(segmentsSeen, (await segmentFiles(join(dir, 'disk'))).length);
        } else if (roll < 0.85) {
          await disk.close();
          disk = new LocalVisualWordIndex(join(dir, 'disk'), options);
        } else {
          const query = { feedId: 'f', words: Float64Array.from(words()), k: 1 + int(12) };
          // Assess (at each step): the same ids, scores and order
          expect(await disk.search(query)).toEqual(await memory.search(query));
          compared += 1;
        }
      }
      expect(segmentsSeen).toBe(2);
      expect(compared).toBeGreaterThan(10);
    });
  });

  it('answers searches in flight while the index closes, from its files or loaded again', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base and a segment
      const writer = new LocalVisualWordIndex(dir, SEGMENTS);
      await writer.upsert([doc('a', [1]), doc('b', [1, 2])]);
      await writer.flush();
      await writer.upsert([doc('c', [2])]);
      await writer.flush();
      await writer.close();
      // Act: searches back to back, each after a few more microtasks, while close() runs
      const failures: unknown[] = [];
      for (let pad = 0; pad < 20; pad += 1) {
        const index = new LocalVisualWordIndex(dir, SEGMENTS);
        const searches = (async () => {
          for (let i = 0; i < 10; i += 1) {
            for (let tick = 0; tick < pad; tick += 1) await null;
            expect(ids(await search(index, [1, 2]))).toEqual(['b', 'a', 'c']);
          }
        })();
        const results = await Promise.allSettled([searches, index.close()]);
        failures.push(...results.flatMap((result) => (result.status === 'rejected' ? [result.reason] : [])));
        await index.close();
      }
      // Assess
      expect(failures).toEqual([]);
    });
  });

  it('removes a base file a crash left half written, at the next segment write', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base of a, and what a crash in the middle of the base's next rewrite leaves
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      await index.upsert([doc('a', [1])]);
      await index.flush();
      await writeFile(join(dir, 'f.words.tmp'), Buffer.alloc(4096, 7));
      // Act
      await index.upsert([doc('b', [1])]);
      await index.flush();
      // Assess
      expect(await exists(join(dir, 'f.words.tmp'))).toBe(false);
      expect(await segmentFiles(dir)).toEqual(['f.words.1']);
      expect(ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1]))).toEqual(['a', 'b']);
    });
  });

  it('writes a new base, not a segment, after a load that could not read a listed segment', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base of a, then segments 1 (b) and 2 (c); segment 1 goes missing
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      for (const id of ['a', 'b', 'c']) {
        await index.upsert([doc(id, [1])]);
        await index.flush();
      }
      await index.close();
      await rm(join(dir, 'f.words.1'));
      // Act: a restart (the base alone), a change, a flush
      const restarted = new LocalVisualWordIndex(dir, SEGMENTS);
      const afterRestart = ids(await search(restarted, [1]));
      await restarted.upsert([doc('d', [1])]);
      await restarted.flush();
      // Assess: the old manifest and its segments gone with the rewrite, none renamed over
      expect(afterRestart).toEqual(['a']);
      expect(await segmentFiles(dir)).toEqual([]);
      expect(await exists(join(dir, 'f.manifest'))).toBe(false);
      expect(ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1]))).toEqual(['a', 'd']);
    });
  });

  it('merges the two adjacent segments with the fewest entries past the limit, leaving their dead rows out', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base, then segments of 4 images, 2 images (one of them deleted with the next flush) and
      // 1 image
      const index = new LocalVisualWordIndex(dir, { ...SEGMENTS, maxSegments: 3 });
      const flushed = async (documents: ReturnType<typeof doc>[], deleted: string[] = []) => {
        await index.deleteProducts('f', deleted);
        await index.upsert(documents);
        await index.flush();
      };
      await flushed([doc('base', [1])]);
      await flushed(['s1', 's2', 's3', 's4'].map((id) => doc(id, [1, 2])));
      await flushed([doc('t', [1, 3]), doc('t2', [1, 3])]);
      await flushed([doc('u', [1, 3])], ['t2']);
      const before = await manifestOf(dir);
      // Act: a fourth segment, of 4 images
      await flushed(['v1', 'v2', 'v3', 'v4'].map((id) => doc(id, [1, 2])));
      const hits = await search(index, [1, 2, 3], 20);
      // Assess: segments 2 and 3 (6 entries, against 12 for 1 and 2, 10 for 3 and 4) merged into 5,
      // without t2, in their place (before segment 4)
      expect(before.parts.map(({ segment, dead }) => [segment, dead])).toEqual([
        [0, []],
        [1, []],
        [2, [1]],
        [3, []],
      ]);
      expect((await manifestOf(dir)).parts).toEqual([
        { segment: 0, rows: 1, dead: [] },
        { segment: 1, rows: 4, dead: [] },
        { segment: 5, rows: 2, dead: [] },
        { segment: 4, rows: 4, dead: [] },
      ]);
      expect(await segmentFiles(dir)).toEqual(['f.words.1', 'f.words.4', 'f.words.5']);
      expect(ids(hits)).toEqual(['t', 'u', 's1', 's2', 's3', 's4', 'v1', 'v2', 'v3', 'v4', 'base']);
      expect(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1, 2, 3], 20)).toEqual(hits);
    });
  });

  it('rewrites the base once the segments and its dead rows pass the share, removing segments and manifest', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base of 8 images of 4 words (32 entries); a share of a half: 16 entries
      const index = new LocalVisualWordIndex(dir, { ...SEGMENTS, rewriteShare: 0.5 });
      await index.upsert(Array.from({ length: 8 }, (_, i) => doc(`b${i}`, [1, 10 + i, 20 + i, 30 + i])));
      await index.flush();
      const generation = Number((await headerOf(join(dir, 'f.words'))).generation);
      // Act: 12 entries go to a segment; then 2 more images of 4 words (20 > 16) rewrite the base
      await index.upsert(Array.from({ length: 3 }, (_, i) => doc(`s${i}`, [1, 40 + i, 50 + i, 60 + i])));
      await index.flush();
      const segmented = await segmentFiles(dir);
      await index.upsert(Array.from({ length: 2 }, (_, i) => doc(`t${i}`, [1, 70 + i, 80 + i, 90 + i])));
      await index.flush();
      // Assess
      expect(segmented).toEqual(['f.words.1']);
      expect(await segmentFiles(dir)).toEqual([]);
      expect(await exists(join(dir, 'f.manifest'))).toBe(false);
      expect(await headerOf(join(dir, 'f.words'))).toMatchObject({ generation: generation + 1 });
      expect((await headerOf(join(dir, 'f.words'))).rows).toHaveLength(13);
      expect(ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1], 20))).toHaveLength(13);
    });
  });

  it('rewrites the base once deletions leave a large share of its rows dead', async () => {
    await withTempDir(async (dir) => {
      const index = new LocalVisualWordIndex(dir, { ...SEGMENTS, rewriteShare: 0.5 });
      await index.upsert(Array.from({ length: 8 }, (_, i) => doc(`b${i}`, [1, 10 + i])));
      await index.flush();
      // Act: 3 of 8 dead (under a half): listed; then a fifth (over): rewritten
      await index.deleteProducts('f', ['b0', 'b1', 'b2']);
      await index.flush();
      const listed = (await manifestOf(dir)).parts[0]!.dead;
      await index.deleteProducts('f', ['b3', 'b4']);
      await index.flush();
      // Assess
      expect(listed).toEqual([0, 1, 2]);
      expect(await exists(join(dir, 'f.manifest'))).toBe(false);
      expect((await headerOf(join(dir, 'f.words'))).rows).toHaveLength(3);
    });
  });

  it('does not replay over a segment a journal that a crash left behind', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base with a; a's new words journaled; then a replaced again and written as a segment;
      // the crash comes after the manifest's rename and before the journal's removal (restored here)
      const base = new LocalVisualWordIndex(dir, SEGMENTS);
      await base.upsert([doc('a', [1]), doc('b', [9])]);
      await base.flush();
      const journaled = new LocalVisualWordIndex(dir, { memoryBytes: 0 });
      await journaled.upsert([doc('a', [2])]);
      await journaled.flush();
      const leftOver = await readFile(join(dir, 'f.journal'));
      const segmented = new LocalVisualWordIndex(dir, SEGMENTS);
      await segmented.upsert([doc('a', [3])]);
      await segmented.flush();
      const wroteSegment = (await segmentFiles(dir)).length === 1;
      await writeFile(join(dir, 'f.journal'), leftOver);
      // Act
      const reopened = new LocalVisualWordIndex(dir, SEGMENTS);
      // Assess: a has its last words only
      expect(wroteSegment).toBe(true);
      expect(ids(await search(reopened, [3]))).toEqual(['a']);
      expect(await search(reopened, [2])).toEqual([]);
      expect(await search(reopened, [1])).toEqual([]);
    });
  });

  it('keeps the state before a segment whose manifest was not written, and writes it again', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base with a; then b written as a segment whose manifest cannot be written (its
      // temporary name is a folder), as if the process had stopped between the two
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      await index.upsert([doc('a', [1])]);
      await index.flush();
      await index.upsert([doc('b', [1])]);
      await mkdir(join(dir, 'f.manifest.tmp'));
      // Act
      await expect(index.flush()).rejects.toThrow();
      const unlisted = await segmentFiles(dir);
      const afterCrash = ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1]));
      await rm(join(dir, 'f.manifest.tmp'), { recursive: true });
      await index.flush();
      // Assess: the unlisted segment is not read; the next flush writes b (once) and removes it
      expect(unlisted).toEqual(['f.words.1']);
      expect(afterCrash).toEqual(['a']);
      expect(await segmentFiles(dir)).toEqual(['f.words.2']);
      expect(ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [1]))).toEqual(['a', 'b']);
    });
  });

  it('ignores a manifest left by a crash between the rewrite of its base and its removal', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base with a and b, a segment replacing b; the manifest and segment kept aside
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      await index.upsert([doc('a', [1]), doc('b', [1])]);
      await index.flush();
      await index.upsert([doc('b', [2])]);
      await index.flush();
      const manifest = await readFile(join(dir, 'f.manifest'));
      const segment = await readFile(join(dir, 'f.words.1'));
      // Act: a is replaced and the base rewritten (a share of 0: b, then a, two rows as before), then the
      // old manifest and segment come back
      const rewriting = new LocalVisualWordIndex(dir, { ...SEGMENTS, rewriteShare: 0 });
      await rewriting.upsert([doc('a', [1, 3])]);
      await rewriting.flush();
      const removed = !(await exists(join(dir, 'f.manifest')));
      await writeFile(join(dir, 'f.manifest'), manifest);
      await writeFile(join(dir, 'f.words.1'), segment);
      const reopened = new LocalVisualWordIndex(dir, SEGMENTS);
      // Assess: the base alone (the old manifest would kill its second row, a, and add b a second time)
      expect(removed).toBe(true);
      expect(ids(await search(reopened, [1, 3]))).toEqual(['a']);
      expect(await search(reopened, [2])).toEqual([
        { id: 'f/b/0', productId: 'b', itemGroupId: 'b', score: Math.log(1 + 2 / 1) },
      ]);
    });
  });

  it('reads a format 4 file written before segments, and rewrites it at its first write', async () => {
    await withTempDir(async (dir) => {
      // Prepare: a file as the version before segments wrote it (no generation in its metadata)
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      await index.upsert([doc('a', [1]), doc('b', [1, 2])]);
      await index.flush();
      const bytes = await readFile(join(dir, 'f.words'));
      const length = bytes.readUInt32LE(bytes.length - 8);
      const { generation, ...meta } = await headerOf(join(dir, 'f.words'));
      const json = Buffer.from(JSON.stringify(meta));
      const trailer = Buffer.alloc(8);
      trailer.writeUInt32LE(json.length, 0);
      trailer.write('VPW4', 4, 'latin1');
      await writeFile(
        join(dir, 'f.words'),
        Buffer.concat([bytes.subarray(0, bytes.length - 8 - length), json, trailer]),
      );
      // Act
      const old = new LocalVisualWordIndex(dir, SEGMENTS);
      const found = ids(await search(old, [2]));
      await old.upsert([doc('c', [2])]);
      await old.flush();
      const rewritten = await segmentFiles(dir);
      await old.upsert([doc('d', [2])]);
      await old.flush();
      // Assess: read; then rewritten whole (no segment), with a generation; the next write is a segment
      expect(generation).toBe(1);
      expect(found).toEqual(['b']);
      expect(rewritten).toEqual([]);
      expect(await headerOf(join(dir, 'f.words'))).toMatchObject({ generation: 1 });
      expect(await segmentFiles(dir)).toEqual(['f.words.1']);
      expect(ids(await search(new LocalVisualWordIndex(dir, SEGMENTS), [2]))).toEqual(['b', 'c', 'd']);
    });
  });

  it("closes every segment's file at close, and deletes the segments with the feed", async () => {
    await withTempDir(async (dir) => {
      // Prepare: a base and two segments, searched
      const openFiles = async () => {
        const links = await Promise.all(
          (await readdir('/proc/self/fd')).map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')),
        );
        return links.filter((link) => link.startsWith(dir)).length;
      };
      const index = new LocalVisualWordIndex(dir, SEGMENTS);
      for (const id of ['a', 'b', 'c']) {
        await index.upsert([doc(id, [1])]);
        await index.flush();
      }
      const searched = ids(await search(index, [1]));
      const whileOpen = await openFiles();
      // Act
      await index.close();
      const afterClose = await openFiles();
      await search(index, [1]);
      await index.deleteFeed('f');
      // Assess
      expect(searched).toEqual(['a', 'b', 'c']);
      expect(whileOpen).toBe(3);
      expect(afterClose).toBe(0);
      expect(await openFiles()).toBe(0);
      expect(await readdir(dir)).toEqual([]);
    });
  });
});
