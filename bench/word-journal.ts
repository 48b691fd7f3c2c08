/**
 * What saving the local visual-word index costs per import chunk (docs/benchmarks.md "Words saved per
 * import chunk"): a feed of 1,000 or 5,000 images (9,850 random words each, the packshots' average), then
 * five chunks of 32 more images, each followed by a timed `flush()`: appended to the journal (the default)
 * or rewriting the feed file (`journal: false`, as before the journal). Run: `npx tsx bench/word-journal.ts`.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';

const WORDS = 9850;
let seed = 1;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
const image = (i: number) => {
  const w = new Float64Array(WORDS);
  for (let k = 0; k < WORDS; k++) w[k] = Math.floor(rand() * 8 * 2 ** 32);
  w.sort();
  return { id: `f/p${i}/0`, feedId: 'f', productId: `p${i}`, itemGroupId: `p${i}`, words: w };
};
for (const size of [1000, 5000]) {
  for (const mode of ['journal', 'file'] as const) {
    const dir = await mkdtemp(join(tmpdir(), 'jc-'));
    const opts = mode === 'file' ? { journal: false } : {};
    const index = new LocalVisualWordIndex(dir, { journal: false });
    for (let i = 0; i < size; i += 500)
      await index.upsert(Array.from({ length: 500 }, (_, j) => image(i + j)));
    await index.flush();
    const measured = new LocalVisualWordIndex(dir, opts);
    await measured.search({ feedId: 'f', words: Float64Array.from([1]), k: 1 });
    const times: number[] = [];
    for (let c = 0; c < 5; c++) {
      await measured.upsert(Array.from({ length: 32 }, (_, j) => image(size + c * 32 + j)));
      const t = performance.now();
      await measured.flush();
      times.push(performance.now() - t);
    }
    const fileMb = (await stat(join(dir, 'f.words'))).size / 2 ** 20;
    const journalMb = await stat(join(dir, 'f.journal')).then(
      (s) => s.size / 2 ** 20,
      () => 0,
    );
    console.log(
      `${size} images, ${mode}: flush per 32-image chunk ${times.map((t) => t.toFixed(0)).join(' ')} ms; file ${fileMb.toFixed(0)} MB, journal ${journalMb.toFixed(1)} MB`,
    );
    await rm(dir, { recursive: true, force: true });
  }
}
