/**
 * Fault injection for the segment writes of the local visual-word index (lib/adapters/
 * local-visual-word-index.ts): a segment that cannot be read back once written, and a folder listing that
 * fails, which real files cannot be made to show on demand. `node:fs` and `node:fs/promises` pass every
 * call through but the one a test makes fail; local-visual-word-index.test.ts runs the index without them.
 */
import type * as Fs from 'node:fs';
import type * as FsPromises from 'node:fs/promises';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { VisualWordHit } from '#lib/ports.ts';

/** The next call to fail: opening this file (as a feed file is read), or listing a folder. */
const faults = vi.hoisted(() => ({
  openFile: undefined as string | undefined,
  readdir: false,
  fired: 0,
}));

/** An I/O error as Node makes them (code, syscall, path). */
const ioError = (syscall: string, path: string) =>
  Object.assign(new Error(`EIO: i/o error, ${syscall} '${path}'`), { code: 'EIO', errno: -5, syscall, path });

// word-file.ts reads feed files through `open` of node:fs (a plain descriptor), and the index lists its
// folder through `readdir` of node:fs/promises.
vi.mock('node:fs', async (importOriginal) => {
  const actual = await importOriginal<typeof Fs>();
  const open = (path: string, ...rest: unknown[]) => {
    if (path === faults.openFile) {
      faults.openFile = undefined;
      faults.fired += 1;
      const callback = rest.at(-1) as (error: Error) => void;
      process.nextTick(callback, ioError('open', path));
      return;
    }
    (actual.open as (...args: unknown[]) => void)(path, ...rest);
  };
  return { ...actual, default: { ...actual, open }, open };
});
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof FsPromises>();
  const readdir = (path: string, ...rest: unknown[]) => {
    if (faults.readdir) {
      faults.readdir = false;
      faults.fired += 1;
      return Promise.reject(ioError('scandir', path));
    }
    return (actual.readdir as (...args: unknown[]) => Promise<unknown>)(path, ...rest);
  };
  return { ...actual, default: { ...actual, readdir }, readdir };
});

const { LocalVisualWordIndex } = await import('#lib/adapters/local-visual-word-index.ts');
type Index = InstanceType<typeof LocalVisualWordIndex>;

afterEach(() => {
  faults.openFile = undefined;
  faults.readdir = false;
  faults.fired = 0;
});

/** An image document of feed f. */
const doc = (id: string, words: number[]) => ({
  id: `f/${id}/0`,
  feedId: 'f',
  productId: id,
  itemGroupId: id,
  words: Float64Array.from(words),
});

/** Every flush writes a segment; merged past `maxSegments`; the base never rewritten. */
const segmentsPast = (maxSegments: number) => ({
  memoryBytes: 0,
  journal: false,
  maxSegments,
  rewriteShare: 1000,
});
/** Every word the tests use: each image is scored. */
const QUERY = { feedId: 'f', words: Float64Array.from([1, 2, 3, 4, 5, 6]), k: 20 };

/**
 * A feed on disk (a base of a and b, then a segment of c) and an index in memory given the same changes,
 * in a fresh folder; `disk` is an index opened over it afterwards with `options` (by default, those it
 * was written with); `change` makes the same change to both.
 */
async function withFeeds(
  maxSegments: number,
  test: (feeds: {
    dir: string;
    disk: Index;
    memory: Index;
    change: (upserts: ReturnType<typeof doc>[], deleted?: string[]) => Promise<void>;
  }) => Promise<void>,
  options: ConstructorParameters<typeof LocalVisualWordIndex>[1] = {},
): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'local-visual-word-index-faults-'));
  try {
    const dir = join(root, 'disk');
    let disk = new LocalVisualWordIndex(dir, segmentsPast(maxSegments));
    const memory = new LocalVisualWordIndex(join(root, 'memory'));
    const change = async (upserts: ReturnType<typeof doc>[], deleted: string[] = []) => {
      for (const index of [disk, memory]) {
        await index.deleteProducts('f', deleted);
        await index.upsert(upserts);
      }
    };
    await change([doc('a', [1, 2]), doc('b', [2, 3])]);
    await disk.flush();
    await change([doc('c', [3, 4])]);
    await disk.flush();
    await disk.close();
    disk = new LocalVisualWordIndex(dir, { ...segmentsPast(maxSegments), ...options });
    try {
      await test({ dir, disk, memory, change });
    } finally {
      await disk.close().catch(() => undefined);
    }
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

/**
 * The injected fault fired once, the flush failed with its I/O error (`syscall`), and every search made
 * while it ran answered as the index in memory does.
 */
function expectOneFaultUnseen(syscall: string, error: unknown, searched: unknown[], expected: unknown): void {
  expect(faults.fired).toBe(1);
  expect(error).toMatchObject({ code: 'EIO', syscall });
  expect(searched.length).toBeGreaterThan(1);
  for (const hits of searched) expect(hits).toEqual(expected);
}

/** The flush's outcome, and every search made while it ran (one per turn of the event loop). */
async function flushWhileSearching(index: Index): Promise<{ error: unknown; searched: VisualWordHit[][] }> {
  let settled = false;
  const flushed = index.flush().then(
    () => undefined,
    (error: unknown) => error ?? new Error('rejected without an error'),
  );
  void flushed.finally(() => (settled = true));
  const searched: VisualWordHit[][] = [];
  while (!settled) {
    searched.push(await index.search(QUERY));
    await setImmediate();
  }
  return { error: await flushed, searched };
}

const segmentFiles = async (dir: string) =>
  (await readdir(dir)).filter((name) => /^f\.words\.\d+$/.test(name)).sort();
const listed = async (dir: string) =>
  (JSON.parse(await readFile(join(dir, 'f.manifest'), 'utf8')) as { parts: { segment: number }[] }).parts.map(
    ({ segment }) => segment,
  );
/** The answer of a fresh index over the folder (as after a restart). */
async function reopened(dir: string): Promise<VisualWordHit[]> {
  const index = new LocalVisualWordIndex(dir, segmentsPast(100));
  try {
    return await index.search(QUERY);
  } finally {
    await index.close();
  }
}

describe('local visual-word index: segment writes that fail', () => {
  it('keeps the state before a segment that does not read back, and writes it at the next flush', async () => {
    await withFeeds(100, async ({ dir, disk, memory, change }) => {
      // Prepare: b goes, a is replaced, d arrives; segment 2, the next, will not open for reading
      const acknowledged = await memory.search(QUERY);
      await change([doc('a', [5]), doc('d', [1, 6])], ['b']);
      const expected = await memory.search(QUERY);
      faults.openFile = join(dir, 'f.words.2');
      // Act
      const { error, searched } = await flushWhileSearching(disk);
      const afterFailure = await disk.search(QUERY);
      const reopenedAfterFailure = await reopened(dir);
      await disk.flush();
      // Assess: the I/O error itself; every search as the index in memory answers; a restart finds the
      // last flush's state; the next flush lists a new segment (3) and removes the unlisted one
      expectOneFaultUnseen('open', error, searched, expected);
      expect(afterFailure).toEqual(expected);
      expect(reopenedAfterFailure).toEqual(acknowledged);
      expect(await listed(dir)).toEqual([0, 1, 3]);
      expect(await segmentFiles(dir)).toEqual(['f.words.1', 'f.words.3']);
      expect(await reopened(dir)).toEqual(expected);
    });
  });

  it('keeps the changes its journal acknowledged when the segment that would hold them does not read back', async () => {
    await withFeeds(
      100,
      async ({ dir, disk, memory, change }) => {
        // Prepare: b goes and d arrives (with 300 more words: a journal line past a quarter of the base
        // file, the journal's limit), flushed to the journal; then a is replaced, and that flush writes
        // segment 2, which will not open for reading
        const manyWords = Array.from({ length: 300 }, (_, i) => 100 + i);
        await change([doc('d', [1, 6, ...manyWords])], ['b']);
        await disk.flush();
        const filesAfterJournal = await segmentFiles(dir);
        const journaled = await memory.search(QUERY);
        await change([doc('a', [5])]);
        const expected = await memory.search(QUERY);
        faults.openFile = join(dir, 'f.words.2');
        // Act
        const { error, searched } = await flushWhileSearching(disk);
        const reopenedAfterFailure = await reopened(dir);
        await disk.flush();
        // Assess: a restart replays the journal over the files; the next flush writes the segment
        expectOneFaultUnseen('open', error, searched, expected);
        expect(filesAfterJournal).toEqual(['f.words.1']);
        expect(reopenedAfterFailure).toEqual(journaled);
        expect(await listed(dir)).toEqual([0, 1, 3]);
        expect(await reopened(dir)).toEqual(expected);
      },
      { journal: true, journalMinBytes: 1 },
    );
  });

  it('keeps the segment written before a merge that does not read back, and merges at the next write', async () => {
    await withFeeds(1, async ({ dir, disk, memory, change }) => {
      // Prepare: d arrives and c goes; its segment (2) makes two, so 1 and 2 are merged into 3, which
      // will not open for reading
      await change([doc('d', [4, 5])], ['c']);
      const expected = await memory.search(QUERY);
      faults.openFile = join(dir, 'f.words.3');
      // Act
      const { error, searched } = await flushWhileSearching(disk);
      const afterFailure = await disk.search(QUERY);
      const listedAfterFailure = await listed(dir);
      const reopenedAfterFailure = await reopened(dir);
      await change([doc('e', [6])]);
      await disk.flush();
      // Assess: the segment is committed (listed, found by a restart), the merge is not; the next write
      // merges down to one segment and removes the others
      expectOneFaultUnseen('open', error, searched, expected);
      expect(afterFailure).toEqual(expected);
      expect(listedAfterFailure).toEqual([0, 1, 2]);
      expect(reopenedAfterFailure).toEqual(expected);
      expect(await segmentFiles(dir)).toHaveLength(1);
      expect(await reopened(dir)).toEqual(await memory.search(QUERY));
    });
  });

  it('fails the flush whose folder listing fails, keeping its changes; the next write removes the replaced files', async () => {
    await withFeeds(1, async ({ dir, disk, memory, change }) => {
      // Prepare: a is replaced and d arrives; its segment (2) is merged with 1 into 3, then the folder is
      // listed to remove 1 and 2
      await change([doc('a', [2, 6]), doc('d', [4, 5])]);
      const expected = await memory.search(QUERY);
      faults.readdir = true;
      // Act
      const { error, searched } = await flushWhileSearching(disk);
      const afterFailure = await disk.search(QUERY);
      const filesAfterFailure = await segmentFiles(dir);
      const listedAfterFailure = await listed(dir);
      const reopenedAfterFailure = await reopened(dir);
      await change([], ['d']);
      await disk.flush();
      // Assess: the merged segment listed alone, 1 and 2 left over (not read) until the next write
      expectOneFaultUnseen('scandir', error, searched, expected);
      expect(afterFailure).toEqual(expected);
      expect(filesAfterFailure).toEqual(['f.words.1', 'f.words.2', 'f.words.3']);
      expect(listedAfterFailure).toEqual([0, 3]);
      expect(reopenedAfterFailure).toEqual(expected);
      expect(await segmentFiles(dir)).toEqual(['f.words.3']);
      expect(await reopened(dir)).toEqual(await memory.search(QUERY));
    });
  });
});
